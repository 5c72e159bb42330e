package nn

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
)

// LayerNorm is PyTorch's nn.LayerNorm: each example's last axes, of sizes
// Shape, are normalised to mean 0 and variance 1 (biased, plus Eps), then
// scaled by "weight" (γ, ones) and shifted by "bias" (β, zeros), both of
// shape Shape. It keeps no statistics: training and evaluation graphs
// compute the same thing.
type LayerNorm struct {
	Name   string
	Shape  []int   // the normalised shape, PyTorch's normalized_shape
	Eps    float64 // default 1e-5
	Weight string  // full parameter names; "" without elementwise affine
	Bias   string
}

// LayerNormOption changes a LayerNorm's defaults (eps 1e-5, elementwise
// affine).
type LayerNormOption func(*LayerNorm)

// LayerNormEps sets the value added to the variance (> 0).
func LayerNormEps(eps float64) LayerNormOption { return func(l *LayerNorm) { l.Eps = eps } }

// LayerNormNoAffine is PyTorch's elementwise_affine=False: no weight or
// bias.
func LayerNormNoAffine() LayerNormOption {
	return func(l *LayerNorm) { l.Weight, l.Bias = "", "" }
}

// NewLayerNorm declares "name.weight" and "name.bias" of the normalised
// shape (the sizes of the input's last axes; [features] for rows of
// features), ones and zeros as PyTorch's.
func NewLayerNorm(b *module.Builder, name string, normalizedShape []int, opts ...LayerNormOption) *LayerNorm {
	sb := b.Scope(name)
	l := &LayerNorm{Name: b.Name(name), Shape: append([]int(nil), normalizedShape...), Eps: 1e-5, Weight: "weight", Bias: "bias"}
	for _, o := range opts {
		o(l)
	}
	bad := len(l.Shape) == 0
	n := 1
	for _, d := range l.Shape {
		bad = bad || d < 1
		n *= d
	}
	if bad {
		b.Errorf("nn.LayerNorm %q has normalised shape %v: give the sizes (1 or more) of the last axes to normalise, as []int{features}", l.Name, l.Shape)
		return l
	}
	if !(l.Eps > 0) || math.IsInf(l.Eps, 0) {
		b.Errorf("nn.LayerNorm %q has eps=%v: want a small positive value (PyTorch's default is 1e-5)", l.Name, l.Eps)
	}
	params := 0
	if l.Weight != "" {
		l.Weight = sb.Param("weight", l.Shape, module.Ones())
		l.Bias = sb.Param("bias", l.Shape, module.Zeros())
		params = 2 * n
	}
	sb.Layer("LayerNorm", params)
	return l
}

// Forward adds the layer to s's graph; x must end in the normalised shape.
func (l *LayerNorm) Forward(s *module.Step, x *G.Node) *G.Node {
	if x == nil {
		panic(layerError("LayerNorm", l.Name, "input is nil"))
	}
	xs, k := x.Shape(), len(l.Shape)
	if len(xs) < k || !tensor.Shape(xs[len(xs)-k:]).Eq(tensor.Shape(l.Shape)) {
		panic(layerError("LayerNorm", l.Name, "input has shape %v, want [..., %s]: the layer normalises its last axes, made with normalised shape %v; make it with the sizes of the input's last axes, or fix the layer that feeds it",
			xs, joinInts(l.Shape), l.Shape))
	}
	var gamma, beta *G.Node
	if l.Weight != "" {
		gamma, beta = s.Param(l.Weight), s.Param(l.Bias)
	}
	return layerIO(s, l.Name, x, must("LayerNorm", l.Name)(ops.LayerNorm(x, gamma, beta, l.Shape, l.Eps)))
}

func joinInts(v []int) string {
	out := ""
	for i, d := range v {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprint(d)
	}
	return out
}
