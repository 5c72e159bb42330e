package strategytest

import (
	"fmt"
	"math/rand/v2"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
)

// MLP is a two-layer perceptron (In → Hidden, ReLU, → Out) with a mean
// squared error loss, built from Gorgonia's own ops so strategies are tested
// apart from nn. Fields: "x" of shape [In], "y" of shape [Out]. It declares
// one buffer, "scale" (ones, multiplied into the output), so that buffer
// broadcasting is exercised too.
type MLP struct {
	In, Hidden, Out int
	// Optimizer is "sgd" (default) or "adam"; LR defaults to 0.05.
	Optimizer string
	LR        float64
}

func (m *MLP) Configure(b *module.Builder) error {
	b.Param("w1", []int{m.In, m.Hidden}, module.KaimingUniform(m.In))
	b.Param("b1", []int{m.Hidden}, module.Uniform(-0.1, 0.1))
	b.Param("w2", []int{m.Hidden, m.Out}, module.KaimingUniform(m.Hidden))
	b.Param("b2", []int{m.Out}, module.Uniform(-0.1, 0.1))
	b.Buffer("scale", []int{m.Out}, module.Ones())
	return nil
}

func (m *MLP) forward(s *module.Step) *G.Node {
	h := G.Must(G.Mul(s.Input("x"), s.Param("w1")))
	h = G.Must(G.BroadcastAdd(h, s.Param("b1"), nil, []byte{0}))
	h = G.Must(G.Rectify(h))
	o := G.Must(G.Mul(h, s.Param("w2")))
	o = G.Must(G.BroadcastAdd(o, s.Param("b2"), nil, []byte{0}))
	return G.Must(G.BroadcastHadamardProd(o, s.Buffer("scale"), nil, []byte{0}))
}

func (m *MLP) loss(s *module.Step) *G.Node { return m.lossOf(s, m.forward(s)) }

// lossOf is the mean squared error of the outputs o against "y".
func (m *MLP) lossOf(s *module.Step, o *G.Node) *G.Node {
	n := s.BatchSize() * m.Out
	o = G.Must(G.Reshape(o, []int{n}))
	y := G.Must(G.Reshape(s.Input("y"), []int{n}))
	return G.Must(G.Mean(G.Must(G.Square(G.Must(G.Sub(o, y))))))
}

func (m *MLP) TrainingStep(s *module.Step) (*G.Node, error) {
	l := m.loss(s)
	s.Log("train_loss", l, module.OnEpoch(true))
	return l, nil
}

// ValidationStep logs val_loss (a mean over rows).
func (m *MLP) ValidationStep(s *module.Step) error {
	s.Log("val_loss", m.loss(s))
	return nil
}

// PredictStep returns the outputs, one row per example.
func (m *MLP) PredictStep(s *module.Step) (*G.Node, error) { return m.forward(s), nil }

func (m *MLP) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	lr := m.LR
	if lr == 0 {
		lr = 0.05
	}
	switch m.Optimizer {
	case "", "sgd":
		o, err := optim.NewSGD(optim.SGDConfig{LR: lr, Momentum: 0.9})
		return o, nil, err
	case "adam":
		o, err := optim.NewAdam(optim.AdamConfig{LR: lr})
		return o, nil, err
	}
	return nil, nil, fmt.Errorf("MLP.Optimizer is %q: use \"sgd\" or \"adam\"", m.Optimizer)
}

// Regression makes n examples of y = tanh(x·A) + noise with x ~ N(0, 1), a
// fixed function of seed.
func Regression(n, in, out int, seed uint64) (*data.InMemory, error) {
	r := rand.New(rand.NewPCG(seed, 7))
	a := make([]float64, in*out)
	for i := range a {
		a[i] = r.NormFloat64()
	}
	x := make([]float32, n*in)
	y := make([]float32, n*out)
	for i := 0; i < n; i++ {
		for j := 0; j < in; j++ {
			x[i*in+j] = float32(r.NormFloat64())
		}
		for k := 0; k < out; k++ {
			s := 0.0
			for j := 0; j < in; j++ {
				s += float64(x[i*in+j]) * a[j*out+k]
			}
			y[i*out+k] = float32(s/float64(in) + 0.05*r.NormFloat64())
		}
	}
	return data.NewInMemory([]data.Field{{Name: "x", Shape: []int{in}}, {Name: "y", Shape: []int{out}}}, [][]float32{x, y})
}

// Rows returns examples [lo, hi) of ds as one batch.
func Rows(ds data.Dataset, lo, hi int) (*data.Batch, error) {
	fields := ds.Fields()
	b := &data.Batch{Size: hi - lo, Fields: fields, Data: make([][]float32, len(fields)), Indices: make([]int, 0, hi-lo)}
	dst := make([][]float32, len(fields))
	for f := range fields {
		b.Data[f] = make([]float32, (hi-lo)*fields[f].Size())
	}
	for i := lo; i < hi; i++ {
		for f := range fields {
			w := fields[f].Size()
			dst[f] = b.Data[f][(i-lo)*w : (i-lo+1)*w]
		}
		if err := ds.Read(i, dst); err != nil {
			return nil, err
		}
		b.Indices = append(b.Indices, i)
	}
	return b, nil
}
