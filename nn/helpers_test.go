package nn_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

var dtypes = []tensor.Dtype{tensor.Float32, tensor.Float64}

// model is a store made from what configure declares, as a Module's
// Configure would.
type model struct {
	b     *module.Builder
	store *module.Store
}

func newModel(t testing.TB, dt tensor.Dtype, configure func(b *module.Builder)) *model {
	t.Helper()
	b := module.NewBuilder(dt)
	configure(b)
	specs, err := b.Specs()
	if err != nil {
		t.Fatal(err)
	}
	st, err := module.NewStore(specs, dt, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &model{b: b, store: st}
}

// randomize overwrites every parameter (not buffers) with U(lo, hi), so that
// tests do not depend on special initial values (BatchNorm's γ = 1, β = 0).
func (m *model) randomize(seed uint64, lo, hi float64) {
	r := rand.New(rand.NewPCG(seed, 1))
	n := m.store.NumParams()
	if d := m.store.Data32(); d != nil {
		for i := 0; i < n; i++ {
			d[i] = float32(lo + (hi-lo)*r.Float64())
		}
		return
	}
	d := m.store.Data64()
	for i := 0; i < n; i++ {
		d[i] = lo + (hi-lo)*r.Float64()
	}
}

// step makes a Step in a fresh graph with input "x" bound to x.
func (m *model) step(t testing.TB, g *G.ExprGraph, mode module.Mode, x *tensor.Dense) *module.Step {
	t.Helper()
	s := module.NewStep(g, mode, m.store, x.Shape()[0], []module.StepInput{{Name: "x", Shape: x.Shape()[1:]}}, 7)
	if err := G.Let(s.Input("x"), x); err != nil {
		t.Fatal(err)
	}
	return s
}

// gradcheckLayer checks the gradients of forward's output with respect to
// every parameter it uses (and the input, when withInput).
func (m *model) gradcheckLayer(t *testing.T, name string, mode module.Mode, x *tensor.Dense, withInput bool, forward func(s *module.Step, x *G.Node) *G.Node) gradcheck.Result {
	t.Helper()
	c := gradcheck.Case{Name: name, Seed: 3, BuildBound: func(g *G.ExprGraph) (out *G.Node, wrt []*G.Node, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%v", r)
			}
		}()
		s := m.step(t, g, mode, x)
		out = forward(s, s.Input("x"))
		if withInput {
			wrt = append(wrt, s.Input("x"))
		}
		for _, p := range s.UsedParams() {
			n, _ := s.Node(p)
			wrt = append(wrt, n)
		}
		return out, wrt, nil
	}}
	if x.Dtype() == tensor.Float32 {
		c.Eps = 1e-2
	}
	return gradcheck.Run(t, c)
}

// run builds forward on a fresh graph in mode, runs it once and returns the
// output values.
func (m *model) run(t *testing.T, mode module.Mode, x *tensor.Dense, forward func(s *module.Step, x *G.Node) *G.Node) []float64 {
	t.Helper()
	g := G.NewGraph()
	s := m.step(t, g, mode, x)
	out := forward(s, s.Input("x"))
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	return vals(out.Value())
}

func randT(dt tensor.Dtype, seed uint64, lo, hi float64, shape ...int) *tensor.Dense {
	r := rand.New(rand.NewPCG(seed, uint64(len(shape))))
	t := tensor.New(tensor.Of(dt), tensor.WithShape(shape...))
	set(t, func(int) float64 { return lo + (hi-lo)*r.Float64() })
	return t
}

func set(t *tensor.Dense, f func(int) float64) {
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

func vals(v G.Value) []float64 {
	switch x := v.(type) {
	case *G.F32:
		return []float64{float64(*x)}
	case *G.F64:
		return []float64{float64(*x)}
	case *tensor.Dense:
		if x.Dtype() == tensor.Float32 {
			o := make([]float64, 0, x.Shape().TotalSize())
			for _, e := range x.Float32s() {
				o = append(o, float64(e))
			}
			return o
		}
		return append([]float64(nil), x.Float64s()...)
	}
	panic(fmt.Sprintf("cannot read %T", v))
}

func storeVals(t *testing.T, st *module.Store, name string) []float64 {
	t.Helper()
	d, err := st.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	return vals(d)
}

func closeTo(t *testing.T, what string, got, want []float64, tol float64) {
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
			t.Fatalf("%s[%d] = %.9g, want %.9g", what, i, got[i], want[i])
		}
	}
}

// panicOf runs f and returns what it panicked with, as a string.
func panicOf(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// gradAndRun adds the gradients of loss with respect to wrt to g and runs
// g once.
func gradAndRun(t *testing.T, what string, g *G.ExprGraph, loss *G.Node, wrt ...*G.Node) {
	t.Helper()
	if _, err := G.Grad(loss, wrt...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
