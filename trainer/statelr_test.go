package trainer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/trainer"
)

// warmedUp is linreg with a linear warm-up: its first step's rate (lr/4)
// is neither the optimizer's configured rate nor 0.
type warmedUp struct{ linreg }

func (m *warmedUp) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewSGD(optim.SGDConfig{LR: m.lr})
	if err != nil {
		return nil, nil, err
	}
	s, err := optim.NewLinearWarmup(m.lr, 4, nil)
	return o, s, err
}

// lrSeen records State.LR in the hooks that run before the first
// training batch, and in the first batch's start.
type lrSeen struct{ seen []string }

func (*lrSeen) Name() string { return "lrSeen" }
func (l *lrSeen) add(h string, s *trainer.State) error {
	l.seen = append(l.seen, fmt.Sprintf("%s %.6g", h, s.LR))
	return nil
}
func (l *lrSeen) OnFitStart(ctx context.Context, s *trainer.State) error {
	return l.add("OnFitStart", s)
}
func (l *lrSeen) OnSanityCheckStart(ctx context.Context, s *trainer.State) error {
	return l.add("OnSanityCheckStart", s)
}
func (l *lrSeen) OnTrainStart(ctx context.Context, s *trainer.State) error {
	return l.add("OnTrainStart", s)
}
func (l *lrSeen) OnTrainEpochStart(ctx context.Context, s *trainer.State) error {
	return l.add("OnTrainEpochStart", s)
}
func (l *lrSeen) OnTrainBatchStart(ctx context.Context, s *trainer.State) error {
	if s.GlobalStep > 0 || s.BatchIdx > 0 {
		return nil
	}
	return l.add("OnTrainBatchStart", s)
}

// TestStateLRBeforeTheFirstStep: every hook of a Fit sees in State.LR the
// rate the next optimizer step uses, the scheduler's first one included,
// as Lightning's optimizers hold it from on_fit_start on: not 0 before the
// first epoch.
func TestStateLRBeforeTheFirstStep(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	cb := &lrSeen{}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Callbacks: []trainer.Callback{cb}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &warmedUp{linreg{in: 4, lr: 0.2}}, loader(t, ds, 8, false, false), loader(t, ds, 8, false, false)); err != nil {
		t.Fatal(err)
	}
	want := []string{"OnFitStart 0.05", "OnSanityCheckStart 0.05", "OnTrainStart 0.05", "OnTrainEpochStart 0.05", "OnTrainBatchStart 0.05"}
	if fmt.Sprint(cb.seen) != fmt.Sprint(want) {
		t.Errorf("State.LR before the first step (warm-up from 0.2/4):\n got %q\nwant %q", cb.seen, want)
	}
}

// TestStateLRAfterResume: a resumed Fit's hooks see the checkpoint's rate
// from OnFitStart on.
func TestStateLRAfterResume(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	root := t.TempDir()
	fitWarmedUp(t, ds, root)
	cb := &lrSeen{}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, DefaultRootDir: root, Callbacks: []trainer.Callback{cb}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &warmedUp{linreg{in: 4, lr: 0.2}}, loader(t, ds, 16, false, false), nil, trainer.FromCheckpoint("last")); err != nil {
		t.Fatal(err)
	}
	// Two steps of the warm-up done: the third uses 0.2·3/4.
	want := []string{"OnFitStart 0.15", "OnTrainStart 0.15", "OnTrainEpochStart 0.15"}
	if fmt.Sprint(cb.seen) != fmt.Sprint(want) {
		t.Errorf("State.LR of a resumed Fit:\n got %q\nwant %q", cb.seen, want)
	}
}

// fitWarmedUp trains a warmedUp for one epoch of ds (2 steps) into root.
func fitWarmedUp(t *testing.T, ds data.Dataset, root string) {
	t.Helper()
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: root}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &warmedUp{linreg{in: 4, lr: 0.2}}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
}
