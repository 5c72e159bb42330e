package nn_test

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn"
)

// BCEWithLogitsLoss takes logits, not probabilities: a logit of 800 with
// target 1 costs nothing instead of overflowing (PyTorch gives the same
// values: 0, 0.2014, 0.6931 and 0.5292).
func ExampleBCEWithLogitsLoss() {
	g := G.NewGraph()
	logits := G.NewVector(g, tensor.Float64, G.WithName("logits"), G.WithValue(tensor.New(tensor.WithBacking([]float64{800, -1.5, 0}))))
	targets := G.NewVector(g, tensor.Float64, G.WithName("targets"), G.WithValue(tensor.New(tensor.WithBacking([]float64{1, 0, 1}))))
	each := nn.BCEWithLogitsLoss(logits, targets, nn.WithReduction(nn.ReduceNone))
	mean := nn.BCEWithLogitsLoss(logits, targets, nn.PosWeight(2))
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		panic(err)
	}
	fmt.Printf("%.4f\n%.4f\n", each.Value().Data(), mean.Value().Data())
	// Output:
	// [0.0000 0.2014 0.6931]
	// 0.5292
}

// ClassMetrics derives its values from counts: here a batch's, laid out
// (with ConfusionMatrix) as [top-k correct, then the confusion matrix, rows
// true, columns predicted].
func ExampleClassMetrics_Values() {
	counts := []float64{9,
		5, 1,
		2, 2,
	}
	out := map[string]float64{}
	nn.ClassMetrics{PerClass: true, ConfusionMatrix: true}.Values("val", counts, out)
	fmt.Printf("acc %.3f  f1 %.3f  f1_class0 %.3f  f1_class1 %.3f\n", out["val_acc"], out["val_f1"], out["val_f1_class0"], out["val_f1_class1"])
	// Output:
	// acc 0.700  f1 0.670  f1_class0 0.769  f1_class1 0.571
}
