package ops

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ReLU is max(0, x) elementwise, into an op-held buffer.
func ReLU(x *G.Node) (*G.Node, error) {
	if err := checkFloat("ReLU input", x); err != nil {
		return nil, err
	}
	return apply(&reluOp{base: newBase("ReLU"), dims: x.Dims()}, x)
}

type reluOp struct {
	base
	dims int
	out  buffer
}

func (op *reluOp) Arity() int         { return 1 }
func (op *reluOp) Type() hm.Type      { return fnType(op.dims, op.dims) }
func (op *reluOp) DiffWRT(int) []bool { return []bool{true} }
func (op *reluOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return shapeOf(in[0]).Clone(), nil
}

func (op *reluOp) Do(v ...G.Value) (G.Value, error) {
	x, err := dense(op, "input", v[0], v[0].Dtype(), nil)
	if err != nil {
		return nil, err
	}
	y := op.out.get(x.Dtype(), x.Shape())
	if x.Dtype() == tensor.Float32 {
		reluPar(data[float32](x), data[float32](y))
	} else {
		reluPar(data[float64](x), data[float64](y))
	}
	return y, nil
}

func (op *reluOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	dx, err := apply(&reluGradOp{base: newBase("ReLUGrad")}, output, grad)
	return G.Nodes{dx}, err
}

// relu is max(x, 0), which compiles to a branch-free instruction; NaN
// propagates (as in PyTorch).
// relu is y = max(x, 0). In float32 it runs the AVX2 kernel on CPUs with
// AVX-512 too (its 8 lanes keep up with memory on a pass this simple):
// the same bits as the loop.
func relu[T float](x, y []T) {
	y = y[:len(x)]
	if is32[T]() && (useAVX512 || useAVX2) && len(x) > 0 {
		relu32AVX2(f32p(x), f32p(y), len(x))
		return
	}
	for i, v := range x {
		y[i] = max(v, 0)
	}
}

func reluInPlace[T float](y []T) {
	for i, v := range y {
		y[i] = max(v, 0)
	}
}

// reluGradOp is dy where y > 0, else 0: (y, dy) → dx. It reads the forward
// output, so it also orders itself after the forward op.
type reluGradOp struct {
	base
	noDiff
	out buffer
}

func (op *reluGradOp) Arity() int { return 2 }
func (op *reluGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a, a)
}
func (op *reluGradOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *reluGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return shapeOf(in[0]).Clone(), nil
}

func (op *reluGradOp) Do(v ...G.Value) (G.Value, error) {
	y, err := dense(op, "output", v[0], v[0].Dtype(), nil)
	if err != nil {
		return nil, err
	}
	dy, err := dense(op, "output gradient", v[1], y.Dtype(), y.Shape())
	if err != nil {
		return nil, err
	}
	dx := op.out.get(y.Dtype(), y.Shape())
	if y.Dtype() == tensor.Float32 {
		reluGrad(data[float32](y), data[float32](dy), data[float32](dx))
	} else {
		reluGrad(data[float64](y), data[float64](dy), data[float64](dx))
	}
	return dx, nil
}

func reluGrad[T float](y, dy, dx []T) { maskPosPar(y, dy, dx) }

func reluPar[T float](x, y []T) {
	if w := workers(len(x), 1); w > 1 {
		parallelLoop(loopRelu, w, len(x), x, y, nil, loopArgs{})
		return
	}
	relu(x, y)
}

// AddReLU is max(0, a + b) elementwise for a and b of one shape: the end of
// a residual block in one op. Its gradient is one node, used for both inputs.
func AddReLU(a, b *G.Node) (*G.Node, error) {
	if err := checkFloat("AddReLU first input", a); err != nil {
		return nil, err
	}
	if err := checkFloat("AddReLU second input", b); err != nil {
		return nil, err
	}
	if err := sameDtype("AddReLU second input", a, b); err != nil {
		return nil, err
	}
	if !a.Shape().Eq(b.Shape()) {
		return nil, fmt.Errorf("AddReLU inputs have shapes %v and %v: they must be equal", a.Shape(), b.Shape())
	}
	return apply(&addReLUOp{base: newBase("AddReLU"), dims: a.Dims()}, a, b)
}

type addReLUOp struct {
	base
	dims int
	out  buffer
}

func (op *addReLUOp) Arity() int         { return 2 }
func (op *addReLUOp) Type() hm.Type      { return fnType(op.dims, op.dims, op.dims) }
func (op *addReLUOp) DiffWRT(int) []bool { return []bool{true, true} }
func (op *addReLUOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return shapeOf(in[0]).Clone(), nil
}

func (op *addReLUOp) Do(v ...G.Value) (G.Value, error) {
	a, err := dense(op, "first input", v[0], v[0].Dtype(), nil)
	if err != nil {
		return nil, err
	}
	b, err := dense(op, "second input", v[1], a.Dtype(), a.Shape())
	if err != nil {
		return nil, err
	}
	y := op.out.get(a.Dtype(), a.Shape())
	if a.Dtype() == tensor.Float32 {
		addReluPar(data[float32](a), data[float32](b), data[float32](y))
	} else {
		addReluPar(data[float64](a), data[float64](b), data[float64](y))
	}
	return y, nil
}

func addRelu[T float](a, b, y []T) {
	b, y = b[:len(a)], y[:len(a)]
	if is32[T]() && (useAVX512 || useAVX2) && len(a) > 0 {
		if useAVX512 {
			addRelu32(f32p(a), f32p(b), f32p(y), len(a))
		} else {
			addRelu32AVX2(f32p(a), f32p(b), f32p(y), len(a))
		}
		return
	}
	for i, v := range a {
		y[i] = max(v+b[i], 0)
	}
}

func addReluPar[T float](a, b, y []T) {
	if w := workers(len(a), 1); w > 1 {
		parallelLoop(loopAddRelu, w, len(a), a, b, y, loopArgs{})
		return
	}
	addRelu(a, b, y)
}

func (op *addReLUOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := apply(&reluGradOp{base: newBase("ReLUGrad")}, output, grad)
	return G.Nodes{d, d}, err
}
