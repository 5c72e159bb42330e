package ops

import (
	"fmt"
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
// GELU, GELUTanh and SiLU keep the transcendental part of each element
// (Φ(x), the tanh, sigmoid(x)) for the backward op, which then needs no
// erf, tanh or exp of its own but GELU's one exp. Both passes split their
// elements between the loop workers (SetLoopWorkers) from a few thousand
// elements on: each costs tens of nanoseconds, not the fraction of one of
// ReLU's.

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
	aux  []float64 // per element, for the backward op (GELU, GELUTanh, SiLU)
}

// keepsAux reports whether the forward op fills aux.
func (k smoothKind) keepsAux() bool { return k == smoothGELU || k == smoothGELUTanh || k == smoothSiLU }

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
	op.aux = op.aux[:0]
	if op.kind.keepsAux() {
		op.aux = grow(op.aux, x.Shape().TotalSize())
	}
	if x.Dtype() == tensor.Float32 {
		smoothForwardPar(op.kind, data[float32](x), data[float32](y), op.aux)
	} else {
		smoothForwardPar(op.kind, data[float64](x), data[float64](y), op.aux)
	}
	return y, nil
}

// smoothCost is how many of the cheap loops' elements (parallelGrain's
// unit) one element of a smooth activation is worth: an erf, a tanh or an
// exp each.
const smoothCost = 32

// smoothForwardPar splits the elements between the loop workers; each
// element is computed alone, so the split changes no bit.
func smoothForwardPar[T float](kind smoothKind, x, y []T, aux []float64) {
	if w := workers(len(x), smoothCost); w > 1 {
		parallelLoop(loopSmooth, w, len(x), x, y, nil, loopArgs{smooth: kind, aux: aux})
		return
	}
	smoothForward(kind, x, y, aux)
}

func smoothBackwardPar[T float](kind smoothKind, x, y, dy, dx []T, aux []float64) {
	if w := workers(len(x), smoothCost); w > 1 {
		a := x
		if !kind.keepsAux() {
			a = y
		}
		parallelLoop(loopSmoothGrad, w, len(x), a, dy, dx, loopArgs{smooth: kind, aux: aux})
		return
	}
	smoothBackward(kind, x, y, dy, dx, aux)
}

// auxPart is aux[lo:hi], or nil for kinds that keep none.
func auxPart(aux []float64, lo, hi int) []float64 {
	if len(aux) == 0 {
		return nil
	}
	return aux[lo:hi]
}

func (op *smoothOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	dx, err := apply(&smoothGradOp{base: newBase(smoothNames[op.kind] + "Grad"), fwd: op}, inputs[0], output, grad)
	return G.Nodes{dx}, err
}

const (
	invSqrt2    = 0.70710678118654752440 // 1/√2
	invSqrt2Pi  = 0.39894228040143267794 // 1/√(2π)
	sqrt2OverPi = 0.79788456080286535588 // √(2/π)
	geluCubic   = 0.044715
)

func smoothForward[T float](kind smoothKind, x, y []T, aux []float64) {
	y = y[:len(x)]
	switch kind {
	case smoothGELU:
		aux = aux[:len(x)]
		for i, v := range x {
			f := float64(v)
			cdf := 0.5 * (1 + math.Erf(f*invSqrt2))
			aux[i] = cdf
			y[i] = T(f * cdf)
		}
	case smoothGELUTanh:
		aux = aux[:len(x)]
		for i, v := range x {
			f := float64(v)
			t := math.Tanh(sqrt2OverPi * (f + geluCubic*f*f*f))
			aux[i] = t
			y[i] = T(0.5 * f * (1 + t))
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
		aux = aux[:len(x)]
		for i, v := range x {
			f := float64(v)
			sg := sigmoid(f)
			aux[i] = sg
			y[i] = T(f * sg)
		}
	}
}

// smoothGradOp is dy·f'(x): (x, y, dy) → dx. Tanh and Sigmoid read f' from
// the output; the others from the input. Taking the output orders it after
// the forward op.
type smoothGradOp struct {
	base
	noDiff
	fwd *smoothOp
	out buffer
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
	f := op.fwd
	if f.kind.keepsAux() && len(f.aux) != x.Shape().TotalSize() {
		return nil, fmt.Errorf("%v: run before its forward op", op)
	}
	dx := op.out.get(x.Dtype(), x.Shape())
	if x.Dtype() == tensor.Float32 {
		smoothBackwardPar(f.kind, data[float32](x), data[float32](y), data[float32](dy), data[float32](dx), f.aux)
	} else {
		smoothBackwardPar(f.kind, data[float64](x), data[float64](y), data[float64](dy), data[float64](dx), f.aux)
	}
	return dx, nil
}

func smoothBackward[T float](kind smoothKind, x, y, dy, dx []T, aux []float64) {
	n := len(x)
	y, dy, dx = y[:n], dy[:n], dx[:n]
	switch kind {
	case smoothGELU:
		// Φ(x) + x·φ(x)
		aux = aux[:n]
		for i, v := range x {
			f := float64(v)
			d := aux[i] + f*invSqrt2Pi*math.Exp(-0.5*f*f)
			dx[i] = T(float64(dy[i]) * d)
		}
	case smoothGELUTanh:
		aux = aux[:n]
		for i, v := range x {
			f, t := float64(v), aux[i]
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
		aux = aux[:n]
		for i, v := range x {
			f, s := float64(v), aux[i]
			dx[i] = T(float64(dy[i]) * s * (1 + f*(1-s)))
		}
	}
}
