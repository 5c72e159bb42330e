package ops

import (
	"fmt"
	"unsafe"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BatchNormArgs are one BatchNorm's operands, as BatchNorm takes them.
type BatchNormArgs struct {
	X, Gamma, Beta *G.Node
	Stats          BatchNormStats
	// Opts are BatchNorm's; ReLU must be false (the ReLU comes after the sum).
	Opts BatchNormOpts
}

// BatchNormAddReLU is max(0, BatchNorm(bn) + shortcut): the end of a
// ResNet block with an identity shortcut, in one op. Apart from the
// statistics (one read of bn.X) it makes one pass over memory, reading
// bn.X and shortcut and writing the output, where BatchNorm then AddReLU
// write the normalised tensor and read it back. Its backward masks the
// output gradient and sums it for the BatchNorm's gradients in one pass;
// the masked gradient is shortcut's gradient.
func BatchNormAddReLU(bn BatchNormArgs, shortcut *G.Node) (*G.Node, error) {
	if shortcut == nil {
		return nil, fmt.Errorf("BatchNormAddReLU needs a shortcut node: use BatchNormAddBatchNormReLU for a normalised one")
	}
	return batchNormAddReLU("BatchNormAddReLU", shortcut, bn)
}

// BatchNormAddBatchNormReLU is max(0, BatchNorm(a) + BatchNorm(b)): the end
// of a ResNet block whose shortcut is normalised too (a projection), in one
// op, as BatchNormAddReLU.
func BatchNormAddBatchNormReLU(a, b BatchNormArgs) (*G.Node, error) {
	return batchNormAddReLU("BatchNormAddBatchNormReLU", nil, a, b)
}

func batchNormAddReLU(what string, shortcut *G.Node, bns ...BatchNormArgs) (*G.Node, error) {
	op := &bnAddOp{base: newBase(what), shortcut: shortcut != nil}
	var children []*G.Node
	for i, a := range bns {
		name := what
		if len(bns) > 1 {
			name = fmt.Sprintf("%s BatchNorm %d", what, i+1)
		}
		if a.Opts.ReLU {
			return nil, fmt.Errorf("%s has Opts.ReLU set: the ReLU follows the sum, leave it false", name)
		}
		bn, ch, err := newBNOp(name, a.X, a.Gamma, a.Beta, a.Stats, a.Opts)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			if err := sameDtype(name+" input", bns[0].X, a.X); err != nil {
				return nil, err
			}
			if !a.X.Shape().Eq(op.shape) {
				return nil, fmt.Errorf("%s inputs have shapes %v and %v: they must be equal", what, op.shape, a.X.Shape())
			}
		}
		op.bns = append(op.bns, bn)
		op.shape = bn.shape
		children = append(children, ch...)
	}
	if shortcut != nil {
		if err := checkFloat(what+" shortcut", shortcut); err != nil {
			return nil, err
		}
		if err := sameDtype(what+" shortcut", bns[0].X, shortcut); err != nil {
			return nil, err
		}
		if !shortcut.Shape().Eq(op.shape) {
			return nil, fmt.Errorf("%s input has shape %v and shortcut %v: they must be equal", what, op.shape, shortcut.Shape())
		}
		children = append(children, shortcut)
	}
	return apply(op, children...)
}

// bnAddOp is max(0, x₁·scale₁ + shift₁ + t) with t the shortcut, or
// x₂·scale₂ + shift₂ of a second BatchNorm: (x₁[, γ₁, β₁][, x₂[, γ₂, β₂]][,
// shortcut]) → like x₁. Each BatchNorm's statistics and gradients are its
// bnOp's, which is never applied as an op of its own.
type bnAddOp struct {
	base
	bns      []*bnOp // one with shortcut, else two
	shortcut bool
	shape    tensor.Shape
	out      buffer
	// scale, shift and x₂'s scale per channel of the fused pass.
	a, b, k []float64
}

func (op *bnAddOp) Arity() int {
	n := 0
	for _, bn := range op.bns {
		n += bn.Arity()
	}
	if op.shortcut {
		n++
	}
	return n
}

func (op *bnAddOp) Type() hm.Type {
	d := len(op.shape)
	var in []int
	for _, bn := range op.bns {
		in = append(in, d)
		if bn.affine {
			in = append(in, 1, 1)
		}
	}
	if op.shortcut {
		in = append(in, d)
	}
	return fnType(d, in...)
}

func (op *bnAddOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }

func (op *bnAddOp) DiffWRT(int) []bool {
	d := make([]bool, op.Arity())
	for i := range d {
		d[i] = true
	}
	return d
}

func (op *bnAddOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	var xs [2]*tensor.Dense
	i := 0
	for j, bn := range op.bns {
		x, err := dense(op, "input", v[i], dt, op.shape)
		if err != nil {
			return nil, err
		}
		var gamma, beta *tensor.Dense
		if bn.affine {
			if gamma, err = dense(op, "gamma", v[i+1], dt, tensor.Shape{bn.c}); err != nil {
				return nil, err
			}
			if beta, err = dense(op, "beta", v[i+2], dt, tensor.Shape{bn.c}); err != nil {
				return nil, err
			}
		}
		if dt == tensor.Float32 {
			err = bnPrepare[float32](bn, x, gamma, beta)
		} else {
			err = bnPrepare[float64](bn, x, gamma, beta)
		}
		if err != nil {
			return nil, err
		}
		xs[j] = x
		i += bn.Arity()
	}
	if op.shortcut {
		t, err := dense(op, "shortcut", v[i], dt, op.shape)
		if err != nil {
			return nil, err
		}
		xs[1] = t
	}
	first := op.bns[0]
	c := first.c
	op.a, op.b, op.k = grow(op.a, c), grow(op.b, c), grow(op.k, c)
	for ch := 0; ch < c; ch++ {
		op.a[ch], op.b[ch], op.k[ch] = first.scale[ch], 1, first.shift[ch]
		if !op.shortcut {
			second := op.bns[1]
			op.b[ch], op.k[ch] = second.scale[ch], first.shift[ch]+second.shift[ch]
		}
	}
	y := op.out.get(dt, op.shape)
	if dt == tensor.Float32 {
		bnAddPar(op, data[float32](xs[0]), data[float32](xs[1]), data[float32](y))
	} else {
		bnAddPar(op, data[float64](xs[0]), data[float64](xs[1]), data[float64](y))
	}
	return y, nil
}

func bnAddPar[T float](op *bnAddOp, x1, x2, y []T) {
	planes := op.bns[0].n * op.bns[0].c
	if w := workers(planes, op.bns[0].inner); w > 1 {
		parallelLoop(loopBNAdd, w, planes, x1, x2, y, loopArgs{bnAdd: op})
		return
	}
	bnAdd(op, x1, x2, y, 0, planes)
}

// bnAdd writes y = max(0, a·x₁ + (b·x₂ + k)) for planes [lo, hi), with a, b
// and k the plane's channel's.
func bnAdd[T float](op *bnAddOp, x1, x2, y []T, lo, hi int) {
	inner, c := op.bns[0].inner, op.bns[0].c
	for p := lo; p < hi; p++ {
		a, b, k := T(op.a[p%c]), T(op.b[p%c]), T(op.k[p%c])
		s1, s2, dst := x1[p*inner:(p+1)*inner], x2[p*inner:(p+1)*inner], y[p*inner:(p+1)*inner]
		s2, dst = s2[:len(s1)], dst[:len(s1)]
		if is32[T]() && (useAVX512 || useAVX2) && len(s1) > 0 {
			if useAVX512 {
				bnAddRelu32(f32p(s1), f32p(s2), f32p(dst), len(s1), float32(a), float32(b), float32(k))
			} else {
				bnAddRelu32AVX2(f32p(s1), f32p(s2), f32p(dst), len(s1), float32(a), float32(b), float32(k))
			}
			continue
		}
		for i, e := range s1 {
			dst[i] = max(a*e+(b*s2[i]+k), 0)
		}
	}
}

// SymDiff gives each BatchNorm's gradients (maskedBackward) and, as the
// shortcut's, the masked output gradient.
func (op *bnAddOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	grads, dm, err := maskedBackward(op.kind+"Grad", op.bns, inputs, output, grad)
	if err != nil {
		return nil, err
	}
	if op.shortcut {
		grads = append(grads, dm)
	}
	return grads, nil
}

// maskedBackward differentiates a ReLU over a sum of BatchNorms (one
// BatchNorm+ReLU, or BatchNormAddReLU's) whose inputs (x, gamma and beta
// each) lead inputs, with output the ReLU's. It makes the masked output
// gradient dm (one node, which also sums Σdm and Σdm·x̂ per BatchNorm) and,
// per BatchNorm, the input gradient from dm and, when affine, the gamma and
// beta gradients read from those sums. It returns the gradients in input
// order, and dm.
func maskedBackward(kind string, bns []*bnOp, inputs G.Nodes, output, grad *G.Node) (G.Nodes, *G.Node, error) {
	in := []*G.Node{output, grad}
	i := 0
	for _, bn := range bns {
		in = append(in, inputs[i])
		i += bn.Arity()
	}
	dm, err := apply(&bnMaskOp{base: newBase(kind), bns: bns}, in...)
	if err != nil {
		return nil, nil, err
	}
	var grads G.Nodes
	i = 0
	for _, bn := range bns {
		x := inputs[i]
		if !bn.affine {
			dx, err := apply(&bnGradInputOp{base: newBase("BatchNormGradInput"), fwd: bn, masked: true}, x, output, dm)
			if err != nil {
				return nil, nil, err
			}
			grads = append(grads, dx)
			i++
			continue
		}
		dgamma, err := apply(&bnGradBetaOp{base: newBase("BatchNormGradGamma"), fwd: bn, gamma: true, inDims: len(bn.shape)}, dm)
		if err != nil {
			return nil, nil, err
		}
		dbeta, err := apply(&bnGradBetaOp{base: newBase("BatchNormGradBeta"), fwd: bn}, dgamma)
		if err != nil {
			return nil, nil, err
		}
		dx, err := apply(&bnGradInputOp{base: newBase("BatchNormGradInput"), fwd: bn, masked: true}, x, output, dm, inputs[i+1], dgamma)
		if err != nil {
			return nil, nil, err
		}
		grads = append(grads, dx, dgamma, dbeta)
		i += 3
	}
	return grads, dm, nil
}

// bnMaskOp is dy' = dy where the ReLU's output y > 0, else 0, which it
// also sums per BatchNorm into Σdy' and Σdy'·x̂ (each bnOp's sumDy and
// sumDyXh): (y, dy, x₁[, x₂]) → like y.
type bnMaskOp struct {
	base
	noDiff
	bns []*bnOp // one or two, of one shape
	out buffer
	// x₁, x₂ and DoSum's second summand of dy: their elements ([]T of xn)
	// while Do runs, for the loop workers (a slice in an interface would
	// allocate).
	xp [3]unsafe.Pointer
	xn int
}

var _ SumInputDoer = (*bnMaskOp)(nil)

func (op *bnMaskOp) Arity() int         { return 2 + len(op.bns) }
func (op *bnMaskOp) DiffWRT(int) []bool { return make([]bool, op.Arity()) }
func (op *bnMaskOp) Type() hm.Type {
	d := len(op.bns[0].shape)
	in := []int{d, d, d}
	if len(op.bns) > 1 {
		in = append(in, d)
	}
	return fnType(d, in...)
}
func (op *bnMaskOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.bns[0].shape.Clone(), nil
}

func (op *bnMaskOp) Do(v ...G.Value) (G.Value, error) { return op.do(v[1], nil, v) }

// SumInput is the output gradient's index: DoSum takes it as two summands.
func (op *bnMaskOp) SumInput() int { return 1 }

// DoSum is Do with the output gradient a + b, added plane by plane in the
// masking pass (the same bits as adding first).
func (op *bnMaskOp) DoSum(a, b G.Value, v ...G.Value) (G.Value, error) { return op.do(a, b, v) }

func (op *bnMaskOp) do(dyv, dyb G.Value, v []G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	shape := op.bns[0].shape
	y, err := dense(op, "output", v[0], dt, shape)
	if err != nil {
		return nil, err
	}
	// xs: x₁, x₂ and the second summand of dy.
	var xs [3]*tensor.Dense
	dy, err := dense(op, "output gradient", dyv, dt, shape)
	if err != nil {
		return nil, err
	}
	if dyb != nil {
		if xs[2], err = dense(op, "output gradient's second summand", dyb, dt, shape); err != nil {
			return nil, err
		}
	}
	for i := range op.bns {
		if xs[i], err = dense(op, "input", v[2+i], dt, shape); err != nil {
			return nil, err
		}
	}
	dm := op.out.get(dt, shape)
	if dt == tensor.Float32 {
		bnMask[float32](op, y, dy, dm, xs)
	} else {
		bnMask[float64](op, y, dy, dm, xs)
	}
	return dm, nil
}

func bnMask[T float](op *bnMaskOp, yt, dyt, dmt *tensor.Dense, xs [3]*tensor.Dense) {
	first := op.bns[0]
	planes := first.n * first.c
	for i, x := range xs {
		if x != nil {
			d := data[T](x)
			op.xp[i], op.xn = unsafe.Pointer(unsafe.SliceData(d)), len(d)
		}
	}
	for _, bn := range op.bns {
		bn.parts = grow(bn.parts, 2*planes)
	}
	y, dy, dm := data[T](yt), data[T](dyt), data[T](dmt)
	if w := workers(planes, first.inner); w > 1 {
		parallelLoop(loopBNMask, w, planes, y, dy, dm, loopArgs{bnMask: op})
	} else {
		bnMaskSums(op, y, dy, dm, 0, planes)
	}
	op.xp = [3]unsafe.Pointer{}
	for _, bn := range op.bns {
		bn.finishSums()
	}
}

// bnMaskSums masks planes [lo, hi) of dy (plus DoSum's second summand)
// into dm and sums each masked plane, while it is in cache, into every
// BatchNorm's parts.
func bnMaskSums[T float](op *bnMaskOp, y, dy, dm []T, lo, hi int) {
	inner := op.bns[0].inner
	x1 := unsafe.Slice((*T)(op.xp[0]), op.xn)
	var x2, dyb []T
	if len(op.bns) > 1 {
		x2 = unsafe.Slice((*T)(op.xp[1]), op.xn)
	}
	if op.xp[2] != nil {
		dyb = unsafe.Slice((*T)(op.xp[2]), op.xn)
	}
	for p := lo; p < hi; p++ {
		m := dm[p*inner : (p+1)*inner]
		yp, d, xp := y[p*inner:(p+1)*inner], dy[p*inner:(p+1)*inner], x1[p*inner:(p+1)*inner]
		bn := op.bns[0]
		if dyb != nil {
			bn.parts[2*p], bn.parts[2*p+1] = maskAddDotSums(yp, d, dyb[p*inner:(p+1)*inner], xp, m)
		} else {
			bn.parts[2*p], bn.parts[2*p+1] = maskDotSums(yp, d, xp, m)
		}
		if x2 != nil {
			bn = op.bns[1]
			bn.parts[2*p], bn.parts[2*p+1] = dotSums(m, x2[p*inner:(p+1)*inner])
		}
	}
}

// maskDotSums is maskPos(y, dy, dm) then dotSums(dm, x): one loop over the
// four slices where the kernel allows, with the same results.
func maskDotSums[T float](y, dy, x, dm []T) (s, sx float64) {
	if is32[T]() && useAVX512 && len(y) > 0 {
		dy, x, dm = dy[:len(y)], x[:len(y)], dm[:len(y)]
		s32, sx32 := maskDotSums32(f32p(y), f32p(dy), f32p(x), f32p(dm), len(y))
		return float64(s32), float64(sx32)
	}
	maskPos(y, dy, dm)
	return dotSums(dm, x)
}

// maskAddDotSums is maskDotSums(y, a + b, x, dm), adding in the same loop
// where the kernel allows: the same bits as adding into dm first.
func maskAddDotSums[T float](y, a, b, x, dm []T) (s, sx float64) {
	if is32[T]() && useAVX512 && len(y) > 0 {
		a, b, x, dm = a[:len(y)], b[:len(y)], x[:len(y)], dm[:len(y)]
		s32, sx32 := maskAddDotSums32(f32p(y), f32p(a), f32p(b), f32p(x), f32p(dm), len(y))
		return float64(s32), float64(sx32)
	}
	add(a, b, dm)
	return maskDotSums(y, dm, x, dm)
}
