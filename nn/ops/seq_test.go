package ops

import (
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

// The smooth activations' values at a few points, from their definitions
// (PyTorch's values are compared in package nn), and their gradients by
// finite differences, in both dtypes.
func TestSmoothActivations(t *testing.T) {
	xs := []float64{-3, -0.5, 0, 0.75, 2}
	cdf := func(x float64) float64 { return 0.5 * (1 + math.Erf(x/math.Sqrt2)) }
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	for _, c := range []struct {
		name string
		f    func(*G.Node) (*G.Node, error)
		ref  func(float64) float64
	}{
		{"GELU", GELU, func(x float64) float64 { return x * cdf(x) }},
		{"GELUTanh", GELUTanh, func(x float64) float64 {
			return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
		}},
		{"Tanh", Tanh, math.Tanh},
		{"Sigmoid", Sigmoid, sig},
		{"SiLU", SiLU, func(x float64) float64 { return x * sig(x) }},
	} {
		for _, dt := range dtypes {
			want := make([]float64, len(xs))
			for i, x := range xs {
				want[i] = c.ref(x)
			}
			got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return c.f(in[0]) }, fromF64(dt, xs, len(xs)))
			assertClose(t, c.name+"/"+dt.String(), got, want, tol(dt))
			for _, shape := range [][]int{{7}, {2, 3, 5}} {
				check(t, gradcheck.Case{Name: fmt.Sprintf("%s%v/%v", c.name, shape, dt), Seed: 1,
					Inputs: []*tensor.Dense{randT(dt, 2, -4, 4, shape...)},
					Build:  func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return c.f(in[0]) }})
			}
		}
	}
	// Far out, sigmoid neither overflows nor loses its small values.
	got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return Sigmoid(in[0]) }, fromF64(tensor.Float64, []float64{-800, 800, -40}, 3))
	assertClose(t, "sigmoid tails", got, []float64{0, 1, sig(-40)}, 1e-15)
	if got[2] == 0 {
		t.Error("sigmoid(-40) rounded to 0")
	}
}

func TestSoftmaxAxis(t *testing.T) {
	for _, dt := range dtypes {
		// [2, 3] rows along axis 1 and columns along axis 0.
		x := fromF64(dt, []float64{1, 2, 3, 1, 1, 1}, 2, 3)
		e := math.E
		s := 1 + e + e*e
		got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return SoftmaxAxis(in[0], -1) }, x)
		assertClose(t, "softmax rows", got, []float64{1 / s, e / s, e * e / s, 1. / 3, 1. / 3, 1. / 3}, tol(dt))
		got = run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return SoftmaxAxis(in[0], 0) }, x)
		assertClose(t, "softmax columns", got, []float64{0.5, e / (e + 1), e * e / (e*e + 1), 0.5, 1 / (e + 1), 1 / (e*e + 1)}, tol(dt))
		got = run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return LogSoftmaxAxis(in[0], 1) }, x)
		assertClose(t, "log-softmax rows", got, []float64{1 - math.Log(s) - 1, 2 - math.Log(s) - 1, 3 - math.Log(s) - 1, -math.Log(3), -math.Log(3), -math.Log(3)}, tol(dt))
		// Huge logits: no overflow.
		got = run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return SoftmaxAxis(in[0], 0) }, fromF64(dt, []float64{1000, 0}, 2))
		assertClose(t, "softmax of 1000", got, []float64{1, math.Exp(-1000)}, tol(dt))
		for _, shape := range [][]int{{5}, {3, 4}, {2, 3, 4}} {
			for axis := -len(shape); axis < len(shape); axis++ {
				for _, log := range []bool{false, true} {
					f := SoftmaxAxis
					if log {
						f = LogSoftmaxAxis
					}
					check(t, gradcheck.Case{Name: fmt.Sprintf("Softmax(log=%v)%v axis %d/%v", log, shape, axis, dt), Seed: 1,
						Inputs: []*tensor.Dense{randT(dt, 2, -3, 3, shape...)},
						Build:  func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return f(in[0], axis) }})
				}
			}
		}
	}
	// LogSoftmaxAxis along the last axis is the existing LogSoftmax, bit
	// for bit.
	x := randT(tensor.Float32, 5, -4, 4, 3, 7)
	a := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return LogSoftmax(in[0]) }, x)
	b := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return LogSoftmaxAxis(in[0], -1) }, x)
	assertClose(t, "LogSoftmaxAxis(-1) against LogSoftmax", b, a, 0)
	g := G.NewGraph()
	m := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 3))
	for _, axis := range []int{2, -3} {
		if _, err := SoftmaxAxis(m, axis); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("Softmax: axis %d is out of range for input of shape (2, 3): use 0..1, or -2..-1", axis)) {
			t.Errorf("axis %d: %v", axis, err)
		}
	}
}

func TestLayerNorm(t *testing.T) {
	for _, dt := range dtypes {
		// One row: mean 2, biased variance 2/3.
		x := fromF64(dt, []float64{1, 2, 3}, 1, 3)
		r := 1 / math.Sqrt(2./3+1e-5)
		got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return LayerNorm(in[0], nil, nil, []int{3}, 1e-5) }, x)
		assertClose(t, "layernorm", got, []float64{-r, 0, r}, tol(dt))
		gam, bet := fromF64(dt, []float64{2, 3, 4}, 3), fromF64(dt, []float64{1, 0, -1}, 3)
		got = run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
			return LayerNorm(in[0], in[1], in[2], []int{3}, 1e-5)
		}, x, gam, bet)
		assertClose(t, "layernorm affine", got, []float64{1 - 2*r, 0, 4*r - 1}, tol(dt))
		for _, c := range []struct {
			shape, norm []int
		}{{[]int{4, 5}, []int{5}}, {[]int{2, 3, 4}, []int{4}}, {[]int{2, 3, 4}, []int{3, 4}}, {[]int{6}, []int{6}}} {
			check(t, gradcheck.Case{Name: fmt.Sprintf("LayerNorm%v over %v/%v", c.shape, c.norm, dt), Seed: 1,
				Inputs: []*tensor.Dense{randT(dt, 2, -2, 2, c.shape...), randT(dt, 3, 0.5, 1.5, c.norm...), randT(dt, 4, -1, 1, c.norm...)},
				Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
					return LayerNorm(in[0], in[1], in[2], c.norm, 1e-5)
				}})
			check(t, gradcheck.Case{Name: fmt.Sprintf("LayerNorm%v over %v, no affine/%v", c.shape, c.norm, dt), Seed: 1,
				Inputs: []*tensor.Dense{randT(dt, 2, -2, 2, c.shape...)},
				Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
					return LayerNorm(in[0], nil, nil, c.norm, 1e-3)
				}})
		}
	}
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 3, G.WithShape(2, 3, 4))
	p := G.NewVector(g, tensor.Float32, G.WithShape(3))
	q := G.NewVector(g, tensor.Float32, G.WithShape(4))
	for _, c := range []struct {
		gamma, beta *G.Node
		norm        []int
		eps         float64
		want        string
	}{
		{nil, nil, []int{3}, 1e-5, "LayerNorm input has shape (2, 3, 4), want its last axes to be the normalised shape (3)"},
		{p, q, []int{4}, 1e-5, "LayerNorm gamma has shape (3), want the normalised shape (4) (input (2, 3, 4))"},
		{q, p, []int{4}, 1e-5, "LayerNorm beta has shape (3), want the normalised shape (4)"},
		{q, nil, []int{4}, 1e-5, "give both gamma and beta, or neither"},
		{nil, nil, []int{4}, 0, "eps is 0: want a small positive value"},
		{nil, nil, nil, 1e-5, "the normalised shape is empty"},
	} {
		if _, err := LayerNorm(x, c.gamma, c.beta, c.norm, c.eps); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.norm, err, c.want)
		}
	}
}

func TestEmbedding(t *testing.T) {
	for _, dt := range dtypes {
		w := fromF64(dt, []float64{0, 1, 10, 11, 20, 21, 30, 31}, 4, 2)
		ids := fromF64(dt, []float64{2, 0, 2, 3, 1, 2}, 2, 3)
		got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return Embedding(in[0], in[1], EmbeddingOpts{}) }, ids, w)
		assertClose(t, "embedding", got, []float64{20, 21, 0, 1, 20, 21, 30, 31, 10, 11, 20, 21}, 0)
		// (The padding row's gradient is 0 by definition, not the
		// derivative: it is checked below.)
		check(t, gradcheck.Case{Name: fmt.Sprintf("Embedding/%v", dt), Seed: 1, NoGrad: []int{0},
			Inputs: []*tensor.Dense{ids, randT(dt, 3, -1, 1, 4, 2)},
			Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
				return Embedding(in[0], in[1], EmbeddingOpts{})
			}})
		// The table's gradient: rows summed per index, the padding row 0.
		g := G.NewGraph()
		in, wn := node(g, ids, "ids"), node(g, w, "w")
		y, err := Embedding(in, wn, EmbeddingOpts{PaddingIdx: 0, HasPadding: true})
		if err != nil {
			t.Fatal(err)
		}
		loss, err := SumAll(y)
		if err != nil {
			t.Fatal(err)
		}
		grads, err := G.Grad(loss, wn)
		if err != nil {
			t.Fatal(err)
		}
		m := G.NewTapeMachine(g)
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		assertClose(t, "embedding gradient", vals(grads[0].Value()), []float64{0, 0, 1, 1, 3, 3, 1, 1}, 0)
		m.Close()
	}
	// Bad ids are errors of the run naming the id, its row and position.
	for _, c := range []struct {
		ids  []float64
		want string
	}{
		{[]float64{0, 1, 2, 3, 4, 1}, "index 4 at row 1, position 1 of indices (2, 3) is out of range for a table of 4 rows (0..3): make the table with at least 5 rows"},
		{[]float64{0, -1, 2, 3, 1, 1}, "index -1 at row 0, position 1 of indices (2, 3) is negative: token ids are 0..3"},
		{[]float64{0, 1, 2, 3, 1.5, 1}, "index 1.5 at row 1, position 1 of indices (2, 3) is not a whole number"},
		{[]float64{0, 1, math.NaN(), 3, 1, 1}, "index NaN at row 0, position 2"},
	} {
		g := G.NewGraph()
		y, err := Embedding(node(g, fromF64(tensor.Float32, c.ids, 2, 3), "ids"), node(g, randT(tensor.Float32, 1, -1, 1, 4, 2), "w"), EmbeddingOpts{})
		if err != nil {
			t.Fatal(err)
		}
		m := G.NewTapeMachine(g)
		if err := m.RunAll(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ids %v: %v, want an error containing %q", c.ids, err, c.want)
		}
		m.Close()
		_ = y
	}
	g := G.NewGraph()
	w := G.NewMatrix(g, tensor.Float32, G.WithShape(4, 2))
	for _, c := range []struct {
		ids  *G.Node
		w    *G.Node
		o    EmbeddingOpts
		want string
	}{
		{G.NewVector(g, tensor.Float64, G.WithShape(3)), w, EmbeddingOpts{}, "Embedding indices have dtype float64 but the weight has float32: give the token ids in the weight's dtype"},
		{G.NewVector(g, tensor.Int, G.WithShape(3)), w, EmbeddingOpts{}, "Embedding indices have dtype int: indices are token ids stored as the weight's dtype, float32"},
		{G.NewVector(g, tensor.Float32, G.WithShape(3)), G.NewVector(g, tensor.Float32, G.WithShape(4)), EmbeddingOpts{}, "Embedding weight has shape (4): want [rows, dim]"},
		{G.NewVector(g, tensor.Float32, G.WithShape(3)), w, EmbeddingOpts{PaddingIdx: 4, HasPadding: true}, "padding index 4 is out of range for a table of 4 rows"},
		{G.NewScalar(g, tensor.Float32), w, EmbeddingOpts{}, "Embedding indices are a scalar"},
		{G.NewVector(g, tensor.Float32, G.WithShape(3)), G.NewMatrix(g, tensor.Float32, G.WithShape(1<<24+1, 2)), EmbeddingOpts{},
			"Embedding weight has 16777217 rows: float32 indices are exact only up to 16777216; train in float64"},
	} {
		if _, err := Embedding(c.ids, c.w, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, %v: %v, want an error containing %q", c.ids.Shape(), c.w.Shape(), err, c.want)
		}
	}
}

// After the first run, the new ops allocate nothing when they run again,
// serial and with the smooth activations split between three workers, and
// the split changes no bit of any op's output.
func TestSequenceOpsDoNotAllocate(t *testing.T) {
	defer func(g int, w func() int) { parallelGrain, maxWorkers = g, w }(parallelGrain, maxWorkers)
	for _, dt := range dtypes {
		var serial map[string][]float64
		for _, par := range []bool{false, true} {
			if par {
				parallelGrain, maxWorkers = 1, func() int { return 3 }
			} else {
				parallelGrain, maxWorkers = 1<<30, func() int { return 1 }
			}
			got := seqOpsRun(t, dt)
			if !par {
				serial = got
				continue
			}
			if len(got) != len(serial) {
				t.Fatalf("%v: %d op values in parallel, %d serial", dt, len(got), len(serial))
			}
			for k, want := range serial {
				for i := range want {
					if math.Float64bits(got[k][i]) != math.Float64bits(want[i]) {
						t.Fatalf("%v %s[%d]: parallel %v, serial %v", dt, k, i, got[k][i], want[i])
					}
				}
			}
		}
	}
}

// seqOpsRun builds a graph of every op of this file's, runs it, checks that
// no op allocates when it runs again, and returns each op's output.
func seqOpsRun(t *testing.T, dt tensor.Dtype) map[string][]float64 {
	t.Helper()
	g := G.NewGraph()
	must := func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ids := node(g, fromF64(dt, []float64{1, 0, 3, 3, 2, 1}, 2, 3), "ids")
	w := node(g, randT(dt, 1, -1, 1, 4, 5), "w")
	gam := node(g, randT(dt, 2, 0.5, 1.5, 5), "gamma")
	bet := node(g, randT(dt, 3, -1, 1, 5), "beta")
	h := must(Embedding(ids, w, EmbeddingOpts{PaddingIdx: 0, HasPadding: true}))
	h = must(LayerNorm(h, gam, bet, []int{5}, 1e-5))
	h = must(LayerNorm(h, nil, nil, []int{3, 5}, 1e-5))
	for _, f := range []func(*G.Node) (*G.Node, error){GELU, GELUTanh, Tanh, Sigmoid, SiLU} {
		h = must(f(h))
	}
	h = must(SoftmaxAxis(h, 1))
	h = must(LogSoftmaxAxis(h, -1))
	loss := must(SumAll(h))
	if _, err := G.Grad(loss, w, gam, bet); err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float64{}
	seen := map[string]bool{}
	for _, n := range g.AllNodes() {
		op, ok := n.Op().(fulgurOp)
		if !ok {
			continue
		}
		out[fmt.Sprintf("%d:%v", len(out), op.self().kind)] = vals(n.Value())
		var in []G.Value
		for it := g.From(n.ID()); it.Next(); {
			in = append(in, it.Node().(*G.Node).Value())
		}
		if a := testing.AllocsPerRun(5, func() {
			if _, err := n.Op().Do(in...); err != nil {
				t.Fatal(err)
			}
		}); a != 0 && !raceBuild {
			t.Errorf("%v: %v allocates %.0f times per run", dt, n.Op(), a)
		}
		seen[op.self().kind] = true
	}
	for _, k := range []string{"Embedding", "EmbeddingGrad", "LayerNorm", "LayerNormGradInput", "LayerNormGradGamma", "LayerNormGradBeta",
		"GELU", "GELUGrad", "GELUTanhGrad", "TanhGrad", "SigmoidGrad", "SiLUGrad", "Softmax", "SoftmaxGrad", "LogSoftmax", "LogSoftmaxGrad"} {
		if !seen[k] {
			t.Errorf("%v: no %s op in the graph", dt, k)
		}
	}
	return out
}
