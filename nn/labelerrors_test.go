package nn_test

import (
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn"
)

// Labels that are not class indices fit for the logits are errors that
// say what to change: a label past the last class names the output width
// it needs, a negative one (PyTorch's ignore_index) the row weight that
// leaves a row out, a fractional one that labels are class numbers;
// labels of an integer dtype, of shape [batch, 1] or one-hot are refused
// when the graph is built, with the conversion, reshape or argmax to do.
func TestLabelErrorsSayWhatToChange(t *testing.T) {
	logits := func(g *G.ExprGraph) *G.Node {
		z := tensor.New(tensor.WithShape(3, 4), tensor.WithBacking([]float64{1, 2, 3, 4, 4, 3, 2, 1, 0, 0, 1, 0}))
		return G.NewMatrix(g, tensor.Float64, G.WithShape(3, 4), G.WithName("logits"), G.WithValue(z))
	}
	for _, c := range []struct {
		label float64
		want  string
	}{
		{4, "label 4 at row 1 is not a class index in [0, 4): the logits have 4 classes: give the model's last layer 5 outputs or more, or fix the labels"},
		{-100, "label -100 at row 1 is not a class index in [0, 4): to leave a row out (PyTorch's ignore_index), give it weight 0 with nn.CrossEntropyWeighted"},
		{0.5, "label 0.5 at row 1 is not a class index in [0, 4): labels are class numbers 0, 1, ... stored as floats, not probabilities or scores"},
	} {
		for _, metric := range []bool{false, true} {
			g := G.NewGraph()
			y := G.NewVector(g, tensor.Float64, G.WithShape(3), G.WithName("labels"),
				G.WithValue(tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{0, c.label, 2}))))
			if metric {
				nn.Accuracy(logits(g), y)
			} else {
				nn.CrossEntropy(logits(g), y)
			}
			vm := G.NewTapeMachine(g)
			err := vm.RunAll()
			vm.Close()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("label %v (accuracy %v): error %v, want it to contain %q", c.label, metric, err, c.want)
			}
		}
	}
	for _, c := range []struct {
		name  string
		dt    tensor.Dtype
		shape []int
		want  string
	}{
		{"int64 labels", tensor.Int64, []int{3}, "labels have dtype int64: labels are class indices stored as the logits' dtype, float64 (the batch's fields already are): convert them"},
		{"a column of labels", tensor.Float64, []int{3, 1}, "labels have shape (3, 1), want [3] (one class index per row of logits (3, 4)): declare the label field of the dataset with Shape [] (one scalar per example, as data.Field{Name: \"y\"}), whose batch is [3], or reshape the labels to [3] (G.Reshape)"},
		{"one-hot labels", tensor.Float64, []int{3, 4}, "labels are class indices, not one-hot rows or probabilities: give each row's class number (its argmax)"},
	} {
		g := G.NewGraph()
		y := G.NewTensor(g, c.dt, len(c.shape), G.WithShape(c.shape...), G.WithName("labels"))
		if got := panicOf(func() { nn.CrossEntropy(logits(g), y) }); !strings.Contains(got, c.want) {
			t.Errorf("%s: panic %q, want it to contain %q", c.name, got, c.want)
		}
	}
}
