package nn_test

import (
	"fmt"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn"
)

// nn.CrossEntropy's errors, when the graph is built and when it runs, name
// the function the user called, not nn/ops' SoftmaxCrossEntropy.
func TestCrossEntropyErrorsNameCrossEntropy(t *testing.T) {
	build := func(labels []float64, opts ...nn.CrossEntropyOption) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%v", r)
			}
		}()
		g := G.NewGraph()
		z := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 3), G.WithName("logits"),
			G.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{1, 2, 3, 3, 2, 1}))))
		y := G.NewVector(g, tensor.Float64, G.WithShape(len(labels)), G.WithName("labels"),
			G.WithValue(tensor.New(tensor.WithShape(len(labels)), tensor.WithBacking(labels))))
		nn.CrossEntropy(z, y, opts...)
		vm := G.NewTapeMachine(g)
		defer vm.Close()
		return vm.RunAll()
	}
	for _, c := range []struct {
		what   string
		labels []float64
		opts   []nn.CrossEntropyOption
		want   string
	}{
		{"label smoothing 2", []float64{0, 1}, []nn.CrossEntropyOption{nn.LabelSmoothing(2)}, "nn.CrossEntropy: label smoothing is 2"},
		{"two class weights of three", []float64{0, 1}, []nn.CrossEntropyOption{nn.ClassWeights(1, 2)}, "nn.CrossEntropy: 2 class weights"},
		{"three labels for two rows", []float64{0, 1, 2}, nil, "nn.CrossEntropy labels have shape (3)"},
		{"label 3 of three classes", []float64{0, 3}, nil, "label 3 at row 1 is not a class index"},
	} {
		err := build(c.labels, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "CrossEntropy") || strings.Contains(err.Error(), "Softmax") {
			t.Errorf("%s: %v, want it to contain %q and not name SoftmaxCrossEntropy", c.what, err, c.want)
		}
	}
}
