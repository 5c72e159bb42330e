package trainer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/trainer"
)

// startStopper asks to stop, on rank 0 only, from one of the hooks that
// run before a batch: OnFitStart, OnSanityCheckEnd, OnTrainStart or
// OnTrainEpochStart of epoch 1.
type startStopper struct{ at string }

func (startStopper) Name() string { return "startStopper" }

func (s startStopper) ask(hook string, st *trainer.State) error {
	if st.IsGlobalZero && hook == s.at {
		return trainer.Stop("asked in %s", hook)
	}
	return nil
}

func (s startStopper) OnFitStart(_ context.Context, st *trainer.State) error {
	return s.ask("OnFitStart", st)
}
func (s startStopper) OnSanityCheckEnd(_ context.Context, st *trainer.State) error {
	return s.ask("OnSanityCheckEnd", st)
}
func (s startStopper) OnTrainStart(_ context.Context, st *trainer.State) error {
	return s.ask("OnTrainStart", st)
}
func (s startStopper) OnTrainEpochStart(_ context.Context, st *trainer.State) error {
	if st.Epoch != 1 {
		return nil
	}
	return s.ask("OnTrainEpochStart", st)
}

// TestStopFromStartHooksStopsEveryRank: a Stop asked on one rank in a hook
// that runs before any batch (the fit's, the sanity check's, the training
// loop's or an epoch's start) stops every rank there, without an error,
// at the same step; before, the asking rank left alone and the others
// waited for it in the next collective.
func TestStopFromStartHooksStopsEveryRank(t *testing.T) {
	train := regression(t, 32, 0.1, 1) // 8 steps an epoch per rank
	for _, tc := range []struct {
		at   string
		step int
	}{{"OnFitStart", 0}, {"OnSanityCheckEnd", 0}, {"OnTrainStart", 0}, {"OnTrainEpochStart", 8}} {
		t.Run(tc.at, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			trs, errs := onRanks(t, 2, ddpRank(t), func(int) trainer.Config {
				return quiet(trainer.Config{MaxEpochs: 3, Seed: 1, NumSanityValSteps: 1, Callbacks: []trainer.Callback{startStopper{at: tc.at}}})
			}, func(_ int, tr *trainer.Trainer) error {
				return tr.Fit(ctx, &linreg{in: 4, lr: 0.05}, loader(t, train, 2, false, false), loader(t, train, 2, false, false))
			})
			for r, tr := range trs {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				want := "asked in " + tc.at
				if r > 0 {
					want = "another rank stopped training"
				}
				if s := tr.Stats(); s.GlobalStep != tc.step || !strings.Contains(s.StoppedEarly, want) {
					t.Errorf("rank %d: stopped at global step %d (%q); want %d, and %q", r, s.GlobalStep, s.StoppedEarly, tc.step, want)
				}
			}
		})
	}
}
