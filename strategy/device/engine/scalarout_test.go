package engine_test

import (
	"context"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
)

// A PredictStep that returns a scalar gets its value back from Run as a
// 0-dimensional tensor, on the executor and on the TapeMachine, in both
// precisions, on every run (the second reuses the graph's buffers): the
// engine's caller decides whether a scalar is a prediction, it does not
// get a nil Output to guess from.
func TestRunScalarPredictOutput(t *testing.T) {
	ctx := context.Background()
	xs := []float64{0.5, -1.25, 2, 0.75}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, tape := range []bool{false, true} {
			m := &stockModel{shape: []int{4}, build: func(_ *module.Step, x *G.Node) (*G.Node, error) {
				return G.Sum(G.Must(G.Square(x)))
			}}
			e, st := stockEngine(t, m, dt, tape, xs)
			for run := 0; run < 2; run++ {
				want := 0.0
				for _, v := range xs {
					want += v * v
				}
				r, err := e.Run(ctx, module.Predict, oneRow, false, 1)
				if err != nil {
					t.Fatalf("%v tape %v run %d: %v", dt, tape, run, err)
				}
				if r.Output == nil {
					t.Fatalf("%v tape %v run %d: Output is nil for a scalar PredictStep", dt, tape, run)
				}
				if r.Output.Dims() != 0 || r.Output.Dtype() != dt {
					t.Fatalf("%v tape %v run %d: Output is %v of shape %v, want a 0-d %v", dt, tape, run, r.Output.Dtype(), r.Output.Shape(), dt)
				}
				near(t, "scalar output", denseVals(r.Output), []float64{want}, 1e-5)
				// The next run reads the store again: change it and see the new value.
				xs[0] += 1
				if dt == tensor.Float32 {
					st.Data32()[0] = float32(xs[0])
				} else {
					st.Data64()[0] = xs[0]
				}
			}
		}
		xs[0] = 0.5
	}
}
