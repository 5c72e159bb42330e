package nn

import (
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
)

// Linear is y = x·Wᵀ + b with W of shape [out, in], PyTorch's nn.Linear
// layout (so state dicts move between the two as they are), optionally
// followed by a fused ReLU.
type Linear struct {
	Name    string // full name, as in "fc1"
	In, Out int
	Weight  string // full parameter names
	Bias    string // "" without bias
	relu    bool
	forceDx bool
}

// LinearOption changes a Linear.
type LinearOption func(*Linear)

// LinearNoBias leaves out the bias.
func LinearNoBias() LinearOption { return func(l *Linear) { l.Bias = "" } }

// LinearReLU applies ReLU to the output in the same op.
func LinearReLU() LinearOption { return func(l *Linear) { l.relu = true } }

// LinearInputGrad computes the input gradient even when the input depends on
// no parameter (by default it is skipped there: a layer fed from the batch
// needs no input gradient for training).
func LinearInputGrad() LinearOption { return func(l *Linear) { l.forceDx = true } }

// NewLinear declares "name.weight" [out, in] and "name.bias" [out], both
// drawn from U(±1/√in) as PyTorch's nn.Linear does.
func NewLinear(b *module.Builder, name string, in, out int, opts ...LinearOption) *Linear {
	sb := b.Scope(name)
	l := &Linear{Name: b.Name(name), In: in, Out: out, Bias: "bias"}
	for _, o := range opts {
		o(l)
	}
	if in < 1 || out < 1 {
		b.Errorf("nn.Linear %q has in=%d, out=%d: both must be 1 or more", l.Name, in, out)
		return l
	}
	l.Weight = sb.Param("weight", []int{out, in}, module.KaimingUniform(in))
	n := in * out
	if l.Bias != "" {
		bound := 1 / math.Sqrt(float64(in))
		l.Bias = sb.Param("bias", []int{out}, module.Uniform(-bound, bound))
		n += out
	}
	sb.Layer("Linear", n)
	return l
}

// Forward adds the layer to s's graph; x is [batch, In] or, as PyTorch's
// nn.Linear takes it, [..., In] with any number of leading axes (as
// [batch, seq, In]): the layer applies to the last axis and the output is
// [..., Out]. A leading-axes input is reshaped to one row per position
// around the same op, so a 2-D input runs exactly as before.
func (l *Linear) Forward(s *module.Step, x *G.Node) *G.Node {
	if x == nil {
		panic(layerError("Linear", l.Name, "input is nil"))
	}
	shape := x.Shape()
	l.checkInput(shape)
	var bias *G.Node
	if l.Bias != "" {
		bias = s.Param(l.Bias)
	}
	opts := ops.LinearOpts{ReLU: l.relu, NoInputGrad: !l.forceDx && !needsGrad(s, x)}
	rows := x
	if len(shape) > 2 {
		rows = must("Linear", l.Name)(G.Reshape(x, []int{tensor.Shape(shape[:len(shape)-1]).TotalSize(), l.In}))
	}
	y := must("Linear", l.Name)(ops.Linear(rows, s.Param(l.Weight), bias, opts))
	if len(shape) > 2 {
		out := append(append([]int(nil), shape[:len(shape)-1]...), l.Out)
		y = must("Linear", l.Name)(G.Reshape(y, out))
	}
	return layerIO(s, l.Name, x, y)
}

// checkInput panics, saying what to change, unless shape is [..., In] with
// at least one leading axis.
func (l *Linear) checkInput(shape []int) {
	n := len(shape)
	switch {
	case n >= 2 && shape[n-1] == l.In:
		return
	case n == 2:
		panic(layerError("Linear", l.Name, "input has shape %v, want [batch, %d]: the layer was made with in=%d but each row has %d features: make it with in=%d, or fix the layer that feeds it", tensor.Shape(shape), l.In, l.In, shape[1], shape[1]))
	case n > 2:
		f := tensor.Shape(shape[1:]).TotalSize()
		panic(layerError("Linear", l.Name, "input has shape %v, want [..., %d] (Linear applies to the last axis, as PyTorch's): the layer was made with in=%d but the last axis has %d: make it with in=%d for a Linear at every position, or, for one row per example, flatten it first with nn.Flatten, which gives %d features per example, and make the layer with in=%d", tensor.Shape(shape), l.In, l.In, shape[n-1], shape[n-1], f, f))
	default:
		panic(layerError("Linear", l.Name, "input has shape %v, want [batch, %d]: give it a batch axis, even for one example ([1, %d])", tensor.Shape(shape), l.In, l.In))
	}
}
