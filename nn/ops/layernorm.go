package ops

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// LayerNorm normalises x over its last len(normShape) axes, which must be
// normShape, as PyTorch's nn.LayerNorm: each row of D = prod(normShape)
// elements becomes (x - mean)/√(var + eps) with the biased variance,
// then ·gamma + beta elementwise when gamma and beta (both of shape
// normShape) are given; give neither for elementwise_affine=False. The
// mean and variance are computed in float64, the variance from the
// deviations (two passes).
func LayerNorm(x, gamma, beta *G.Node, normShape []int, eps float64) (*G.Node, error) {
	const what = "LayerNorm"
	if err := checkFloat(what+" input", x); err != nil {
		return nil, err
	}
	if len(normShape) == 0 {
		return nil, fmt.Errorf("%s: the normalised shape is empty: give the sizes of the last axes to normalise over, as [features]", what)
	}
	d := 1
	for _, n := range normShape {
		if n < 1 {
			return nil, fmt.Errorf("%s: normalised shape %v has a size below 1", what, normShape)
		}
		d *= n
	}
	if !(eps > 0) || math.IsInf(eps, 0) {
		return nil, fmt.Errorf("%s: eps is %v: want a small positive value (PyTorch's default is 1e-5)", what, eps)
	}
	s := x.Shape()
	k := len(normShape)
	if len(s) < k || !tensor.Shape(s[len(s)-k:]).Eq(tensor.Shape(normShape)) {
		return nil, fmt.Errorf("%s input has shape %v, want its last axes to be the normalised shape %v", what, s, tensor.Shape(normShape))
	}
	if (gamma == nil) != (beta == nil) {
		return nil, fmt.Errorf("%s: give both gamma and beta, or neither (no elementwise affine)", what)
	}
	if gamma != nil {
		for _, p := range []struct {
			name string
			n    *G.Node
		}{{"gamma", gamma}, {"beta", beta}} {
			if err := checkFloat(what+" "+p.name, p.n); err != nil {
				return nil, err
			}
			if err := sameDtype(what+" "+p.name, x, p.n); err != nil {
				return nil, err
			}
			if !p.n.Shape().Eq(tensor.Shape(normShape)) {
				return nil, fmt.Errorf("%s %s has shape %v, want the normalised shape %v (input %v)", what, p.name, p.n.Shape(), tensor.Shape(normShape), s)
			}
		}
	}
	op := &layerNormOp{base: newBase(what), dims: len(s), pdims: k, d: d, rows: s.TotalSize() / d, eps: eps, affine: gamma != nil}
	if gamma != nil {
		return apply(op, x, gamma, beta)
	}
	return apply(op, x)
}

type layerNormOp struct {
	base
	dims, pdims int // input and parameter dimensions
	d, rows     int
	eps         float64
	affine      bool
	out         buffer
	// Cache for the backward ops, filled by each forward run.
	mean, rstd []float64
}

func (op *layerNormOp) Arity() int {
	if op.affine {
		return 3
	}
	return 1
}

func (op *layerNormOp) Type() hm.Type {
	if op.affine {
		return fnType(op.dims, op.dims, op.pdims, op.pdims)
	}
	return fnType(op.dims, op.dims)
}

func (op *layerNormOp) DiffWRT(int) []bool {
	if op.affine {
		return []bool{true, true, true}
	}
	return []bool{true}
}

func (op *layerNormOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return shapeOf(in[0]).Clone(), nil
}

// input reads x and checks it still has the graph's element count.
func (op *layerNormOp) input(opn fmt.Stringer, v G.Value) (*tensor.Dense, error) {
	x, err := dense(opn, "input", v, v.Dtype(), nil)
	if err != nil {
		return nil, err
	}
	if x.Shape().TotalSize() != op.rows*op.d {
		return nil, fmt.Errorf("%v: input has shape %v: the graph was built for %d rows of %d", opn, x.Shape(), op.rows, op.d)
	}
	return x, nil
}

func (op *layerNormOp) params(opn fmt.Stringer, v []G.Value, dt tensor.Dtype) (g, b *tensor.Dense, err error) {
	if !op.affine {
		return nil, nil, nil
	}
	if g, err = dense(opn, "gamma", v[0], dt, nil); err != nil {
		return nil, nil, err
	}
	if b, err = dense(opn, "beta", v[1], dt, nil); err != nil {
		return nil, nil, err
	}
	if g.Shape().TotalSize() != op.d || b.Shape().TotalSize() != op.d {
		return nil, nil, fmt.Errorf("%v: gamma %v and beta %v must hold %d values each", opn, g.Shape(), b.Shape(), op.d)
	}
	return g, b, nil
}

func (op *layerNormOp) Do(v ...G.Value) (G.Value, error) {
	x, err := op.input(op, v[0])
	if err != nil {
		return nil, err
	}
	gt, bt, err := op.params(op, v[1:], x.Dtype())
	if err != nil {
		return nil, err
	}
	y := op.out.get(x.Dtype(), x.Shape())
	op.mean = grow(op.mean, op.rows)
	op.rstd = grow(op.rstd, op.rows)
	if x.Dtype() == tensor.Float32 {
		layerNorm(op, data[float32](x), optData[float32](gt), optData[float32](bt), data[float32](y))
	} else {
		layerNorm(op, data[float64](x), optData[float64](gt), optData[float64](bt), data[float64](y))
	}
	return y, nil
}

func optData[T float](d *tensor.Dense) []T {
	if d == nil {
		return nil
	}
	return data[T](d)
}

func layerNorm[T float](op *layerNormOp, x, g, b, y []T) {
	d := op.d
	for r := 0; r < op.rows; r++ {
		row, out := x[r*d:(r+1)*d], y[r*d:(r+1)*d]
		var sum float64
		for _, v := range row {
			sum += float64(v)
		}
		mean := sum / float64(d)
		var ss float64
		for _, v := range row {
			dv := float64(v) - mean
			ss += dv * dv
		}
		rstd := 1 / math.Sqrt(ss/float64(d)+op.eps)
		op.mean[r], op.rstd[r] = mean, rstd
		if g == nil {
			for j, v := range row {
				out[j] = T((float64(v) - mean) * rstd)
			}
			continue
		}
		for j, v := range row {
			out[j] = T((float64(v)-mean)*rstd*float64(g[j]) + float64(b[j]))
		}
	}
}

// SymDiff makes the input gradient and, with the affine, the gamma and the
// beta gradients: three ops, each reading the forward op's mean and
// 1/std, each taking the output so that the tape orders them after it.
func (op *layerNormOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	x := inputs[0]
	ch := []*G.Node{x, output, grad}
	if op.affine {
		ch = append(ch, inputs[1])
	}
	dx, err := apply(&layerNormGradOp{base: newBase("LayerNormGradInput"), fwd: op, part: lnInput}, ch...)
	if err != nil || !op.affine {
		return G.Nodes{dx}, err
	}
	dg, err := apply(&layerNormGradOp{base: newBase("LayerNormGradGamma"), fwd: op, part: lnGamma}, x, output, grad)
	if err != nil {
		return nil, err
	}
	db, err := apply(&layerNormGradOp{base: newBase("LayerNormGradBeta"), fwd: op, part: lnBeta}, x, output, grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx, dg, db}, nil
}

type lnPart int

const (
	lnInput lnPart = iota
	lnGamma
	lnBeta
)

// layerNormGradOp is one of LayerNorm's gradients: (x, y, dy[, gamma]) →
// dx of x's shape, or (x, y, dy) → dgamma or dbeta of the normalised shape.
type layerNormGradOp struct {
	base
	noDiff
	fwd  *layerNormOp
	part lnPart
	out  buffer
	acc  []float64
}

func (op *layerNormGradOp) Arity() int {
	if op.part == lnInput && op.fwd.affine {
		return 4
	}
	return 3
}

func (op *layerNormGradOp) Type() hm.Type {
	f := op.fwd
	if op.part != lnInput {
		return fnType(f.pdims, f.dims, f.dims, f.dims)
	}
	if f.affine {
		return fnType(f.dims, f.dims, f.dims, f.dims, f.pdims)
	}
	return fnType(f.dims, f.dims, f.dims, f.dims)
}

func (op *layerNormGradOp) DiffWRT(int) []bool { return make([]bool, op.Arity()) }

func (op *layerNormGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s := shapeOf(in[0])
	if op.part == lnInput {
		return s.Clone(), nil
	}
	return s[len(s)-op.fwd.pdims:].Clone(), nil
}

func (op *layerNormGradOp) Do(v ...G.Value) (G.Value, error) {
	f := op.fwd
	x, err := f.input(op, v[0])
	if err != nil {
		return nil, err
	}
	dy, err := dense(op, "output gradient", v[2], x.Dtype(), x.Shape())
	if err != nil {
		return nil, err
	}
	if len(f.mean) != f.rows {
		return nil, fmt.Errorf("%v: run before its forward op", op)
	}
	if op.part == lnInput {
		var gt *tensor.Dense
		if f.affine {
			if gt, err = dense(op, "gamma", v[3], x.Dtype(), nil); err != nil {
				return nil, err
			}
		}
		dx := op.out.get(x.Dtype(), x.Shape())
		if x.Dtype() == tensor.Float32 {
			layerNormGradInput(op, data[float32](x), data[float32](dy), optData[float32](gt), data[float32](dx))
		} else {
			layerNormGradInput(op, data[float64](x), data[float64](dy), optData[float64](gt), data[float64](dx))
		}
		return dx, nil
	}
	s := x.Shape()
	out := op.out.get(x.Dtype(), s[len(s)-f.pdims:])
	op.acc = grow(op.acc, f.d)
	if x.Dtype() == tensor.Float32 {
		layerNormGradParam(op, data[float32](x), data[float32](dy), data[float32](out))
	} else {
		layerNormGradParam(op, data[float64](x), data[float64](dy), data[float64](out))
	}
	return out, nil
}

// layerNormGradInput is, per row, with g = dy·gamma and x̂ the normalised
// input, dx = rstd·(g - mean(g) - x̂·mean(g·x̂)).
func layerNormGradInput[T float](op *layerNormGradOp, x, dy, gamma, dx []T) {
	f := op.fwd
	d := f.d
	for r := 0; r < f.rows; r++ {
		mean, rstd := f.mean[r], f.rstd[r]
		row, drow, out := x[r*d:(r+1)*d], dy[r*d:(r+1)*d], dx[r*d:(r+1)*d]
		var sg, sgx float64
		for j, v := range row {
			g := float64(drow[j])
			if gamma != nil {
				g *= float64(gamma[j])
			}
			sg += g
			sgx += g * (float64(v) - mean) * rstd
		}
		sg /= float64(d)
		sgx /= float64(d)
		for j, v := range row {
			g := float64(drow[j])
			if gamma != nil {
				g *= float64(gamma[j])
			}
			xh := (float64(v) - mean) * rstd
			out[j] = T(rstd * (g - sg - xh*sgx))
		}
	}
}

// layerNormGradParam sums dy·x̂ (gamma) or dy (beta) over the rows.
func layerNormGradParam[T float](op *layerNormGradOp, x, dy, out []T) {
	f := op.fwd
	d := f.d
	acc := op.acc
	clear(acc)
	for r := 0; r < f.rows; r++ {
		drow := dy[r*d : (r+1)*d]
		if op.part == lnBeta {
			for j, g := range drow {
				acc[j] += float64(g)
			}
			continue
		}
		mean, rstd := f.mean[r], f.rstd[r]
		row := x[r*d : (r+1)*d]
		for j, g := range drow {
			acc[j] += float64(g) * (float64(row[j]) - mean) * rstd
		}
	}
	for j, a := range acc {
		out[j] = T(a)
	}
}

// UsePreallocDo is Do writing into p when p fits (see buffer.prealloc): the
// gamma and beta gradients land in the store's gradient buffer.
func (op *layerNormGradOp) UsePreallocDo(p G.Value, v ...G.Value) (G.Value, error) {
	op.out.prealloc(p)
	defer op.out.release()
	return op.Do(v...)
}
