package ops

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Reduction says how an elementwise loss is combined, as PyTorch's
// reduction argument.
type Reduction int

const (
	ReduceMean Reduction = iota // mean over every element (PyTorch's default)
	ReduceSum                   // sum over every element
	ReduceNone                  // one loss per element, input's shape
)

func (r Reduction) String() string {
	switch r {
	case ReduceMean:
		return "mean"
	case ReduceSum:
		return "sum"
	case ReduceNone:
		return "none"
	}
	return fmt.Sprintf("Reduction(%d)", int(r))
}

// LossKind is the elementwise function of a PointLoss.
type LossKind int

const (
	LossMSE      LossKind = iota // (x-y)²
	LossL1                       // |x-y|
	LossSmoothL1                 // 0.5(x-y)²/β if |x-y| < β, else |x-y| - 0.5β
	LossHuber                    // 0.5(x-y)² if |x-y| < δ, else δ(|x-y| - 0.5δ)
	LossBCEWithLogits
)

var lossNames = [...]string{"MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCEWithLogitsLoss"}

func (k LossKind) String() string {
	if k >= 0 && int(k) < len(lossNames) {
		return lossNames[k]
	}
	return fmt.Sprintf("LossKind(%d)", int(k))
}

// PointLossConfig is a PointLoss's settings.
type PointLossConfig struct {
	Kind      LossKind
	Reduction Reduction
	// Param is SmoothL1's β (≥ 0; 0 is L1) or Huber's δ (> 0).
	Param float64
	// PosWeight, for BCEWithLogits only, weighs the positive term of each
	// element: one value for all, or one per entry of the last axis (per
	// class), as PyTorch's pos_weight. Empty is 1.
	PosWeight []float64
}

// PointLoss is an elementwise loss of input x against target y of the same
// shape, reduced as cfg says, in one op: the forward value and the gradient
// with respect to x are computed in float64 whatever the dtype. The target
// gets no gradient.
//
// BCEWithLogits is (1-y)·x + (1+(p-1)·y)·log(1+e^{-x}) with p the positive
// weight, computed as log(1+e^{-|x|}) + max(-x, 0) so that no logit
// overflows.
func PointLoss(x, y *G.Node, cfg PointLossConfig) (*G.Node, error) {
	what := cfg.Kind.String()
	if err := checkFloat(what+" input", x); err != nil {
		return nil, err
	}
	if err := checkFloat(what+" target", y); err != nil {
		return nil, err
	}
	if err := sameDtype(what+" target", x, y); err != nil {
		return nil, err
	}
	if !x.Shape().Eq(y.Shape()) {
		return nil, fmt.Errorf("%s: input has shape %v but target has %v: give both the same shape", what, x.Shape(), y.Shape())
	}
	if cfg.Kind < LossMSE || cfg.Kind > LossBCEWithLogits {
		return nil, fmt.Errorf("PointLoss: unknown kind %v", cfg.Kind)
	}
	if cfg.Reduction < ReduceMean || cfg.Reduction > ReduceNone {
		return nil, fmt.Errorf("%s: unknown reduction %v: use ReduceMean, ReduceSum or ReduceNone", what, cfg.Reduction)
	}
	switch cfg.Kind {
	case LossSmoothL1:
		if !(cfg.Param >= 0) || math.IsInf(cfg.Param, 0) {
			return nil, fmt.Errorf("%s: beta is %v: want a finite beta ≥ 0 (PyTorch's default is 1)", what, cfg.Param)
		}
	case LossHuber:
		if !(cfg.Param > 0) || math.IsInf(cfg.Param, 0) {
			return nil, fmt.Errorf("%s: delta is %v: want a finite delta > 0 (PyTorch's default is 1)", what, cfg.Param)
		}
	}
	var last int
	if s := x.Shape(); len(s) > 0 {
		last = s[len(s)-1]
	}
	if len(cfg.PosWeight) > 0 {
		if cfg.Kind != LossBCEWithLogits {
			return nil, fmt.Errorf("%s: PosWeight is for BCEWithLogits only", what)
		}
		if len(cfg.PosWeight) != 1 && len(cfg.PosWeight) != last {
			return nil, fmt.Errorf("%s: PosWeight has %d values but the input's last axis has %d (shape %v): give 1 or %d", what, len(cfg.PosWeight), last, x.Shape(), last)
		}
		for i, p := range cfg.PosWeight {
			if !(p >= 0) || math.IsInf(p, 0) {
				return nil, fmt.Errorf("%s: PosWeight[%d] is %v: want a finite weight ≥ 0", what, i, p)
			}
		}
	}
	op := &pointLossOp{base: newBase(what), cfg: cfg, shape: x.Shape().Clone(), last: max(last, 1)}
	op.cfg.PosWeight = append([]float64(nil), cfg.PosWeight...)
	return apply(op, x, y)
}

type pointLossOp struct {
	base
	cfg   PointLossConfig
	shape tensor.Shape
	last  int
	out   buffer
	sout  scalarBuffer
	// d is dloss/dx per element (before reduction and the incoming
	// gradient), filled by each forward run for the backward op (unless
	// keepsD says the gradient op needs none).
	d []float64
	// parts are the partial sums of the loss, lossChunk elements each.
	parts []float64
}

func (op *pointLossOp) dims() int {
	if op.cfg.Reduction == ReduceNone {
		return len(op.shape)
	}
	return 0
}

func (op *pointLossOp) Arity() int { return 2 }
func (op *pointLossOp) Type() hm.Type {
	return fnType(op.dims(), len(op.shape), len(op.shape))
}
func (op *pointLossOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	if op.cfg.Reduction == ReduceNone {
		return op.shape.Clone(), nil
	}
	return tensor.ScalarShape(), nil
}
func (op *pointLossOp) DiffWRT(int) []bool { return []bool{true, false} }

func (op *pointLossOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	x, err := dense(op, "input", v[0], dt, op.shape)
	if err != nil {
		return nil, err
	}
	y, err := dense(op, "target", v[1], dt, op.shape)
	if err != nil {
		return nil, err
	}
	n := op.shape.TotalSize()
	if op.keepsD() {
		op.d = grow(op.d, n)
	}
	op.parts = grow(op.parts, max(1, (n+lossChunk-1)/lossChunk))
	if op.cfg.Reduction == ReduceNone {
		out := op.out.get(dt, op.shape)
		if dt == tensor.Float32 {
			pointLossPar(op, data[float32](x), data[float32](y), data[float32](out))
		} else {
			pointLossPar(op, data[float64](x), data[float64](y), data[float64](out))
		}
		return out, nil
	}
	var total float64
	if dt == tensor.Float32 {
		total = pointLossPar[float32](op, data[float32](x), data[float32](y), nil)
	} else {
		total = pointLossPar[float64](op, data[float64](x), data[float64](y), nil)
	}
	if op.cfg.Reduction == ReduceMean {
		total /= float64(n)
	}
	return op.sout.set(dt, total), nil
}

// lossChunk is how many elements each partial sum of a loss covers: the
// sum over a larger output is the sum of its chunks' partial sums in chunk
// order, so that the chunks can be split between the loop workers with the
// same bits for any count of them (an output of at most lossChunk elements
// is one sum, as it always was). Tests lower it.
var lossChunk = 1 << 16

// pointLossPar writes each element's loss into out (when not nil), its
// derivative into op.d, and returns the sum, the chunks split between the
// loop workers when the output is large.
func pointLossPar[T float](op *pointLossOp, x, y, out []T) float64 {
	n := len(x)
	chunks := len(op.parts)
	if w := workers(n, 1); w > 1 && chunks > 1 {
		parallelLoop(loopPointLoss, min(w, chunks), chunks, x, y, out, loopArgs{loss: op})
	} else {
		pointLossChunks(op, x, y, out, 0, chunks)
	}
	total := op.parts[0]
	for _, p := range op.parts[1:] {
		total += p
	}
	return total
}

// pointLossChunks writes chunks [lo, hi)'s losses, derivatives and partial
// sums (op.parts).
func pointLossChunks[T float](op *pointLossOp, x, y, out []T, lo, hi int) {
	for k := lo; k < hi; k++ {
		a, b := k*lossChunk, min(len(x), (k+1)*lossChunk)
		var o []T
		if out != nil {
			o = out[a:b]
		}
		op.parts[k] = pointLoss(op, x[a:b], y[a:b], o, a)
	}
}

// pointLoss writes the losses of elements [at, at+len(x)) into out (when not
// nil), their derivatives into op.d, and returns their sum.
func pointLoss[T float](op *pointLossOp, x, y, out []T, at int) float64 {
	if !op.keepsD() {
		return mseLoss(x, y)
	}
	d := op.d[at : at+len(x)]
	var sum float64
	c := op.cfg
	for i := range x {
		xi, yi := float64(x[i]), float64(y[i])
		var l, dl float64
		switch c.Kind {
		case LossMSE:
			r := xi - yi
			l, dl = r*r, 2*r
		case LossL1:
			r := xi - yi
			l, dl = math.Abs(r), sign(r)
		case LossSmoothL1:
			r := xi - yi
			if a := math.Abs(r); a < c.Param {
				l, dl = 0.5*r*r/c.Param, r/c.Param
			} else {
				l, dl = a-0.5*c.Param, sign(r)
			}
		case LossHuber:
			r := xi - yi
			if a := math.Abs(r); a < c.Param {
				l, dl = 0.5*r*r, r
			} else {
				l, dl = c.Param*(a-0.5*c.Param), c.Param*sign(r)
			}
		case LossBCEWithLogits:
			p := 1.0
			switch len(c.PosWeight) {
			case 1:
				p = c.PosWeight[0]
			case 0:
			default:
				p = c.PosWeight[(at+i)%op.last]
			}
			w := 1 + (p-1)*yi
			// softplus(-x) = log(1+e^{-|x|}) + max(-x, 0); its derivative
			// is -sigmoid(-x).
			sp := math.Log1p(math.Exp(-math.Abs(xi))) + math.Max(-xi, 0)
			l = (1-yi)*xi + w*sp
			dl = (1 - yi) - w*sigmoid(-xi)
		}
		d[i] = dl
		sum += l
		if out != nil {
			out[i] = T(l)
		}
	}
	return sum
}

// keepsD reports whether the forward keeps each element's derivative for
// the gradient op: all but a reduced MSE, whose gradient op computes
// 2(x-y) again from x and y, which costs less than writing and reading
// them back (8 bytes an element each way).
func (op *pointLossOp) keepsD() bool {
	return op.cfg.Kind != LossMSE || op.cfg.Reduction == ReduceNone
}

// mseLoss is pointLoss's sum for a reduced MSE: the same values, the sum
// in four float64 accumulators (one chain of additions cost 4 cycles an
// element: 1.3 ms for a 32x32x32x32 output, more than the convolution
// before it).
func mseLoss[T float](x, y []T) float64 {
	n := len(x)
	y = y[:n]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= n; i += 4 {
		r0, r1 := float64(x[i])-float64(y[i]), float64(x[i+1])-float64(y[i+1])
		r2, r3 := float64(x[i+2])-float64(y[i+2]), float64(x[i+3])-float64(y[i+3])
		s0 += r0 * r0
		s1 += r1 * r1
		s2 += r2 * r2
		s3 += r3 * r3
	}
	for ; i < n; i++ {
		r := float64(x[i]) - float64(y[i])
		s0 += r * r
	}
	return (s0 + s1) + (s2 + s3)
}

func sign(r float64) float64 {
	switch {
	case r > 0:
		return 1
	case r < 0:
		return -1
	}
	return 0
}

func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

func (op *pointLossOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := apply(&pointLossGradOp{base: newBase(op.kind + "Grad"), fwd: op}, output, grad, inputs[0], inputs[1])
	if err != nil {
		return nil, err
	}
	return G.Nodes{d, nil}, nil
}

// pointLossGradOp is g·d (elementwise for ReduceNone; g/n·d for the mean),
// d from the forward op's cache, or for a reduced MSE 2(x-y) from x and y
// again: (loss, g, x, y) → dx. Taking the loss node as input orders it
// after the forward run that filled the cache.
type pointLossGradOp struct {
	base
	noDiff
	fwd *pointLossOp
	out buffer
}

func (op *pointLossGradOp) Arity() int { return 4 }
func (op *pointLossGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	in := tensorType(op.fwd.dims(), a)
	xt := tensorType(len(op.fwd.shape), a)
	return hm.NewFnType(in, in, xt, xt, xt)
}
func (op *pointLossGradOp) DiffWRT(int) []bool { return []bool{false, false, false, false} }
func (op *pointLossGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.fwd.shape.Clone(), nil
}

func (op *pointLossGradOp) Do(v ...G.Value) (G.Value, error) {
	f := op.fwd
	dt := v[0].Dtype()
	out := op.out.get(dt, f.shape)
	var x, y *tensor.Dense
	if !f.keepsD() {
		var err error
		if x, err = dense(op, "input", v[2], dt, f.shape); err != nil {
			return nil, err
		}
		if y, err = dense(op, "target", v[3], dt, f.shape); err != nil {
			return nil, err
		}
	}
	if f.cfg.Reduction == ReduceNone {
		g, err := dense(op, "loss gradient", v[1], dt, f.shape)
		if err != nil {
			return nil, err
		}
		if dt == tensor.Float32 {
			lossGradPar(loopScaleByEach, f, x, y, 0, data[float32](g), data[float32](out))
		} else {
			lossGradPar(loopScaleByEach, f, x, y, 0, data[float64](g), data[float64](out))
		}
		return out, nil
	}
	g, err := scalarOf(v[1])
	if err != nil {
		return nil, fmt.Errorf("%v: loss gradient: %w", op, err)
	}
	if f.cfg.Reduction == ReduceMean {
		g /= float64(f.shape.TotalSize())
	}
	if dt == tensor.Float32 {
		lossGradPar[float32](loopScaleBy, f, x, y, g, nil, data[float32](out))
	} else {
		lossGradPar[float64](loopScaleBy, f, x, y, g, nil, data[float64](out))
	}
	return out, nil
}

// lossGradPar writes out = g·d (kind loopScaleBy) or gs·d elementwise
// (loopScaleByEach), d the forward's derivatives, or for a reduced MSE
// g·2(x-y) (x and y given), split between the loop workers when large.
func lossGradPar[T float](kind loopKind, f *pointLossOp, x, y *tensor.Dense, g float64, gs, out []T) {
	a, b := gs, []T(nil)
	if x != nil {
		a, b, kind = data[T](x), data[T](y), loopMSEGrad
	}
	if w := workers(len(out), 1); w > 1 {
		parallelLoop(kind, w, len(out), a, b, out, loopArgs{d: f.d, scale: g})
		return
	}
	lossGrad(kind, f.d, g, a, b, out, 0, len(out))
}

// lossGrad is lossGradPar's loop over [lo, hi): a is gs, or x with y in b.
func lossGrad[T float](kind loopKind, d []float64, g float64, a, b, out []T, lo, hi int) {
	switch kind {
	case loopScaleBy:
		scaleBy(d[lo:hi], g, out[lo:hi])
	case loopScaleByEach:
		scaleByEach(d[lo:hi], a[lo:hi], out[lo:hi])
	case loopMSEGrad:
		mseGrad(a[lo:hi], b[lo:hi], g, out[lo:hi])
	}
}

// mseGrad is scaleBy with d = 2(x-y), computed as the generic loop
// computes d (the same bits as from its cache).
func mseGrad[T float](x, y []T, g float64, out []T) {
	y, out = y[:len(x)], out[:len(x)]
	for i, v := range x {
		out[i] = T(g * (2 * (float64(v) - float64(y[i]))))
	}
}

func scaleBy[T float](d []float64, g float64, out []T) {
	for i, x := range d {
		out[i] = T(g * x)
	}
}

func scaleByEach[T float](d []float64, g, out []T) {
	for i, x := range d {
		out[i] = T(float64(g[i]) * x)
	}
}
