package nn_test

import (
	"fmt"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

// reduceRef sums (or averages) x of shape s over axes by walking every
// element's multi-index: the output keeps the other axes in order.
func reduceRef(x []float64, s []int, axes []int, mean bool) []float64 {
	if len(axes) == 0 {
		for i := range s {
			axes = append(axes, i)
		}
	}
	norm := make([]int, len(axes))
	for i, a := range axes {
		if a < 0 {
			a += len(s)
		}
		norm[i] = a
	}
	var kept []int
	count := 1
	for i, d := range s {
		if slices.Contains(norm, i) {
			count *= d
		} else {
			kept = append(kept, i)
		}
	}
	size := 1
	for _, k := range kept {
		size *= s[k]
	}
	out := make([]float64, size)
	idx := make([]int, len(s))
	for _, v := range x {
		o := 0
		for _, k := range kept {
			o = o*s[k] + idx[k]
		}
		out[o] += v
		for d := len(s) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < s[d] {
				break
			}
			idx[d] = 0
		}
	}
	if mean {
		for i := range out {
			out[i] /= float64(count)
		}
	}
	return out
}

// nn.Sum and nn.Mean match an index-walking reference over several axes,
// in the shapes where Gorgonia v0.9.17's G.Sum and G.Mean are wrong
// ([2 3 5 4] over [2 3] and [1 2]) and others, and their gradients match
// central differences in both dtypes.
func TestSumMeanOverAxes(t *testing.T) {
	cases := []struct {
		shape []int
		axes  []int
	}{
		{[]int{2, 3, 5, 4}, []int{2, 3}},
		{[]int{2, 3, 5, 4}, []int{1, 2}},
		{[]int{2, 3, 5, 4}, []int{0, 2, 3}},
		{[]int{2, 3, 5, 4}, []int{3, 1}},
		{[]int{2, 3, 5, 4}, []int{-1, -2}},
		{[]int{2, 3, 5, 4}, []int{2}},
		{[]int{4, 4, 4, 2}, []int{2, 3}},
		{[]int{3, 4, 5}, []int{0, 2}},
		{[]int{3, 4}, nil},
		{[]int{5}, []int{0}},
	}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, c := range cases {
			for _, mean := range []bool{false, true} {
				name := fmt.Sprintf("Sum%v over %v/%v", c.shape, c.axes, dt)
				f := nn.Sum
				if mean {
					name = "Mean" + name[3:]
					f = nn.Mean
				}
				x := randT(dt, 5, -1, 1, c.shape...)
				g := G.NewGraph()
				in := G.NewTensor(g, dt, len(c.shape), G.WithShape(c.shape...), G.WithValue(x))
				out := f(in, c.axes...)
				vm := G.NewTapeMachine(g)
				if err := vm.RunAll(); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				want := reduceRef(vals(x), c.shape, slices.Clone(c.axes), mean)
				tol := 1e-12
				if dt == tensor.Float32 {
					tol = 1e-5
				}
				closeTo(t, name, vals(out.Value()), want, tol)
				vm.Close()
				gradcheck.Run(t, gradcheck.Case{Name: name, Inputs: []*tensor.Dense{x}, Seed: 4,
					Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return f(in[0], c.axes...), nil }})
			}
		}
	}
}

func TestSumMeanAxisErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 3, G.WithShape(2, 3, 4), G.WithName("x"))
	for _, c := range []struct {
		f    func() *G.Node
		want string
	}{
		{func() *G.Node { return nn.Mean(x, 3) }, "nn.Mean: axis 3 is out of range for shape (2, 3, 4) (3 axes: use 0 to 2, or -3 to -1)"},
		{func() *G.Node { return nn.Sum(x, -4) }, "nn.Sum: axis -4 is out of range for shape (2, 3, 4) (3 axes: use 0 to 2, or -3 to -1)"},
		{func() *G.Node { return nn.Sum(x, 1, -2) }, "nn.Sum: axis 1 is given twice in [1 -2]"},
	} {
		if got := panicOf(func() { c.f() }); got != c.want {
			t.Errorf("panic %q, want %q", got, c.want)
		}
	}
}
