package nn

import (
	"fmt"
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

// Forward adds the layer to s's graph; x must be [batch, In].
func (l *Linear) Forward(s *module.Step, x *G.Node) *G.Node {
	if x != nil {
		l.checkInput(x.Shape())
	}
	checkInput("Linear", l.Name, x, "[batch, "+itoa(l.In)+"]", -1, l.In)
	var bias *G.Node
	if l.Bias != "" {
		bias = s.Param(l.Bias)
	}
	return layerIO(s, l.Name, x, must("Linear", l.Name)(ops.Linear(x, s.Param(l.Weight), bias,
		ops.LinearOpts{ReLU: l.relu, NoInputGrad: !l.forceDx && !needsGrad(s, x)})))
}

// checkInput panics, saying what to change, unless shape is [batch, In].
func (l *Linear) checkInput(shape []int) {
	want := fmt.Sprintf("input has shape %v, want [batch, %d]", tensor.Shape(shape), l.In)
	n := len(shape)
	switch {
	case n == 2 && shape[1] == l.In:
		return
	case n == 2:
		panic(layerError("Linear", l.Name, "%s: the layer was made with in=%d but each row has %d features: make it with in=%d, or fix the layer that feeds it", want, l.In, shape[1], shape[1]))
	case n > 2 && shape[n-1] == l.In:
		panic(layerError("Linear", l.Name, "%s: Linear takes one row per example; for PyTorch's Linear over the last axis of every position, reshape to [%d, %d] (G.Reshape) and back afterwards", want, tensor.Shape(shape[:n-1]).TotalSize(), l.In))
	case n > 2:
		f := tensor.Shape(shape[1:]).TotalSize()
		panic(layerError("Linear", l.Name, "%s: flatten it first with nn.Flatten, which gives %d features per example, and make the layer with in=%d", want, f, f))
	case n < 2:
		panic(layerError("Linear", l.Name, "%s: give it a batch axis, even for one example ([1, %d])", want, l.In))
	}
}
