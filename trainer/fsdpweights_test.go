package trainer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/trainer"
)

// weightReader reads parameter w, or its gradient, in
// OnBeforeOptimizerStep, as a callback logging weight or gradient norms
// would.
type weightReader struct {
	grad bool
	err  error
}

func (*weightReader) Name() string         { return "weightReader" }
func (*weightReader) StopsAtStepEnd() bool { return false }
func (w *weightReader) OnBeforeOptimizerStep(ctx context.Context, s *trainer.State) error {
	if w.grad {
		_, w.err = s.Weights.GradTensor("w")
	} else {
		_, w.err = s.Weights.Tensor("w")
	}
	return nil
}

// TestStateWeightsSayWhatTheStrategyLacks: under fsdp no rank holds the
// whole model, and under sharded_stage2 no rank holds whole gradients, so
// State.Weights cannot give them; reading them says so in the strategy's
// terms and where to look instead, not that the model is not set up (it
// is, sharded) or which constructor made the store.
func TestStateWeightsSayWhatTheStrategyLacks(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	stage2 := func(r int, g collective.Collective) strategy.Strategy {
		s, err := sharded.New(sharded.Config{Group: g, Stage: 2})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		strategy func(r int, g collective.Collective) strategy.Strategy
		grad     bool
		want     []string
	}{
		{"fsdp weights", fsdpRank(t), false, []string{"fsdp", "checkpoint"}},
		{"sharded_stage2 gradients", stage2, true, []string{"sharded_stage2", "GradNorm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			readers := []*weightReader{{grad: tc.grad}, {grad: tc.grad}}
			_, errs := onRanks(t, 2, tc.strategy, func(r int) trainer.Config {
				return quiet(trainer.Config{MaxEpochs: 1, Callbacks: []trainer.Callback{readers[r]}})
			}, func(r int, tr *trainer.Trainer) error {
				defer tr.Teardown(context.Background())
				return tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 8, false, false), nil)
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				errSays(t, readers[r], readers[r].err, tc.want)
				if err := readers[r].err; err != nil && (strings.Contains(err.Error(), "not set up") || strings.Contains(err.Error(), "NewStoreWithoutGrad")) {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}
