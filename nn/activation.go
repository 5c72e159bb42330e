package nn

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
)

// GELU is x·Φ(x), PyTorch's nn.GELU(): with the exact erf by default, with
// the tanh approximation when made with GELUTanh.
type GELU struct {
	Name string
	// Approximate is PyTorch's approximate: "none" or "tanh".
	Approximate string
}

// GELUOption changes a GELU.
type GELUOption func(*GELU)

// GELUTanh is PyTorch's approximate='tanh':
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
func GELUTanh() GELUOption { return func(l *GELU) { l.Approximate = "tanh" } }

// NewGELU records the layer.
func NewGELU(b *module.Builder, name string, opts ...GELUOption) *GELU {
	l := &GELU{Name: b.Name(name), Approximate: "none"}
	for _, o := range opts {
		o(l)
	}
	if l.Approximate != "none" && l.Approximate != "tanh" {
		b.Errorf("nn.GELU %q has Approximate %q: use \"none\" or \"tanh\"", l.Name, l.Approximate)
	}
	b.Scope(name).Layer("GELU", 0)
	return l
}

// Forward adds the GELU to s's graph.
func (l *GELU) Forward(s *module.Step, x *G.Node) *G.Node {
	f := ops.GELU
	if l.Approximate == "tanh" {
		f = ops.GELUTanh
	}
	return activation(s, "GELU", l.Name, x, f)
}

// Tanh is tanh(x) elementwise.
type Tanh struct{ Name string }

// NewTanh records the layer.
func NewTanh(b *module.Builder, name string) *Tanh {
	b.Scope(name).Layer("Tanh", 0)
	return &Tanh{Name: b.Name(name)}
}

// Forward adds the Tanh to s's graph.
func (l *Tanh) Forward(s *module.Step, x *G.Node) *G.Node {
	return activation(s, "Tanh", l.Name, x, ops.Tanh)
}

// Sigmoid is 1/(1 + e^-x) elementwise (an autoencoder's output in [0, 1],
// say). For a loss on probabilities, give the logits to BCEWithLogitsLoss
// instead: it is exact where sigmoid rounds to 0 or 1.
type Sigmoid struct{ Name string }

// NewSigmoid records the layer.
func NewSigmoid(b *module.Builder, name string) *Sigmoid {
	b.Scope(name).Layer("Sigmoid", 0)
	return &Sigmoid{Name: b.Name(name)}
}

// Forward adds the Sigmoid to s's graph.
func (l *Sigmoid) Forward(s *module.Step, x *G.Node) *G.Node {
	return activation(s, "Sigmoid", l.Name, x, ops.Sigmoid)
}

// SiLU is x·sigmoid(x) elementwise (swish), PyTorch's nn.SiLU.
type SiLU struct{ Name string }

// NewSiLU records the layer.
func NewSiLU(b *module.Builder, name string) *SiLU {
	b.Scope(name).Layer("SiLU", 0)
	return &SiLU{Name: b.Name(name)}
}

// Forward adds the SiLU to s's graph.
func (l *SiLU) Forward(s *module.Step, x *G.Node) *G.Node {
	return activation(s, "SiLU", l.Name, x, ops.SiLU)
}

func activation(s *module.Step, typ, name string, x *G.Node, f func(*G.Node) (*G.Node, error)) *G.Node {
	if x == nil {
		panic(layerError(typ, name, "input is nil"))
	}
	return layerIO(s, name, x, must(typ, name)(f(x)))
}

// Softmax is exp(x)/Σexp(x) along axis (negative counts from the end, as
// PyTorch's dim: -1 is the last), computed stably: attention weights, or
// probabilities from logits for a prediction. For a loss, give the logits
// to CrossEntropy, which is exact where softmax rounds to 0. It panics,
// naming the axis and the shape, when the axis does not exist.
func Softmax(x *G.Node, axis int) *G.Node {
	return softmaxFunc("Softmax", ops.SoftmaxAxis, x, axis)
}

// LogSoftmax is x - logsumexp(x) along axis (negative counts from the end),
// computed stably.
func LogSoftmax(x *G.Node, axis int) *G.Node {
	return softmaxFunc("LogSoftmax", ops.LogSoftmaxAxis, x, axis)
}

func softmaxFunc(name string, f func(*G.Node, int) (*G.Node, error), x *G.Node, axis int) *G.Node {
	if x == nil {
		panic(fmt.Errorf("nn.%s: input is nil", name))
	}
	n, err := f(x, axis)
	if err != nil {
		panic(fmt.Errorf("nn.%w", err))
	}
	return n
}
