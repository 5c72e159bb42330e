package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

func TestReLU(t *testing.T) {
	for _, dt := range dtypes {
		x := fromF64(dt, []float64{-2, -0.5, 0, 0.25, 3, -1}, 2, 3)
		got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return ReLU(in[0]) }, x)
		assertClose(t, "relu", got, []float64{0, 0, 0, 0.25, 3, 0}, 0)
		for _, shape := range [][]int{{7}, {2, 3, 5}, {1, 2, 3, 3}} {
			check(t, gradcheck.Case{Name: fmt.Sprintf("ReLU%v/%v", shape, dt), Seed: 1,
				Inputs: []*tensor.Dense{spreadT(dt, 2, -1, 1, shape...)},
				Build:  func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return ReLU(in[0]) }})
		}
	}
}

func TestAddReLU(t *testing.T) {
	for _, dt := range dtypes {
		a := fromF64(dt, []float64{-2, 1, 0.5, 3}, 2, 2)
		b := fromF64(dt, []float64{1, -2, 0.25, -4}, 2, 2)
		got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return AddReLU(in[0], in[1]) }, a, b)
		assertClose(t, "addrelu", got, []float64{0, 0, 0.75, 0}, 0)
		for _, shape := range [][]int{{5}, {2, 3, 3, 2}} {
			check(t, gradcheck.Case{Name: fmt.Sprintf("AddReLU%v/%v", shape, dt), Seed: 1,
				Inputs: []*tensor.Dense{spreadT(dt, 2, -1, 1, shape...), spreadT(dt, 3, -1, 1, shape...)},
				Build:  func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return AddReLU(in[0], in[1]) }})
		}
		// x + x: one gradient node feeds both inputs of the same node.
		check(t, gradcheck.Case{Name: "AddReLU(x,x)", Seed: 1,
			Inputs: []*tensor.Dense{spreadT(dt, 2, -1, 1, 3, 4)},
			Build:  func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return AddReLU(in[0], in[0]) }})
	}
	g := G.NewGraph()
	a := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 3))
	b := G.NewMatrix(g, tensor.Float32, G.WithShape(3, 2))
	if _, err := AddReLU(a, b); err == nil || err.Error() != "AddReLU inputs have shapes (2, 3) and (3, 2): they must be equal" {
		t.Errorf("shape mismatch: %v", err)
	}
}

// Op-held output buffers are reused across runs: two runs on different
// inputs must each give their own right answer, and a node value read after
// the first run is what that run computed until the next run replaces it.
func TestBuffersAcrossRuns(t *testing.T) {
	for _, dt := range dtypes {
		xt := fromF64(dt, []float64{1, -1, 2, -2}, 2, 2)
		g := G.NewGraph()
		x := node(g, xt, "x")
		w := node(g, fromF64(dt, []float64{1, 0, 0, 1}, 2, 2), "w")
		y, err := Linear(x, w, nil, LinearOpts{ReLU: true})
		if err != nil {
			t.Fatal(err)
		}
		loss, err := SumAll(y)
		if err != nil {
			t.Fatal(err)
		}
		grads, err := G.Grad(loss, w)
		if err != nil {
			t.Fatal(err)
		}
		m := G.NewTapeMachine(g)
		for i, c := range []struct{ x, y, dw []float64 }{
			{[]float64{1, -1, 2, -2}, []float64{1, 0, 2, 0}, []float64{3, -3, 0, 0}},
			{[]float64{-1, 3, -2, 1}, []float64{0, 3, 0, 1}, []float64{0, 0, -3, 4}},
			{[]float64{1, -1, 2, -2}, []float64{1, 0, 2, 0}, []float64{3, -3, 0, 0}},
		} {
			setAll(xt, func(j int) float64 { return c.x[j] })
			if err := m.RunAll(); err != nil {
				t.Fatal(err)
			}
			assertClose(t, fmt.Sprintf("run %d y", i), vals(y.Value()), c.y, 0)
			assertClose(t, fmt.Sprintf("run %d dw", i), vals(grads[0].Value()), c.dw, 0)
			m.Reset()
		}
		m.Close()
	}
}

// The float32 ReLU's kernel gives the Go loop's bits (max(x, 0): -0 to +0,
// NaN kept) at every length up to 70 (whole 8-lane vectors and masked
// tails), and writes nothing past the end.
func TestReluKernelMatchesGo(t *testing.T) {
	if !useAVX2 && !useAVX512 {
		t.Skip("no AVX2 on this CPU (or FULGUR_NN_KERNELS=go): the Go loop runs")
	}
	defer func(a, b bool) { useAVX512, useAVX2 = a, b }(useAVX512, useAVX2)
	special := []float32{float32(math.NaN()), 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-45, -1e-45}
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n <= 70; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
			if r.IntN(4) == 0 {
				x[i] = special[r.IntN(len(special))]
			}
		}
		want := make([]float32, n)
		useAVX512, useAVX2 = false, false
		relu(x, want)
		useAVX2 = true
		got := make([]float32, n+8)
		for i := range got {
			got[i] = 42
		}
		relu(x, got[:n])
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("n=%d: relu(%v) = %v (%#x), want %v (%#x)", n, x[i], got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
		for i := n; i < len(got); i++ {
			if got[i] != 42 {
				t.Fatalf("n=%d: wrote %v at %d, past the end", n, got[i], i)
			}
		}
	}
}
