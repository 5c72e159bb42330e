package infer_test

import (
	"context"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
)

// summedMLP is tinyMLP whose PredictStep sums the batch's logits: one
// number for the whole batch.
type summedMLP struct{ tinyMLP }

func (m *summedMLP) PredictStep(s *module.Step) (*G.Node, error) { return G.Sum(m.logits(s)) }

// Predict of a PredictStep that returns a scalar says what Predict returns
// (a row per example) and how to write the step, not that the output "is
// not a tensor".
func TestPredictOfAScalarSaysWhy(t *testing.T) {
	m, err := infer.New(&summedMLP{}, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Batch(3, randomX(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Predict(context.Background(), b)
	if err == nil {
		t.Fatalf("Predict of a scalar PredictStep returned %v of shape %v, want an error", out, out.Shape())
	}
	for _, w := range []string{"PredictStep returned a scalar", "one for each example", "first axis is the batch"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}
