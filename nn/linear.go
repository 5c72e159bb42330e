package nn

import (
	"math"

	G "gorgonia.org/gorgonia"

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

// Forward adds the layer to s's graph; x must be [batch, In].
func (l *Linear) Forward(s *module.Step, x *G.Node) *G.Node {
	if x != nil && x.Dims() > 2 {
		panic(layerError("Linear", l.Name, "input has shape %v, want [batch, %d] (flatten it first with nn.Flatten)", x.Shape(), l.In))
	}
	checkInput("Linear", l.Name, x, "[batch, "+itoa(l.In)+"]", -1, l.In)
	var bias *G.Node
	if l.Bias != "" {
		bias = s.Param(l.Bias)
	}
	return layerIO(s, l.Name, x, must("Linear", l.Name)(ops.Linear(x, s.Param(l.Weight), bias,
		ops.LinearOpts{ReLU: l.relu, NoInputGrad: !l.forceDx && !needsGrad(s, x)})))
}
