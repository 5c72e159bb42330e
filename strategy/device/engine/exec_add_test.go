package engine

import (
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
)

// residual is a small network with a value that feeds two ops, h into
// g = h + tanh(h·w2), so that Gorgonia's differentiation sums h's two
// gradients with an elementwise Add (what a residual block's input gets).
type residual struct{}

func (residual) Configure(b *module.Builder) error {
	b.Param("w1", []int{5, 6}, module.Normal(0, 0.5))
	b.Param("w2", []int{6, 6}, module.Normal(0, 0.5))
	b.Param("w3", []int{6, 1}, module.Normal(0, 0.5))
	return nil
}

func (residual) TrainingStep(s *module.Step) (*G.Node, error) {
	h := G.Must(G.Tanh(G.Must(G.Mul(s.Input("x"), s.Param("w1")))))
	g := G.Must(G.Add(h, G.Must(G.Tanh(G.Must(G.Mul(h, s.Param("w2")))))))
	y := G.Must(G.Reshape(G.Must(G.Mul(g, s.Param("w3"))), []int{s.BatchSize()}))
	return G.Must(G.Mean(G.Must(G.Square(G.Must(G.Sub(y, s.Input("y"))))))), nil
}

// The executor runs the gradient sums of a value that feeds two ops (and
// the model's own Add) through ops.AddInto: the same bits as TapeMachine's
// Gorgonia Add, in both dtypes, over runs of different batch sizes.
func TestGradientSumsMatchTapeMachine(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		ex, tp := newEngineOf(t, residual{}, dt, false), newEngineOf(t, residual{}, dt, true)
		for i, n := range []int{8, 3, 8} {
			b := batchOf(n, uint64(i))
			r1, r2 := trainBoth(t, ex, tp, b)
			if r1.Loss != r2.Loss {
				t.Fatalf("%v run %d: loss %v (executor) vs %v (tape)", dt, i, r1.Loss, r2.Loss)
			}
			g1, g2 := grads(ex.Store()), grads(tp.Store())
			for k := range g1 {
				if g1[k] != g2[k] || g1[k] == 0 {
					t.Fatalf("%v run %d: grad[%d] %v (executor) vs %v (tape), want equal and non-zero", dt, i, k, g1[k], g2[k])
				}
			}
		}
		adds := 0
		for _, st := range ex.graphs[key{mode: module.Train, batch: 8}].exec.steps {
			if st.add {
				adds++
			}
		}
		if adds < 2 {
			t.Fatalf("%v: %d steps marked as Gorgonia's Add, want the model's and the gradient sum's (2 or more)", dt, adds)
		}
	}
}
