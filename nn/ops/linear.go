package ops

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// LinearOpts are the fused variants of Linear.
type LinearOpts struct {
	// ReLU applies max(0, ·) to the result in the same pass.
	ReLU bool
	// NoInputGrad skips the gradient with respect to x (one matrix multiply
	// per step): right for a first layer fed straight from the batch, whose
	// input gradient nobody reads.
	NoInputGrad bool
}

// Linear is x·wᵀ + b (optionally followed by ReLU) as one op and one matrix
// multiply: x is [batch, in], w is [out, in] (PyTorch's nn.Linear layout, so
// weights move to and from PyTorch as they are), b is [out] or nil; the
// result is [batch, out].
func Linear(x, w, b *G.Node, o LinearOpts) (*G.Node, error) {
	if err := checkFloat("Linear input", x); err != nil {
		return nil, err
	}
	if err := checkFloat("Linear weight", w); err != nil {
		return nil, err
	}
	if err := sameDtype("Linear weight", x, w); err != nil {
		return nil, err
	}
	xs, ws := x.Shape(), w.Shape()
	if len(ws) != 2 {
		return nil, fmt.Errorf("Linear weight has shape %v: want [out, in]", ws)
	}
	if len(xs) != 2 || xs[1] != ws[1] {
		return nil, fmt.Errorf("Linear input has shape %v, want [batch, %d] to match weight %v ([out, in])", xs, ws[1], ws)
	}
	children := []*G.Node{x, w}
	if b != nil {
		if err := sameDtype("Linear bias", x, b); err != nil {
			return nil, err
		}
		if bs := b.Shape(); len(bs) != 1 || bs[0] != ws[0] {
			return nil, fmt.Errorf("Linear bias has shape %v, want [%d] to match weight %v ([out, in])", bs, ws[0], ws)
		}
		children = append(children, b)
	}
	op := &linearOp{base: newBase("Linear"), LinearOpts: o, bias: b != nil}
	return apply(op, children...)
}

type linearOp struct {
	base
	LinearOpts
	bias bool
	out  buffer
}

func (op *linearOp) Arity() int {
	if op.bias {
		return 3
	}
	return 2
}

func (op *linearOp) Type() hm.Type {
	if op.bias {
		return fnType(2, 2, 2, 1)
	}
	return fnType(2, 2, 2)
}

func (op *linearOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{shapeOf(in[0])[0], shapeOf(in[1])[0]}, nil
}

func (op *linearOp) DiffWRT(int) []bool {
	d := []bool{!op.NoInputGrad, true}
	if op.bias {
		d = append(d, true)
	}
	return d
}

func (op *linearOp) Do(v ...G.Value) (G.Value, error) {
	w, ok := v[1].(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("%v: weight is a %T", op, v[1])
	}
	outN, in := w.Shape()[0], w.Shape()[1]
	dt := w.Dtype()
	x, err := dense(op, "input", v[0], dt, nil)
	if err != nil {
		return nil, err
	}
	if xs := x.Shape(); len(xs) != 2 || xs[1] != in {
		return nil, fmt.Errorf("%v: input has shape %v, want [batch, %d]", op, xs, in)
	}
	batch := x.Shape()[0]
	var b *tensor.Dense
	if op.bias {
		if b, err = dense(op, "bias", v[2], dt, tensor.Shape{outN}); err != nil {
			return nil, err
		}
	}
	y := op.out.get(dt, tensor.Shape{batch, outN})
	if dt == tensor.Float32 {
		linearFwd[float32](x, w, b, y, batch, in, outN, op.ReLU)
	} else {
		linearFwd[float64](x, w, b, y, batch, in, outN, op.ReLU)
	}
	return y, nil
}

func linearFwd[T float](x, w, b, y *tensor.Dense, batch, in, out int, relu bool) {
	yd := data[T](y)
	var beta T
	if b != nil {
		bd := data[T](b)
		for r := 0; r < batch; r++ {
			copy(yd[r*out:(r+1)*out], bd)
		}
		beta = 1
	}
	gemm(false, true, batch, out, in, 1, data[T](x), in, data[T](w), in, beta, yd, out)
	if relu {
		reluInPlace(yd)
	}
}

func (op *linearOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	dz := grad
	var err error
	if op.ReLU {
		if dz, err = apply(&reluGradOp{base: newBase("ReLUGrad")}, output, grad); err != nil {
			return nil, err
		}
	}
	res := make(G.Nodes, len(inputs))
	if !op.NoInputGrad {
		if res[0], err = apply(&linearGradInputOp{base: newBase("LinearGradInput")}, dz, inputs[1]); err != nil {
			return nil, err
		}
	}
	if res[1], err = apply(&linearGradWeightOp{base: newBase("LinearGradWeight")}, inputs[0], dz); err != nil {
		return nil, err
	}
	if op.bias {
		if res[2], err = apply(&sumRowsOp{base: newBase("LinearGradBias")}, dz); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// linearGradInputOp is dz·w: (dz [B,out], w [out,in]) → [B,in].
type linearGradInputOp struct {
	base
	noDiff
	out buffer
}

func (op *linearGradInputOp) Arity() int         { return 2 }
func (op *linearGradInputOp) Type() hm.Type      { return fnType(2, 2, 2) }
func (op *linearGradInputOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *linearGradInputOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{shapeOf(in[0])[0], shapeOf(in[1])[1]}, nil
}

func (op *linearGradInputOp) Do(v ...G.Value) (G.Value, error) {
	w := v[1].(*tensor.Dense)
	out, in := w.Shape()[0], w.Shape()[1]
	dz, err := dense(op, "output gradient", v[0], w.Dtype(), nil)
	if err != nil {
		return nil, err
	}
	batch := dz.Shape()[0]
	dx := op.out.get(w.Dtype(), tensor.Shape{batch, in})
	gemmInto(false, false, batch, in, out, dz, out, w, in, dx, in)
	return dx, nil
}

// gemmInto is c = op(a)·op(b) on tensors of c's dtype.
func gemmInto(tA, tB bool, m, n, k int, a *tensor.Dense, lda int, b *tensor.Dense, ldb int, c *tensor.Dense, ldc int) {
	if c.Dtype() == tensor.Float32 {
		gemm(tA, tB, m, n, k, 1, data[float32](a), lda, data[float32](b), ldb, 0, data[float32](c), ldc)
		return
	}
	gemm(tA, tB, m, n, k, 1, data[float64](a), lda, data[float64](b), ldb, 0, data[float64](c), ldc)
}

// linearGradWeightOp is dzᵀ·x: (x [B,in], dz [B,out]) → [out,in].
type linearGradWeightOp struct {
	base
	noDiff
	out buffer
}

func (op *linearGradWeightOp) Arity() int         { return 2 }
func (op *linearGradWeightOp) Type() hm.Type      { return fnType(2, 2, 2) }
func (op *linearGradWeightOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *linearGradWeightOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{shapeOf(in[1])[1], shapeOf(in[0])[1]}, nil
}

func (op *linearGradWeightOp) Do(v ...G.Value) (G.Value, error) {
	x := v[0].(*tensor.Dense)
	dt := x.Dtype()
	batch, in := x.Shape()[0], x.Shape()[1]
	dz, err := dense(op, "output gradient", v[1], dt, nil)
	if err != nil {
		return nil, err
	}
	if x, err = dense(op, "input", x, dt, nil); err != nil {
		return nil, err
	}
	out := dz.Shape()[1]
	dw := op.out.get(dt, tensor.Shape{out, in})
	gemmInto(true, false, out, in, batch, dz, out, x, in, dw, in)
	return dw, nil
}

// sumRowsOp sums a [rows, cols] matrix over its rows: → [cols].
type sumRowsOp struct {
	base
	noDiff
	out buffer
}

func (op *sumRowsOp) Arity() int         { return 1 }
func (op *sumRowsOp) Type() hm.Type      { return fnType(1, 2) }
func (op *sumRowsOp) DiffWRT(int) []bool { return []bool{false} }
func (op *sumRowsOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{shapeOf(in[0])[1]}, nil
}

func (op *sumRowsOp) Do(v ...G.Value) (G.Value, error) {
	d, err := dense(op, "input", v[0], v[0].Dtype(), nil)
	if err != nil {
		return nil, err
	}
	rows, cols := d.Shape()[0], d.Shape()[1]
	o := op.out.get(d.Dtype(), tensor.Shape{cols})
	if d.Dtype() == tensor.Float32 {
		sumRows(data[float32](d), data[float32](o), rows, cols)
	} else {
		sumRows(data[float64](d), data[float64](o), rows, cols)
	}
	return o, nil
}

func sumRows[T float](x, o []T, rows, cols int) {
	copy(o, x[:cols])
	for r := 1; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		for j, v := range row {
			o[j] += v
		}
	}
}

// UsePreallocDo is Do writing into p when p fits (see buffer.prealloc).
func (op *linearGradWeightOp) UsePreallocDo(p G.Value, v ...G.Value) (G.Value, error) {
	op.out.prealloc(p)
	defer op.out.release()
	return op.Do(v...)
}

// UsePreallocDo is Do writing into p when p fits (see buffer.prealloc).
func (op *sumRowsOp) UsePreallocDo(p G.Value, v ...G.Value) (G.Value, error) {
	op.out.prealloc(p)
	defer op.out.release()
	return op.Do(v...)
}
