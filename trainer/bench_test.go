package trainer_test

import (
	"context"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

type nopCallback struct{}

func (nopCallback) Name() string                                          { return "nop" }
func (nopCallback) OnTrainBatchEnd(context.Context, *trainer.State) error { return nil }

// BenchmarkFitStep is one training step of a tiny model through Fit, with
// a callback and the profiler off: the trainer's own cost per step
// (dispatch, stop agreement, checkpoint bookkeeping) shows in allocs/op.
func BenchmarkFitStep(b *testing.B) {
	ds := regression(b, 64*16, 0.1, 1)
	l := loader(b, ds, 64, true, true)
	cfg := quiet(trainer.Config{MaxSteps: b.N, Callbacks: []trainer.Callback{nopCallback{}}, LogEveryNSteps: 1 << 30})
	tr, err := trainer.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, l, nil); err != nil {
		b.Fatal(err)
	}
}
