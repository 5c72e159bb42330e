package gradcheck_test

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

func Example() {
	x := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{0.1, -0.2, 0.3, 0.4, -0.5, 0.6}))
	r, err := gradcheck.Check(gradcheck.Case{
		Name:   "sigmoid",
		Inputs: []*tensor.Dense{x},
		Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
			return G.Sigmoid(in[0])
		},
	})
	fmt.Println(r.Checked, r.Skipped, err)
	// Output: 6 0 <nil>
}
