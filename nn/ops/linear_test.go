package ops

import (
	"fmt"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

func linearRef(x, w, b []float64, batch, in, out int, relu bool) []float64 {
	y := make([]float64, batch*out)
	for r := 0; r < batch; r++ {
		for j := 0; j < out; j++ {
			s := 0.0
			if b != nil {
				s = b[j]
			}
			for k := 0; k < in; k++ {
				s += x[r*in+k] * w[k*out+j]
			}
			if relu && s < 0 {
				s = 0
			}
			y[r*out+j] = s
		}
	}
	return y
}

func TestLinearForward(t *testing.T) {
	for _, dt := range dtypes {
		for _, c := range []struct {
			batch, in, out int
			bias, relu     bool
		}{{1, 1, 1, true, false}, {3, 5, 7, true, true}, {4, 9, 2, false, false}, {2, 3, 4, false, true}} {
			t.Run(fmt.Sprintf("%v/%+v", dt, c), func(t *testing.T) {
				x := randT(dt, 1, -1, 1, c.batch, c.in)
				w := randT(dt, 2, -1, 1, c.in, c.out)
				b := randT(dt, 3, -1, 1, c.out)
				var bv []float64
				ins := []*tensor.Dense{x, w}
				if c.bias {
					bv = vals(b)
					ins = append(ins, b)
				}
				got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
					var bn *G.Node
					if c.bias {
						bn = in[2]
					}
					return Linear(in[0], in[1], bn, LinearOpts{ReLU: c.relu})
				}, ins...)
				assertClose(t, "y", got, linearRef(vals(x), vals(w), bv, c.batch, c.in, c.out, c.relu), tol(dt))
			})
		}
	}
}

func TestLinearGrad(t *testing.T) {
	for _, dt := range dtypes {
		for _, c := range []struct {
			batch, in, out int
			bias, relu     bool
		}{{1, 1, 1, true, false}, {3, 5, 7, true, true}, {4, 9, 2, false, false}, {1, 6, 3, true, true}} {
			t.Run(fmt.Sprintf("%v/%+v", dt, c), func(t *testing.T) {
				ins := []*tensor.Dense{randT(dt, 1, -1, 1, c.batch, c.in), randT(dt, 2, -1, 1, c.in, c.out)}
				if c.bias {
					ins = append(ins, randT(dt, 3, -1, 1, c.out))
				}
				check(t, gradcheck.Case{Name: "Linear", Inputs: ins, Seed: 4,
					Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
						var bn *G.Node
						if c.bias {
							bn = in[2]
						}
						return Linear(in[0], in[1], bn, LinearOpts{ReLU: c.relu})
					}})
			})
		}
	}
}

// NoInputGrad must leave the input out of the gradient graph entirely (no
// wasted multiply) while the weight and bias gradients stay right.
func TestLinearNoInputGrad(t *testing.T) {
	for _, dt := range dtypes {
		ins := []*tensor.Dense{randT(dt, 1, -1, 1, 3, 4), randT(dt, 2, -1, 1, 4, 5), randT(dt, 3, -1, 1, 5)}
		check(t, gradcheck.Case{Name: "Linear/NoInputGrad", Inputs: ins, NoGrad: []int{0}, Seed: 5,
			Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
				return Linear(in[0], in[1], in[2], LinearOpts{ReLU: true, NoInputGrad: true})
			}})
		g := G.NewGraph()
		x := node(g, ins[0], "x")
		w := node(g, ins[1], "w")
		y, err := Linear(x, w, nil, LinearOpts{NoInputGrad: true})
		if err != nil {
			t.Fatal(err)
		}
		loss, _ := SumAll(y)
		if _, err := G.Grad(loss, w); err != nil {
			t.Fatal(err)
		}
		for _, n := range g.AllNodes() {
			if _, ok := n.Op().(*linearGradInputOp); ok {
				t.Fatalf("%v: NoInputGrad still built %v", dt, n)
			}
		}
	}
}

func TestLinearShapeErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 3), G.WithName("x"))
	w := G.NewMatrix(g, tensor.Float32, G.WithShape(4, 5), G.WithName("w"))
	b := G.NewVector(g, tensor.Float32, G.WithShape(4), G.WithName("b"))
	w64 := G.NewMatrix(g, tensor.Float64, G.WithShape(3, 5), G.WithName("w64"))
	if _, err := Linear(x, w, nil, LinearOpts{}); err == nil || err.Error() != "Linear input has shape (2, 3), want [batch, 4] to match weight (4, 5)" {
		t.Errorf("input/weight mismatch: %v", err)
	}
	w2 := G.NewMatrix(g, tensor.Float32, G.WithShape(3, 5), G.WithName("w2"))
	if _, err := Linear(x, w2, b, LinearOpts{}); err == nil || err.Error() != "Linear bias has shape (4), want [5] to match weight (3, 5)" {
		t.Errorf("bias mismatch: %v", err)
	}
	if _, err := Linear(x, w64, nil, LinearOpts{}); err == nil {
		t.Error("mixed dtypes accepted")
	}
}
