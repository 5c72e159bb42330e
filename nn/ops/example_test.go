package ops_test

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/ops"
)

// A linear classifier's loss and its weight gradient, run on a TapeMachine.
// By hand: logits are [0.5, -1] and [0.5, 0.5]; the losses log(e^0.5+e^-1)-0.5
// and log 2 average to 0.4473; the tie in row 2 goes to class 0, so one row
// of two is right.
func Example() {
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 3), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{1, 0, -1, 0, 2, 1}))))
	w := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 3), G.WithName("w"), // [out, in]
		G.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{0.5, 0.25, 0, -0.5, 0, 0.5}))))
	labels := G.NewVector(g, tensor.Float64, G.WithShape(2), G.WithName("labels"),
		G.WithValue(tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{0, 1}))))

	logits, err := ops.Linear(x, w, nil, ops.LinearOpts{NoInputGrad: true})
	if err != nil {
		panic(err)
	}
	loss, _ := ops.SoftmaxCrossEntropy(logits, labels, nil)
	acc, _ := ops.Accuracy(logits, labels, nil)
	grads, err := G.Grad(loss, w)
	if err != nil {
		panic(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		panic(err)
	}
	fmt.Printf("loss %.4f accuracy %v\n", loss.Value(), acc.Value())
	fmt.Printf("dw %.4f\n", grads[0].Value().Data())
	// Output:
	// loss 0.4473 accuracy 0.5
	// dw [-0.0912 0.5000 0.3412 0.0912 -0.5000 -0.3412]
}
