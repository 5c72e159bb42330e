package trainer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// weightReader reads a parameter in OnTrainEpochEnd, as a callback logging
// weight norms would.
type weightReader struct{ err error }

func (*weightReader) Name() string { return "weightReader" }
func (w *weightReader) OnTrainEpochEnd(ctx context.Context, s *trainer.State) error {
	_, w.err = s.Weights.Tensor("w")
	return nil
}

// TestStateWeightsUnderFSDPSaysWhy: under fsdp no rank holds the whole
// model, so State.Weights is empty; reading it says so and where the
// weights are, not that the model is not set up (it is, sharded).
func TestStateWeightsUnderFSDPSaysWhy(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	readers := []*weightReader{{}, {}}
	_, errs := onRanks(t, 2, fsdpRank(t), func(r int) trainer.Config {
		return quiet(trainer.Config{MaxEpochs: 1, Callbacks: []trainer.Callback{readers[r]}})
	}, func(r int, tr *trainer.Trainer) error {
		defer tr.Teardown(context.Background())
		return tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 8, false, false), nil)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		err := readers[r].err
		if err == nil {
			t.Fatalf("rank %d: State.Weights.Tensor under fsdp: no error", r)
		}
		for _, want := range []string{"fsdp", "checkpoint"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("rank %d: error %q does not say %q", r, err, want)
			}
		}
	}
}
