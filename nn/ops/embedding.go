package ops

import (
	"errors"
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// EmbeddingOpts are Embedding's options beyond the table.
type EmbeddingOpts struct {
	// PaddingIdx, when HasPadding, is a row of the table (0..rows-1) whose
	// gradient is always 0, PyTorch's padding_idx.
	PaddingIdx int
	HasPadding bool
}

// maxExactIndex32 is the largest whole number below which float32 holds
// every integer.
const maxExactIndex32 = 1 << 24

// ErrNeedsFloat64 is in the error of an op that a float32 model cannot run
// exactly (an Embedding table of more than 2^24 rows, whose ids float32
// does not all hold): the fix is a float64 model, and whoever runs the
// step names the setting that makes one (the engine says which).
var ErrNeedsFloat64 = errors.New("train in float64")

// Embedding looks up rows of weight [rows, dim] at indices (any shape,
// holding whole numbers 0..rows-1 in the weight's dtype, as the batch's
// fields do): the output is [indices' shape..., dim], PyTorch's
// nn.Embedding. An index that is not a whole number in range is an error
// of the run naming it and where it is. The indices get no gradient; the
// weight's sums the output gradient's rows of each index (0 at PaddingIdx).
func Embedding(indices, weight *G.Node, o EmbeddingOpts) (*G.Node, error) {
	const what = "Embedding"
	if err := checkFloat(what+" weight", weight); err != nil {
		return nil, err
	}
	if indices == nil {
		return nil, fmt.Errorf("%s indices are nil", what)
	}
	if !isFloat(indices) {
		return nil, fmt.Errorf("%s indices have dtype %v: indices are token ids stored as the weight's dtype, %v (the batch's fields already are): convert them", what, indices.Dtype(), weight.Dtype())
	}
	if indices.Dtype() != weight.Dtype() {
		return nil, fmt.Errorf("%s indices have dtype %v but the weight has %v: give the token ids in the weight's dtype (the batch's fields already are)", what, indices.Dtype(), weight.Dtype())
	}
	ws := weight.Shape()
	if len(ws) != 2 {
		return nil, fmt.Errorf("%s weight has shape %v: want [rows, dim]", what, ws)
	}
	if weight.Dtype() == tensor.Float32 && ws[0] > maxExactIndex32 {
		return nil, fmt.Errorf("%s weight has %d rows: float32 indices are exact only up to %d; %w for a larger table", what, ws[0], maxExactIndex32, ErrNeedsFloat64)
	}
	if o.HasPadding && (o.PaddingIdx < 0 || o.PaddingIdx >= ws[0]) {
		return nil, fmt.Errorf("%s: padding index %d is out of range for a table of %d rows: use 0..%d", what, o.PaddingIdx, ws[0], ws[0]-1)
	}
	if indices.IsScalar() || indices.Dims() == 0 {
		return nil, fmt.Errorf("%s indices are a scalar: want [batch, ...] (a batch field of token ids)", what)
	}
	is := indices.Shape()
	outS := append(append(tensor.Shape{}, is...), ws[1])
	op := &embeddingOp{base: newBase(what), idxShape: is.Clone(), rows: ws[0], dim: ws[1], outS: outS, opts: o}
	return apply(op, indices, weight)
}

type embeddingOp struct {
	base
	idxShape  tensor.Shape
	rows, dim int
	outS      tensor.Shape
	opts      EmbeddingOpts
	out       buffer
	idx       []int32 // this run's indices, for the backward op
}

func (op *embeddingOp) Arity() int { return 2 }
func (op *embeddingOp) Type() hm.Type {
	return fnType(len(op.outS), len(op.idxShape), 2)
}
func (op *embeddingOp) DiffWRT(int) []bool { return []bool{false, true} }
func (op *embeddingOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.outS.Clone(), nil
}

func (op *embeddingOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[1].Dtype()
	w, err := dense(op, "weight", v[1], dt, tensor.Shape{op.rows, op.dim})
	if err != nil {
		return nil, err
	}
	it, err := dense(op, "indices", v[0], dt, op.idxShape)
	if err != nil {
		return nil, err
	}
	if dt == tensor.Float32 {
		err = readIndices(op, data[float32](it))
	} else {
		err = readIndices(op, data[float64](it))
	}
	if err != nil {
		return nil, err
	}
	y := op.out.get(dt, op.outS)
	if dt == tensor.Float32 {
		gatherRows(op, data[float32](w), data[float32](y))
	} else {
		gatherRows(op, data[float64](w), data[float64](y))
	}
	return y, nil
}

// readIndices checks every index and keeps them for the backward op.
func readIndices[T float](op *embeddingOp, v []T) error {
	op.idx = grow(op.idx, len(v))
	for p, f := range v {
		x := float64(f)
		if x != math.Trunc(x) || x < 0 || x >= float64(op.rows) {
			return op.indexError(p, x)
		}
		op.idx[p] = int32(x)
	}
	return nil
}

// indexError names a bad index, its row of the batch and its position in
// the row.
func (op *embeddingOp) indexError(p int, x float64) error {
	where := fmt.Sprintf("row %d", p)
	if len(op.idxShape) > 1 {
		per := op.idxShape[1:].TotalSize()
		where = fmt.Sprintf("row %d, position %d", p/per, p%per)
	}
	switch {
	case x != math.Trunc(x):
		return fmt.Errorf("%v: index %v at %s of indices %v is not a whole number: indices are token ids 0..%d stored as floats", op, x, where, op.idxShape, op.rows-1)
	case x < 0:
		return fmt.Errorf("%v: index %v at %s of indices %v is negative: token ids are 0..%d", op, x, where, op.idxShape, op.rows-1)
	}
	return fmt.Errorf("%v: index %v at %s of indices %v is out of range for a table of %d rows (0..%d): make the table with at least %v rows, or map the token into range", op, x, where, op.idxShape, op.rows, op.rows-1, x+1)
}

func gatherRows[T float](op *embeddingOp, w, y []T) {
	d := op.dim
	for p, k := range op.idx {
		copy(y[p*d:(p+1)*d], w[int(k)*d:(int(k)+1)*d])
	}
}

func (op *embeddingOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	dw, err := apply(&embeddingGradOp{base: newBase("EmbeddingGrad"), fwd: op}, output, grad)
	if err != nil {
		return nil, err
	}
	return G.Nodes{nil, dw}, nil
}

// embeddingGradOp sums the output gradient's rows into the rows of the
// table they were read from: (y, dy) → dweight [rows, dim], in index
// order, with PaddingIdx's row left 0.
type embeddingGradOp struct {
	base
	noDiff
	fwd *embeddingOp
	out buffer
}

func (op *embeddingGradOp) Arity() int { return 2 }
func (op *embeddingGradOp) Type() hm.Type {
	n := len(op.fwd.outS)
	return fnType(2, n, n)
}
func (op *embeddingGradOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *embeddingGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.fwd.rows, op.fwd.dim}, nil
}

func (op *embeddingGradOp) Do(v ...G.Value) (G.Value, error) {
	f := op.fwd
	dt := v[0].Dtype()
	dy, err := dense(op, "output gradient", v[1], dt, f.outS)
	if err != nil {
		return nil, err
	}
	if len(f.idx) != f.idxShape.TotalSize() {
		return nil, fmt.Errorf("%v: run before its forward op", op)
	}
	dw := op.out.get(dt, tensor.Shape{f.rows, f.dim})
	if dt == tensor.Float32 {
		scatterRows(f, data[float32](dy), data[float32](dw))
	} else {
		scatterRows(f, data[float64](dy), data[float64](dw))
	}
	return dw, nil
}

// UsePreallocDo writes the gradient into p (the store's gradient of the
// table) when it fits.
func (op *embeddingGradOp) UsePreallocDo(p G.Value, v ...G.Value) (G.Value, error) {
	op.out.prealloc(p)
	defer op.out.release()
	return op.Do(v...)
}

func scatterRows[T float](f *embeddingOp, dy, dw []T) {
	d := f.dim
	clear(dw)
	for p, k := range f.idx {
		if f.opts.HasPadding && int(k) == f.opts.PaddingIdx {
			continue
		}
		row, src := dw[int(k)*d:(int(k)+1)*d], dy[p*d:(p+1)*d]
		for j, g := range src {
			row[j] += g
		}
	}
}
