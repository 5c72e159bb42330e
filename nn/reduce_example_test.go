package nn_test

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn"
)

// nn.Mean over height and width is PyTorch's x.mean((2, 3)): the global
// average pool of [N, C, H, W], here of one image with two 2x2 channels.
func ExampleMean() {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float64, 4, G.WithShape(1, 2, 2, 2), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(1, 2, 2, 2), tensor.WithBacking([]float64{0, 1, 2, 3, 4, 5, 6, 7}))))
	pooled := nn.Mean(x, 2, 3)
	total := nn.Sum(x)
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(pooled.Shape(), pooled.Value().Data(), total.Value())
	// Output:
	// (1, 2) [1.5 5.5] 28
}
