package ops

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Single-axis and whole-tensor reductions.
//
// They replace Gorgonia v0.9.17's Sum and Mean over several axes, which give
// wrong forward values for some shapes (DESIGN.md, known defects; see
// TestGorgoniaMultiAxisSumDefect): reduce one axis at a time with SumAxis, or
// everything at once with SumAll. Sums accumulate in float64.

// SumAxis sums x over one axis, which disappears from the shape.
func SumAxis(x *G.Node, axis int) (*G.Node, error) { return reduceAxis("SumAxis", x, axis, false) }

// MeanAxis averages x over one axis, which disappears from the shape.
func MeanAxis(x *G.Node, axis int) (*G.Node, error) { return reduceAxis("MeanAxis", x, axis, true) }

// SumAll sums every element of x into a scalar.
func SumAll(x *G.Node) (*G.Node, error) { return reduceAll("SumAll", x, false) }

// MeanAll averages every element of x into a scalar.
func MeanAll(x *G.Node) (*G.Node, error) { return reduceAll("MeanAll", x, true) }

func reduceAxis(kind string, x *G.Node, axis int, mean bool) (*G.Node, error) {
	if err := checkFloat(kind+" input", x); err != nil {
		return nil, err
	}
	s := x.Shape()
	if x.IsScalar() || axis < 0 || axis >= len(s) {
		return nil, fmt.Errorf("%s: axis %d is out of range for shape %v", kind, axis, s)
	}
	op := &reduceAxisOp{base: newBase(kind), in: s.Clone(), axis: axis, mean: mean}
	return apply(op, x)
}

// split views shape as [outer, n, inner] around axis.
func split(s tensor.Shape, axis int) (outer, n, inner int) {
	outer, inner = 1, 1
	for _, d := range s[:axis] {
		outer *= d
	}
	for _, d := range s[axis+1:] {
		inner *= d
	}
	return outer, s[axis], inner
}

type reduceAxisOp struct {
	base
	in   tensor.Shape
	outS tensor.Shape
	axis int
	mean bool
	out  buffer
	sc   *scalarBuffer
	acc  []float64
}

func (op *reduceAxisOp) outShape() tensor.Shape {
	if op.outS == nil {
		op.outS = append(append(tensor.Shape{}, op.in[:op.axis]...), op.in[op.axis+1:]...)
	}
	if len(op.outS) == 0 {
		return tensor.ScalarShape()
	}
	return op.outS
}

func (op *reduceAxisOp) Arity() int                                     { return 1 }
func (op *reduceAxisOp) Type() hm.Type                                  { return fnType(len(op.in)-1, len(op.in)) }
func (op *reduceAxisOp) DiffWRT(int) []bool                             { return []bool{true} }
func (op *reduceAxisOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.outShape(), nil }

func (op *reduceAxisOp) Do(v ...G.Value) (G.Value, error) {
	x, err := dense(op, "input", v[0], v[0].Dtype(), op.in)
	if err != nil {
		return nil, err
	}
	outer, n, inner := split(op.in, op.axis)
	op.acc = grow(op.acc, outer*inner)
	scale := 1.0
	if op.mean {
		scale = 1 / float64(n)
	}
	if len(op.in) == 1 { // → scalar
		var s float64
		if x.Dtype() == tensor.Float32 {
			s = sumAll(data[float32](x))
		} else {
			s = sumAll(data[float64](x))
		}
		return op.scalar(x.Dtype(), s*scale), nil
	}
	y := op.out.get(x.Dtype(), op.outShape())
	if x.Dtype() == tensor.Float32 {
		reduceMid(data[float32](x), data[float32](y), op.acc, outer, n, inner, scale)
	} else {
		reduceMid(data[float64](x), data[float64](y), op.acc, outer, n, inner, scale)
	}
	return y, nil
}

func (op *reduceAxisOp) scalar(dt tensor.Dtype, v float64) G.Value {
	if op.sc == nil {
		op.sc = new(scalarBuffer)
	}
	return op.sc.set(dt, v)
}

func reduceMid[T float](x, y []T, acc []float64, outer, n, inner int, scale float64) {
	for o := 0; o < outer; o++ {
		a := acc[o*inner : (o+1)*inner]
		clear(a)
		for k := 0; k < n; k++ {
			row := x[(o*n+k)*inner : (o*n+k+1)*inner]
			for i, e := range row {
				a[i] += float64(e)
			}
		}
		for i, e := range a {
			y[o*inner+i] = T(e * scale)
		}
	}
}

func sumAll[T float](x []T) float64 { return sum(x) }

func (op *reduceAxisOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	_, n, _ := split(op.in, op.axis)
	scale := 1.0
	if op.mean {
		scale = 1 / float64(n)
	}
	d, err := apply(&broadcastAxisOp{base: newBase(op.kind + "Grad"), out: op.in, axis: op.axis, scale: scale}, grad)
	return G.Nodes{d}, err
}

// broadcastAxisOp repeats its input along a new axis, times scale: the
// gradient of SumAxis and MeanAxis (axis -1: of SumAll and MeanAll).
type broadcastAxisOp struct {
	base
	noDiff
	out   tensor.Shape
	axis  int // -1: from a scalar
	scale float64
	buf   buffer
}

func (op *broadcastAxisOp) Arity() int { return 1 }
func (op *broadcastAxisOp) Type() hm.Type {
	if op.axis < 0 {
		return fnType(len(op.out), 0)
	}
	return fnType(len(op.out), len(op.out)-1)
}
func (op *broadcastAxisOp) DiffWRT(int) []bool { return []bool{false} }
func (op *broadcastAxisOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.out.Clone(), nil
}

func (op *broadcastAxisOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	y := op.buf.get(dt, op.out)
	if op.axis < 0 || len(op.out) == 1 {
		g, err := scalarOf(v[0])
		if err != nil {
			return nil, fmt.Errorf("%v: %w", op, err)
		}
		if dt == tensor.Float32 {
			fill(data[float32](y), float32(g*op.scale))
		} else {
			fill(data[float64](y), g*op.scale)
		}
		return y, nil
	}
	dy, err := dense(op, "gradient", v[0], dt, nil)
	if err != nil {
		return nil, err
	}
	outer, n, inner := split(op.out, op.axis)
	if dt == tensor.Float32 {
		broadcastMid(data[float32](dy), data[float32](y), outer, n, inner, float32(op.scale))
	} else {
		broadcastMid(data[float64](dy), data[float64](y), outer, n, inner, op.scale)
	}
	return y, nil
}

func fill[T float](s []T, v T) {
	for i := range s {
		s[i] = v
	}
}

func broadcastMid[T float](dy, y []T, outer, n, inner int, scale T) {
	for o := 0; o < outer; o++ {
		src := dy[o*inner : (o+1)*inner]
		for k := 0; k < n; k++ {
			dst := y[(o*n+k)*inner : (o*n+k+1)*inner]
			for i, e := range src {
				dst[i] = e * scale
			}
		}
	}
}

func reduceAll(kind string, x *G.Node, mean bool) (*G.Node, error) {
	if err := checkFloat(kind+" input", x); err != nil {
		return nil, err
	}
	return apply(&reduceAllOp{base: newBase(kind), in: x.Shape().Clone(), dims: x.Dims(), mean: mean}, x)
}

type reduceAllOp struct {
	base
	in   tensor.Shape
	dims int
	mean bool
	out  scalarBuffer
}

func (op *reduceAllOp) Arity() int         { return 1 }
func (op *reduceAllOp) Type() hm.Type      { return fnType(0, op.dims) }
func (op *reduceAllOp) DiffWRT(int) []bool { return []bool{true} }
func (op *reduceAllOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}

func (op *reduceAllOp) count() int {
	if op.dims == 0 {
		return 1
	}
	return op.in.TotalSize()
}

func (op *reduceAllOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	var s float64
	if op.dims == 0 {
		x, err := scalarOf(v[0])
		if err != nil {
			return nil, fmt.Errorf("%v: %w", op, err)
		}
		s = x
	} else {
		x, err := dense(op, "input", v[0], dt, op.in)
		if err != nil {
			return nil, err
		}
		if dt == tensor.Float32 {
			s = sumAll(data[float32](x))
		} else {
			s = sumAll(data[float64](x))
		}
	}
	if op.mean {
		s /= float64(op.count())
	}
	return op.out.set(dt, s), nil
}

func (op *reduceAllOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if op.dims == 0 {
		return G.Nodes{grad}, nil
	}
	scale := 1.0
	if op.mean {
		scale = 1 / float64(op.count())
	}
	d, err := apply(&broadcastAxisOp{base: newBase(op.kind + "Grad"), out: op.in, axis: -1, scale: scale}, grad)
	return G.Nodes{d}, err
}
