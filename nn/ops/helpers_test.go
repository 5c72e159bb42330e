package ops

import (
	"fmt"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

var dtypes = []tensor.Dtype{tensor.Float32, tensor.Float64}

// randT is a tensor of uniform values in [lo, hi).
func randT(dt tensor.Dtype, seed uint64, lo, hi float64, shape ...int) *tensor.Dense {
	r := rand.New(rand.NewPCG(seed, uint64(len(shape))))
	t := tensor.New(tensor.Of(dt), tensor.WithShape(shape...))
	setAll(t, func(int) float64 { return lo + (hi-lo)*r.Float64() })
	return t
}

// spreadT is a tensor whose values are a random permutation of an evenly
// spaced grid in [lo, hi), offset so that 0 and ±x pairs are not on it: no
// two values are closer than the grid step, so max-pool windows and ReLU
// inputs stay clear of ties and kinks.
func spreadT(dt tensor.Dtype, seed uint64, lo, hi float64, shape ...int) *tensor.Dense {
	r := rand.New(rand.NewPCG(seed, 7))
	t := tensor.New(tensor.Of(dt), tensor.WithShape(shape...))
	n := t.Shape().TotalSize()
	perm := r.Perm(n)
	setAll(t, func(i int) float64 { return lo + (hi-lo)*(float64(perm[i])+0.37)/float64(n) })
	return t
}

func labelsT(dt tensor.Dtype, seed uint64, batch, classes int) *tensor.Dense {
	r := rand.New(rand.NewPCG(seed, 3))
	t := tensor.New(tensor.Of(dt), tensor.WithShape(batch))
	setAll(t, func(int) float64 { return float64(r.IntN(classes)) })
	return t
}

func fromF64(dt tensor.Dtype, v []float64, shape ...int) *tensor.Dense {
	t := tensor.New(tensor.Of(dt), tensor.WithShape(shape...))
	setAll(t, func(i int) float64 { return v[i] })
	return t
}

func setAll(t *tensor.Dense, f func(int) float64) {
	if t.Dtype() == tensor.Float32 {
		for i := range t.Float32s() {
			t.Float32s()[i] = float32(f(i))
		}
		return
	}
	for i := range t.Float64s() {
		t.Float64s()[i] = f(i)
	}
}

func vals(v G.Value) []float64 { return gradcheck.Values(v) }

// tol is the comparison tolerance for forward values in each dtype.
func tol(dt tensor.Dtype) float64 {
	if dt == tensor.Float32 {
		return 1e-5
	}
	return 1e-12
}

func assertClose(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		d := got[i] - want[i]
		if d < 0 {
			d = -d
		}
		w := want[i]
		if w < 0 {
			w = -w
		}
		if d > tol*(1+w) || d != d {
			t.Fatalf("%s[%d] = %.9g, want %.9g (|diff| %.3g)", what, i, got[i], want[i], d)
		}
	}
}

// node binds a leaf node to t in g.
func node(g *G.ExprGraph, t *tensor.Dense, name string) *G.Node {
	if t.Shape().IsScalar() {
		return G.NewScalar(g, t.Dtype(), G.WithName(name), G.WithValue(t))
	}
	return G.NewTensor(g, t.Dtype(), t.Dims(), G.WithShape(t.Shape().Clone()...), G.WithName(name), G.WithValue(t))
}

// run builds f into a fresh graph over inputs, runs it once and returns the
// output's values.
func run(t *testing.T, f func(g *G.ExprGraph, in []*G.Node) (*G.Node, error), inputs ...*tensor.Dense) []float64 {
	t.Helper()
	g := G.NewGraph()
	ns := make([]*G.Node, len(inputs))
	for i, in := range inputs {
		ns[i] = node(g, in, fmt.Sprintf("in%d", i))
	}
	out, err := f(g, ns)
	if err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	return vals(out.Value())
}

func check(t *testing.T, c gradcheck.Case) {
	t.Helper()
	r := gradcheck.Run(t, c)
	if r.Checked == 0 {
		t.Fatalf("gradcheck %s checked nothing", c.Name)
	}
}
