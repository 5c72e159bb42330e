package nn

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
)

// Dropout zeroes each element with probability P in training graphs, scaling
// the rest by 1/(1-P), with a mask drawn afresh at every run from the step's
// seed and the layer's name; in other graphs it is the identity.
type Dropout struct {
	Name string
	P    float64
}

// NewDropout records the layer; p must be in [0, 1].
func NewDropout(b *module.Builder, name string, p float64) *Dropout {
	l := &Dropout{Name: b.Name(name), P: p}
	if !(p >= 0 && p <= 1) {
		b.Errorf("nn.Dropout %q has p=%v: want 0 ≤ p ≤ 1", l.Name, p)
	}
	b.Scope(name).Layer("Dropout", 0)
	return l
}

// Forward adds dropout to a training graph and returns x itself otherwise.
func (l *Dropout) Forward(s *module.Step, x *G.Node) *G.Node {
	if x == nil {
		panic(layerError("Dropout", l.Name, "input is nil"))
	}
	if !s.Training() || l.P == 0 {
		return layerIO(s, l.Name, x, x)
	}
	return layerIO(s, l.Name, x, must("Dropout", l.Name)(ops.DropoutKeyed(x, l.P, seedFor(s.Seed(), l.Name), s.RunKey())))
}

// Flatten reshapes [batch, ...] to [batch, prod(...)].
type Flatten struct{ Name string }

// NewFlatten records the layer.
func NewFlatten(b *module.Builder, name string) *Flatten {
	b.Scope(name).Layer("Flatten", 0)
	return &Flatten{Name: b.Name(name)}
}

// Forward adds the reshape (a copy; see ops.Flatten) to s's graph, or returns
// x when it is already [batch, features].
func (l *Flatten) Forward(s *module.Step, x *G.Node) *G.Node {
	if x == nil || x.Dims() < 2 {
		var shape any = "nil"
		if x != nil {
			shape = x.Shape()
		}
		panic(layerError("Flatten", l.Name, "input has shape %v, want [batch, ...] with at least 2 axes", shape))
	}
	if x.Dims() == 2 {
		return layerIO(s, l.Name, x, x)
	}
	return layerIO(s, l.Name, x, must("Flatten", l.Name)(ops.Flatten(x)))
}

// ReLU is max(0, x) elementwise.
type ReLU struct{ Name string }

// NewReLU records the layer.
func NewReLU(b *module.Builder, name string) *ReLU {
	b.Scope(name).Layer("ReLU", 0)
	return &ReLU{Name: b.Name(name)}
}

// Forward adds the ReLU to s's graph.
func (l *ReLU) Forward(s *module.Step, x *G.Node) *G.Node {
	if x == nil {
		panic(layerError("ReLU", l.Name, "input is nil"))
	}
	return layerIO(s, l.Name, x, must("ReLU", l.Name)(ops.ReLU(x)))
}

// CrossEntropy is the mean over the batch of the softmax cross-entropy of
// logits [batch, classes] against labels [batch] (class indices stored as
// floats), computed stably in one op. It panics, naming the shapes, when they
// do not fit. LabelSmoothing and ClassWeights give PyTorch's
// label_smoothing and weight.
func CrossEntropy(logits, labels *G.Node, opts ...CrossEntropyOption) *G.Node {
	return crossEntropy(logits, labels, nil, opts)
}

// CrossEntropyWeighted is Σ wᵢ·lossᵢ / Σ wᵢ with row weights [batch] ≥ 0; a
// 0/1 mask averages over the kept rows (a padded last batch). A row of
// weight 0 is left out whatever its label holds: PyTorch's
// cross_entropy(ignore_index=-100) is CrossEntropyWeighted with weight 0
// where the label is -100 and 1 elsewhere. Without label smoothing,
// PyTorch's class weights w_c are row weights w_{label of the row} (the
// normalisation is the same); with it, give them as ClassWeights, which
// also weigh each row's smoothing term class by class.
func CrossEntropyWeighted(logits, labels, weights *G.Node, opts ...CrossEntropyOption) *G.Node {
	return crossEntropy(logits, labels, weights, opts)
}

// CrossEntropyOption changes CrossEntropy's settings.
type CrossEntropyOption func(*ops.CrossEntropyOpts)

// LabelSmoothing is PyTorch's label_smoothing ε, in [0, 1]: each row's
// target is (1-ε)·onehot(label) + ε/classes, with class weights and the
// mean's divisor exactly as torch 1.13's cross_entropy (the divisor is the
// sum of the kept rows' class weights; the smoothing term of every kept
// row counts, also where its class weighs 0). 0 is none.
func LabelSmoothing(eps float64) CrossEntropyOption {
	return func(c *ops.CrossEntropyOpts) { c.LabelSmoothing = eps }
}

// ClassWeights is PyTorch's weight argument of cross_entropy: one weight
// ≥ 0 per class. The mean divides by the sum of the rows' class weights
// (times their row weights, with CrossEntropyWeighted).
func ClassWeights(w ...float64) CrossEntropyOption {
	return func(c *ops.CrossEntropyOpts) { c.ClassWeights = append([]float64(nil), w...) }
}

func crossEntropy(logits, labels, weights *G.Node, opts []CrossEntropyOption) *G.Node {
	var o ops.CrossEntropyOpts
	for _, f := range opts {
		f(&o)
	}
	return lossOrMetric("CrossEntropy", func(a, b, c *G.Node) (*G.Node, error) {
		return ops.SoftmaxCrossEntropyWith(a, b, c, o)
	}, logits, labels, weights)
}

// Accuracy is the fraction of rows whose largest logit is the label's. It
// has no gradient: log it.
func Accuracy(logits, labels *G.Node) *G.Node {
	return lossOrMetric("Accuracy", ops.Accuracy, logits, labels, nil)
}

// AccuracyWeighted is Accuracy with row weights, as CrossEntropyWeighted (a
// row of weight 0 is left out whatever its label holds).
func AccuracyWeighted(logits, labels, weights *G.Node) *G.Node {
	return lossOrMetric("Accuracy", ops.Accuracy, logits, labels, weights)
}

func lossOrMetric(name string, f func(a, b, c *G.Node) (*G.Node, error), logits, labels, weights *G.Node) *G.Node {
	if logits == nil || labels == nil {
		panic(fmt.Errorf("nn.%s: logits or labels is nil", name))
	}
	n, err := f(logits, labels, weights)
	if err != nil {
		panic(fmt.Errorf("nn.%w", err))
	}
	return n
}
