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
	cols colSplit
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
		linearFwd[float32](&op.cols, x, w, b, y, batch, in, outN, op.ReLU)
	} else {
		linearFwd[float64](&op.cols, x, w, b, y, batch, in, outN, op.ReLU)
	}
	return y, nil
}

func linearFwd[T float](cs *colSplit, x, w, b, y *tensor.Dense, batch, in, out int, relu bool) {
	yd := data[T](y)
	var beta T
	if b != nil {
		bd := data[T](b)
		for r := 0; r < batch; r++ {
			copy(yd[r*out:(r+1)*out], bd)
		}
		beta = 1
	}
	gemmCols(cs, false, true, batch, out, in, data[T](x), in, data[T](w), in, beta, yd, out)
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
	out  buffer
	cols colSplit
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
	gemmInto(&op.cols, false, false, batch, in, out, dz, out, w, in, dx, in)
	return dx, nil
}

// gemmInto is c = op(a)·op(b) on tensors of c's dtype (gemmCols).
func gemmInto(cs *colSplit, tA, tB bool, m, n, k int, a *tensor.Dense, lda int, b *tensor.Dense, ldb int, c *tensor.Dense, ldc int) {
	if c.Dtype() == tensor.Float32 {
		gemmCols(cs, tA, tB, m, n, k, data[float32](a), lda, data[float32](b), ldb, 0, data[float32](c), ldc)
		return
	}
	gemmCols(cs, tA, tB, m, n, k, data[float64](a), lda, data[float64](b), ldb, 0, data[float64](c), ldc)
}

// A Linear layer's multiplies call the BLAS with one thread (blas.Plan)
// and, unlike the convolutions, have no batch worth splitting (a few to a
// few hundred rows): a wide layer (1024 -> 4096 at batch 8) ran on one
// core however many the process had. gemmCols splits a large multiply's
// output columns into blocks of colBlock, a BLAS call each, claimed by
// the image workers (imageSplit). On one worker it stays one call (the
// blocks cost a tenth more there), except under SetDeterministic, where
// the blocks are taken whatever the workers, so that the bits never
// depend on their count. A multiply below colGrain multiply-adds (the mlp
// workload's, 784x256 at batch 64: 12.8 million) stays one call.
const (
	colBlock = 256
	colGrain = 1 << 24
)

// colSplit is an op's split multiply: its job, reused.
type colSplit struct{ job any }

type colJob[T float] struct {
	tA, tB        bool
	m, n, k       int
	a, b, c       []T
	lda, ldb, ldc int
	beta          T
	pr            partRun
}

func (j *colJob[T]) blocks() int { return (j.n + colBlock - 1) / colBlock }

func (j *colJob[T]) run(int, int) {
	for p := j.pr.claim(); p < j.blocks(); p = j.pr.claim() {
		lo := p * colBlock
		hi := min(j.n, lo+colBlock)
		b := j.b[lo:]
		if j.tB {
			b = j.b[lo*j.ldb:]
		}
		gemm(j.tA, j.tB, j.m, hi-lo, j.k, 1, j.a, j.lda, b, j.ldb, j.beta, j.c[lo:], j.ldc)
	}
}

// gemmCols is gemm (alpha 1) with c's columns in blocks between the image
// workers when the multiply is large (see colGrain).
func gemmCols[T float](cs *colSplit, tA, tB bool, m, n, k int, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	macs := int64(m) * int64(n) * int64(k)
	if macs < colGrain || n < 2*colBlock {
		gemm(tA, tB, m, n, k, 1, a, lda, b, ldb, beta, c, ldc)
		return
	}
	w := imageSplit((n+colBlock-1)/colBlock, int(min(macs, 1<<40)))
	if w == 1 && !deterministic.Load() {
		gemm(tA, tB, m, n, k, 1, a, lda, b, ldb, beta, c, ldc)
		return
	}
	j := jobFor[colJob[T]](&cs.job)
	j.tA, j.tB, j.m, j.n, j.k, j.a, j.b, j.c, j.lda, j.ldb, j.ldc, j.beta = tA, tB, m, n, k, a, b, c, lda, ldb, ldc, beta
	if w > 1 {
		runParts(j, w, &j.pr)
	} else {
		j.pr.next.Store(0)
		j.run(0, 1)
	}
	j.a, j.b, j.c = nil, nil, nil
}

// linearGradWeightOp is dzᵀ·x: (x [B,in], dz [B,out]) → [out,in].
type linearGradWeightOp struct {
	base
	noDiff
	out  buffer
	cols colSplit
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
	gemmInto(&op.cols, true, false, out, in, batch, dz, out, x, in, dw, in)
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
