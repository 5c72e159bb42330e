package ops

import (
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Smooth activations: GELU (erf, and PyTorch's tanh approximation), Tanh,
// Sigmoid and SiLU, each one elementwise op whose gradient op reads the
// input and the output. Both dtypes compute each element in float64 and
// round once, so float32 results are the correctly rounded values of the
// float64 formulas (within an ulp or two of PyTorch's float32 kernels).

type smoothKind int

const (
	smoothGELU smoothKind = iota
	smoothGELUTanh
	smoothTanh
	smoothSigmoid
	smoothSiLU
)

var smoothNames = [...]string{"GELU", "GELUTanh", "Tanh", "Sigmoid", "SiLU"}

// GELU is x·Φ(x) = 0.5·x·(1 + erf(x/√2)), PyTorch's nn.GELU() default.
func GELU(x *G.Node) (*G.Node, error) { return smooth(smoothGELU, x) }

// GELUTanh is PyTorch's nn.GELU(approximate='tanh'):
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
func GELUTanh(x *G.Node) (*G.Node, error) { return smooth(smoothGELUTanh, x) }

// Tanh is tanh(x) elementwise.
func Tanh(x *G.Node) (*G.Node, error) { return smooth(smoothTanh, x) }

// Sigmoid is 1/(1 + e^-x) elementwise, without overflow for any x.
func Sigmoid(x *G.Node) (*G.Node, error) { return smooth(smoothSigmoid, x) }

// SiLU is x·sigmoid(x) elementwise (PyTorch's nn.SiLU, also called swish).
func SiLU(x *G.Node) (*G.Node, error) { return smooth(smoothSiLU, x) }

func smooth(kind smoothKind, x *G.Node) (*G.Node, error) {
	name := smoothNames[kind]
	if err := checkFloat(name+" input", x); err != nil {
		return nil, err
	}
	return apply(&smoothOp{base: newBase(name), kind: kind, dims: x.Dims()}, x)
}

type smoothOp struct {
	base
	kind smoothKind
	dims int
	out  buffer
}

func (op *smoothOp) Arity() int         { return 1 }
func (op *smoothOp) Type() hm.Type      { return fnType(op.dims, op.dims) }
func (op *smoothOp) DiffWRT(int) []bool { return []bool{true} }
func (op *smoothOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return shapeOf(in[0]).Clone(), nil
}

func (op *smoothOp) Do(v ...G.Value) (G.Value, error) {
	x, err := dense(op, "input", v[0], v[0].Dtype(), nil)
	if err != nil {
		return nil, err
	}
	y := op.out.get(x.Dtype(), x.Shape())
	if x.Dtype() == tensor.Float32 {
		smoothForward(op.kind, data[float32](x), data[float32](y))
	} else {
		smoothForward(op.kind, data[float64](x), data[float64](y))
	}
	return y, nil
}

func (op *smoothOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	dx, err := apply(&smoothGradOp{base: newBase(smoothNames[op.kind] + "Grad"), kind: op.kind}, inputs[0], output, grad)
	return G.Nodes{dx}, err
}

const (
	invSqrt2    = 0.70710678118654752440 // 1/√2
	invSqrt2Pi  = 0.39894228040143267794 // 1/√(2π)
	sqrt2OverPi = 0.79788456080286535588 // √(2/π)
	geluCubic   = 0.044715
)

func smoothForward[T float](kind smoothKind, x, y []T) {
	y = y[:len(x)]
	switch kind {
	case smoothGELU:
		for i, v := range x {
			f := float64(v)
			y[i] = T(0.5 * f * (1 + math.Erf(f*invSqrt2)))
		}
	case smoothGELUTanh:
		for i, v := range x {
			f := float64(v)
			y[i] = T(0.5 * f * (1 + math.Tanh(sqrt2OverPi*(f+geluCubic*f*f*f))))
		}
	case smoothTanh:
		for i, v := range x {
			y[i] = T(math.Tanh(float64(v)))
		}
	case smoothSigmoid:
		for i, v := range x {
			y[i] = T(sigmoid(float64(v)))
		}
	case smoothSiLU:
		for i, v := range x {
			f := float64(v)
			y[i] = T(f * sigmoid(f))
		}
	}
}

// smoothGradOp is dy·f'(x): (x, y, dy) → dx. Tanh and Sigmoid read f' from
// the output; the others from the input. Taking the output orders it after
// the forward op.
type smoothGradOp struct {
	base
	noDiff
	kind smoothKind
	out  buffer
}

func (op *smoothGradOp) Arity() int { return 3 }
func (op *smoothGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a, a, a)
}
func (op *smoothGradOp) DiffWRT(int) []bool { return []bool{false, false, false} }
func (op *smoothGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return shapeOf(in[0]).Clone(), nil
}

func (op *smoothGradOp) Do(v ...G.Value) (G.Value, error) {
	x, err := dense(op, "input", v[0], v[0].Dtype(), nil)
	if err != nil {
		return nil, err
	}
	y, err := dense(op, "output", v[1], x.Dtype(), x.Shape())
	if err != nil {
		return nil, err
	}
	dy, err := dense(op, "output gradient", v[2], x.Dtype(), x.Shape())
	if err != nil {
		return nil, err
	}
	dx := op.out.get(x.Dtype(), x.Shape())
	if x.Dtype() == tensor.Float32 {
		smoothBackward(op.kind, data[float32](x), data[float32](y), data[float32](dy), data[float32](dx))
	} else {
		smoothBackward(op.kind, data[float64](x), data[float64](y), data[float64](dy), data[float64](dx))
	}
	return dx, nil
}

func smoothBackward[T float](kind smoothKind, x, y, dy, dx []T) {
	n := len(x)
	y, dy, dx = y[:n], dy[:n], dx[:n]
	switch kind {
	case smoothGELU:
		// Φ(x) + x·φ(x)
		for i, v := range x {
			f := float64(v)
			d := 0.5*(1+math.Erf(f*invSqrt2)) + f*invSqrt2Pi*math.Exp(-0.5*f*f)
			dx[i] = T(float64(dy[i]) * d)
		}
	case smoothGELUTanh:
		for i, v := range x {
			f := float64(v)
			t := math.Tanh(sqrt2OverPi * (f + geluCubic*f*f*f))
			d := 0.5*(1+t) + 0.5*f*(1-t*t)*sqrt2OverPi*(1+3*geluCubic*f*f)
			dx[i] = T(float64(dy[i]) * d)
		}
	case smoothTanh:
		for i, t := range y {
			dx[i] = T(float64(dy[i]) * (1 - float64(t)*float64(t)))
		}
	case smoothSigmoid:
		for i, s := range y {
			dx[i] = T(float64(dy[i]) * float64(s) * (1 - float64(s)))
		}
	case smoothSiLU:
		for i, v := range x {
			f := float64(v)
			s := sigmoid(f)
			dx[i] = T(float64(dy[i]) * s * (1 + f*(1-s)))
		}
	}
}
