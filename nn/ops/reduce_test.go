package ops

import (
	"fmt"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

// sumRef sums x of shape s over one axis, by index arithmetic.
func sumRef(x []float64, s []int, axis int) []float64 {
	outer, n, inner := split(tensor.Shape(s), axis)
	out := make([]float64, outer*inner)
	for o := 0; o < outer; o++ {
		for k := 0; k < n; k++ {
			for i := 0; i < inner; i++ {
				out[o*inner+i] += x[(o*n+k)*inner+i]
			}
		}
	}
	return out
}

func TestReduceAxis(t *testing.T) {
	for _, dt := range dtypes {
		for _, s := range [][]int{{5}, {3, 4}, {2, 3, 4}, {4, 4, 4, 2}, {1, 3, 1, 2}} {
			for axis := range s {
				x := randT(dt, 1, -1, 1, s...)
				got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return SumAxis(in[0], axis) }, x)
				want := sumRef(vals(x), s, axis)
				assertClose(t, fmt.Sprintf("sum%v axis %d", s, axis), got, want, tol(dt))
				got = run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return MeanAxis(in[0], axis) }, x)
				for i := range want {
					want[i] /= float64(s[axis])
				}
				assertClose(t, fmt.Sprintf("mean%v axis %d", s, axis), got, want, tol(dt))
				for _, mean := range []bool{false, true} {
					check(t, gradcheck.Case{Name: fmt.Sprintf("reduce%v/%d/mean=%v/%v", s, axis, mean, dt), Inputs: []*tensor.Dense{x}, Seed: 2,
						Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
							if mean {
								return MeanAxis(in[0], axis)
							}
							return SumAxis(in[0], axis)
						}})
				}
			}
		}
		x := randT(dt, 2, -1, 1, 2, 3, 2)
		total := 0.0
		for _, v := range vals(x) {
			total += v
		}
		assertClose(t, "SumAll", run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return SumAll(in[0]) }, x), []float64{total}, tol(dt))
		assertClose(t, "MeanAll", run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return MeanAll(in[0]) }, x), []float64{total / 12}, tol(dt))
		for _, mean := range []bool{false, true} {
			check(t, gradcheck.Case{Name: fmt.Sprintf("reduceAll/mean=%v/%v", mean, dt), Inputs: []*tensor.Dense{x}, Seed: 3,
				Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
					if mean {
						return MeanAll(in[0])
					}
					return SumAll(in[0])
				}})
		}
	}
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 3))
	if _, err := SumAxis(x, 2); err == nil || err.Error() != "SumAxis: axis 2 is out of range for shape (2, 3)" {
		t.Errorf("bad axis: %v", err)
	}
}

// Gorgonia v0.9.17's Mean over two axes is wrong for shape (4, 4, 4, 2) over
// axes (2, 3), the reduction of a global average pool; reducing one axis at
// a time with MeanAxis is right. If Gorgonia's half of this test starts to
// fail after an upgrade, the defect is fixed upstream and DESIGN.md can drop it.
func TestGorgoniaMultiAxisMeanDefect(t *testing.T) {
	s := []int{4, 4, 4, 2}
	back := make([]float64, 4*4*4*2)
	for i := range back {
		back[i] = float64(i)
	}
	want := sumRef(sumRef(back, s, 3), s[:3], 2)
	for i := range want {
		want[i] /= 8
	}
	x := tensor.New(tensor.WithShape(s...), tensor.WithBacking(back))
	ours := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
		m, err := MeanAxis(in[0], 3)
		if err != nil {
			return nil, err
		}
		return MeanAxis(m, 2)
	}, x)
	assertClose(t, "MeanAxis(MeanAxis(x, 3), 2)", ours, want, 0)
	theirs := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return G.Mean(in[0], 2, 3) }, x)
	same := len(theirs) == len(want)
	for i := range want {
		same = same && theirs[i] == want[i]
	}
	if same {
		t.Fatalf("Gorgonia's Mean(x, 2, 3) is now right (%v): the defect is fixed upstream", theirs)
	}
	t.Logf("Gorgonia Mean(x, 2, 3)[:4] = %v, right: %v", theirs[:4], want[:4])
}
