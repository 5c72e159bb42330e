package engine

import (
	"context"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// counter logs the classification counts of its input logits.
type counter struct{ twoLayer }

func (counter) ValidationStep(s *module.Step) error {
	nn.ClassMetrics{TopK: 2}.Log(s, "val", s.Input("x"), s.Input("y"))
	return nil
}

// Both execution paths hand back a count metric's vector, refreshed at
// every run, with the metric that derives its values.
func TestCountMetricOnBothPaths(t *testing.T) {
	fields := []data.Field{{Name: "x", Shape: []int{3}}, {Name: "y"}}
	batches := []*data.Batch{
		{Size: 2, Fields: fields, Data: [][]float32{{3, 1, 0, 0, 1, 2}, {0, 1}}},
		{Size: 2, Fields: fields, Data: [][]float32{{0, 0, 1, 1, 2, 0}, {2, 0}}},
	}
	// [top-2 correct, true positives, predictions, labels of each class]
	want := [][]float64{
		{2, 1, 0, 0, 1, 0, 1, 1, 1, 0},
		{2, 0, 0, 1, 0, 1, 1, 1, 0, 1},
	}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, tape := range []bool{false, true} {
			b := module.NewBuilder(dt)
			_ = counter{}.Configure(b)
			specs, _ := b.Specs()
			st, err := module.NewStore(specs, dt, 1)
			if err != nil {
				t.Fatal(err)
			}
			e := New(counter{}, st, fields, 1)
			e.Tape = tape
			for i, bt := range batches {
				r, err := e.Run(context.Background(), module.Validate, bt, false, 1)
				if err != nil {
					t.Fatal(err)
				}
				m := r.Metrics[0]
				if m.Derive == nil || m.Weight != 2 || len(m.Counts) != len(want[i]) {
					t.Fatalf("%v tape=%v run %d: metric %+v", dt, tape, i, m)
				}
				for k := range want[i] {
					if m.Counts[k] != want[i][k] {
						t.Fatalf("%v tape=%v run %d: counts %v, want %v", dt, tape, i, m.Counts, want[i])
					}
				}
			}
		}
	}
}
