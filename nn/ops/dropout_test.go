package ops

import (
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

// Each run draws a new mask; the kept fraction is 1-p within sampling error,
// kept elements are scaled by 1/(1-p), and the same seed repeats the sequence.
func TestDropoutTrain(t *testing.T) {
	for _, dt := range dtypes {
		for _, p := range []float64{0.1, 0.5, 0.8} {
			const n = 20000
			xt := tensor.New(tensor.Of(dt), tensor.WithShape(4, n/4))
			setAll(xt, func(int) float64 { return 2 })
			masks := func(seed uint64) [][]float64 {
				g := G.NewGraph()
				y, err := Dropout(node(g, xt, "x"), p, seed)
				if err != nil {
					t.Fatal(err)
				}
				m := G.NewTapeMachine(g)
				defer m.Close()
				var out [][]float64
				for r := 0; r < 3; r++ {
					if err := m.RunAll(); err != nil {
						t.Fatal(err)
					}
					out = append(out, vals(y.Value()))
					m.Reset()
				}
				return out
			}
			a, b := masks(7), masks(7)
			for r := range a {
				kept := 0
				for i, v := range a[r] {
					if v != 0 {
						kept++
						if math.Abs(v-2/(1-p)) > 1e-5 {
							t.Fatalf("p=%v: kept element %v, want %v", p, v, 2/(1-p))
						}
					}
					if v != b[r][i] {
						t.Fatalf("p=%v run %d: same seed, different masks at %d", p, r, i)
					}
				}
				frac := float64(kept) / n
				// 5 standard deviations of a binomial proportion.
				if sd := math.Sqrt(p * (1 - p) / n); math.Abs(frac-(1-p)) > 5*sd {
					t.Errorf("p=%v run %d: kept %.4f, want %.4f ± %.4f", p, r, frac, 1-p, 5*sd)
				}
			}
			same := 0
			for i := range a[0] {
				if a[0][i] == a[1][i] {
					same++
				}
			}
			if same == n {
				t.Errorf("p=%v: the mask did not change between runs", p)
			}
		}
	}
}

func TestDropoutExtremes(t *testing.T) {
	x := randT(tensor.Float64, 1, 0.5, 1, 3, 4)
	got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return Dropout(in[0], 0, 1) }, x)
	assertClose(t, "p=0", got, vals(x), 0)
	got = run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return Dropout(in[0], 1, 1) }, x)
	assertClose(t, "p=1", got, make([]float64, 12), 0)
	g := G.NewGraph()
	if _, err := Dropout(node(g, x, "x"), 1.5, 1); err == nil {
		t.Error("p=1.5 accepted")
	}
}

func TestDropoutGrad(t *testing.T) {
	for _, dt := range dtypes {
		for _, s := range [][]int{{7}, {3, 5}, {2, 3, 2, 2}} {
			check(t, gradcheck.Case{Name: fmt.Sprintf("Dropout%v/%v", s, dt), Seed: 4,
				Inputs: []*tensor.Dense{randT(dt, 1, -1, 1, s...)},
				Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
					y, err := Dropout(in[0], 0.4, 9)
					if err == nil {
						y.Op().(*dropoutOp).fixed = true // one mask for every run
					}
					return y, err
				}})
		}
	}
}

func TestFlatten(t *testing.T) {
	for _, dt := range dtypes {
		x := randT(dt, 1, -1, 1, 2, 3, 2, 2)
		g := G.NewGraph()
		y, err := Flatten(node(g, x, "x"))
		if err != nil {
			t.Fatal(err)
		}
		if !y.Shape().Eq(tensor.Shape{2, 12}) {
			t.Fatalf("shape %v", y.Shape())
		}
		got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return Flatten(in[0]) }, x)
		assertClose(t, "flatten", got, vals(x), 0)
		check(t, gradcheck.Case{Name: "Flatten/" + dt.String(), Seed: 2, Inputs: []*tensor.Dense{x},
			Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return Flatten(in[0]) }})
	}
}
