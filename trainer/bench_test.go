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

type valEndOnly struct{}

func (valEndOnly) Name() string                                          { return "valEnd" }
func (valEndOnly) OnValidationEnd(context.Context, *trainer.State) error { return nil }

// BenchmarkValidateBatch is one validation batch of a tiny model through
// Validate, with a callback that implements no per-batch hook: what the
// loop costs per batch besides the step (per-batch hooks nobody
// implements should add nothing).
func BenchmarkValidateBatch(b *testing.B) {
	ds := regression(b, 16*b.N, 0.1, 1)
	l := loader(b, ds, 16, false, false)
	tr, err := trainer.New(quiet(trainer.Config{Callbacks: []trainer.Callback{valEndOnly{}}}))
	if err != nil {
		b.Fatal(err)
	}
	m := &linreg{in: 4, lr: 0.01}
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := tr.Validate(context.Background(), m, l); err != nil {
		b.Fatal(err)
	}
}
