package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/dp"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// tappedHooks is strategytest.Tapped (which counts its gradient ops) with
// the module's hook before backward; it records how many gradient ops had
// run when each hook ran.
type tappedHooks struct {
	*strategytest.Tapped
	atHook []int64
}

func (m *tappedHooks) OnBeforeBackward(ctx context.Context, loss float64) error {
	m.atHook = append(m.atHook, m.BackwardOps())
	return nil
}

// backwardSpy is a callback recording, for each batch, the gradient ops of
// m run when OnBeforeBackward was called and at the batch end, and the
// losses it saw there and in State.Loss at the batch end.
type backwardSpy struct {
	m               *strategytest.Tapped
	atHook, atEnd   []int64
	losses, endLoss []float64
	failAt, stopAt  int // OnBeforeBackward fails, or stops, at this batch (from 1; 0: never)
}

func (*backwardSpy) Name() string { return "bb" }
func (s *backwardSpy) OnBeforeBackward(ctx context.Context, st *trainer.State, loss float64) error {
	s.atHook = append(s.atHook, s.m.BackwardOps())
	s.losses = append(s.losses, loss)
	switch len(s.atHook) {
	case s.failAt:
		return errors.New("boom")
	case s.stopAt:
		return trainer.Stop("enough before backward %d", s.stopAt)
	}
	return nil
}
func (s *backwardSpy) OnTrainBatchEnd(ctx context.Context, st *trainer.State) error {
	s.atEnd = append(s.atEnd, s.m.BackwardOps())
	s.endLoss = append(s.endLoss, st.Loss)
	return nil
}

func newTapped() *tappedHooks {
	return &tappedHooks{Tapped: &strategytest.Tapped{MLP: strategytest.MLP{In: 5, Hidden: 8, Out: 3}}}
}

// TestBeforeBackwardRunsBeforeTheBackwardPass: under every strategy, on
// every rank, the module's and the callbacks' OnBeforeBackward run once per
// batch after the forward pass and before any gradient op of the batch,
// and see the batch's loss (the one State.Loss holds after it).
func TestBeforeBackwardRunsBeforeTheBackwardPass(t *testing.T) {
	ds, err := strategytest.Regression(48, 5, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		ranks int
		strat func(group []collective.Collective, r int) (strategy.Strategy, error)
	}{
		{"single", 1, nil},
		{"dp", 1, func([]collective.Collective, int) (strategy.Strategy, error) {
			devs, err := device.Open("cpu", 2)
			if err != nil {
				return nil, err
			}
			return dp.NewDP(dp.DPConfig{Devices: devs})
		}},
		{"ddp", 2, func(g []collective.Collective, r int) (strategy.Strategy, error) {
			return ddp.NewDDP(ddp.DDPConfig{Group: g[r]})
		}},
		{"sharded", 2, func(g []collective.Collective, r int) (strategy.Strategy, error) {
			return sharded.New(sharded.Config{Group: g[r], Stage: 2})
		}},
		{"fsdp", 2, func(g []collective.Collective, r int) (strategy.Strategy, error) {
			return fsdp.New(fsdp.Config{Group: g[r]})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			group, err := inproc.NewGroup(c.ranks)
			if err != nil {
				t.Fatal(err)
			}
			teardownAtEnd(t, nil, group)
			mods := make([]*tappedHooks, c.ranks)
			spies := make([]*backwardSpy, c.ranks)
			errs := make([]error, c.ranks)
			var wg sync.WaitGroup
			for r := range c.ranks {
				mods[r] = newTapped()
				spies[r] = &backwardSpy{m: mods[r].Tapped}
				cfg := quiet(trainer.Config{MaxEpochs: 2, Seed: 1, HandleSignals: trainer.Bool(false), Callbacks: []trainer.Callback{spies[r]}})
				if c.strat != nil {
					if cfg.StrategyImpl, err = c.strat(group, r); err != nil {
						t.Fatal(err)
					}
				}
				tr, err := trainer.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = tr.Fit(context.Background(), mods[r], loader(t, ds, 8, false, false), nil)
					if err := tr.Teardown(context.Background()); err != nil && errs[r] == nil {
						errs[r] = err
					}
				}()
			}
			wg.Wait()
			for r := range c.ranks {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				s, m := spies[r], mods[r]
				if n := 12 / c.ranks; len(s.atHook) != n || len(s.atEnd) != n || len(m.atHook) != n {
					t.Fatalf("rank %d: %d callback and %d module calls for %d batches, want one each per batch", r, len(s.atHook), len(m.atHook), len(s.atEnd))
				}
				for i := range s.atHook {
					before := int64(0)
					if i > 0 {
						before = s.atEnd[i-1]
					}
					if s.atHook[i] != before || m.atHook[i] != before {
						t.Errorf("rank %d batch %d: the hooks ran after %d and %d of the batch's gradient ops, want before any", r, i, s.atHook[i]-before, m.atHook[i]-before)
					}
					if s.atEnd[i] == before {
						t.Errorf("rank %d batch %d: no gradient op ran", r, i)
					}
					if s.losses[i] != s.endLoss[i] {
						t.Errorf("rank %d batch %d: the hook saw the loss %v, State.Loss is %v", r, i, s.losses[i], s.endLoss[i])
					}
				}
			}
		})
	}
}

// TestBeforeBackwardErrorAndStop: an error from OnBeforeBackward ends Fit
// before that batch's backward pass, named after the hook; a Stop lets the
// batch finish (backward and optimizer step) and ends training there.
func TestBeforeBackwardErrorAndStop(t *testing.T) {
	ds, err := strategytest.Regression(48, 5, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	run := func(s *backwardSpy, m *tappedHooks) (*trainer.Trainer, error) {
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 1, Callbacks: []trainer.Callback{s}}))
		if err != nil {
			t.Fatal(err)
		}
		return tr, tr.Fit(context.Background(), m, loader(t, ds, 8, false, false), nil)
	}
	m := newTapped()
	s := &backwardSpy{m: m.Tapped, failAt: 3}
	tr, err := run(s, m)
	if err == nil || !strings.Contains(err.Error(), "callbacks/bb.OnBeforeBackward: boom") || !strings.Contains(err.Error(), "epoch 0 batch 2") {
		t.Errorf("Fit: %v", err)
	}
	if st := tr.Stats().GlobalStep; st != 2 {
		t.Errorf("global step %d after the hook failed in the third batch, want 2", st)
	}
	if len(s.atHook) != 3 || len(s.atEnd) != 2 {
		t.Fatalf("%d hook calls and %d batch ends, want 3 and 2", len(s.atHook), len(s.atEnd))
	}
	if got := m.BackwardOps(); s.atHook[2] != s.atEnd[1] || got != s.atEnd[1] {
		t.Errorf("gradient ops of the failed batch: %d before its hook, %d in all", s.atHook[2]-s.atEnd[1], got-s.atEnd[1])
	}

	m = newTapped()
	s = &backwardSpy{m: m.Tapped, stopAt: 3}
	tr, err = run(s, m)
	if err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.GlobalStep != 3 || !strings.Contains(st.StoppedEarly, "enough before backward 3") {
		t.Errorf("global step %d, stopped %q; want 3 and the hook's reason", st.GlobalStep, st.StoppedEarly)
	}
	if len(s.atEnd) != 3 || s.atEnd[2] == s.atHook[2] {
		t.Errorf("the stopped batch did not finish its backward pass: %d batch ends, gradient ops %v at the hooks, %v at the batch ends", len(s.atEnd), s.atHook, s.atEnd)
	}
}

// failingModule's OnBeforeBackward fails: Fit names the module's hook.
type failingModule struct{ *tappedHooks }

func (failingModule) OnBeforeBackward(ctx context.Context, loss float64) error {
	return fmt.Errorf("loss %.3g refused", loss)
}

func TestModuleBeforeBackwardError(t *testing.T) {
	ds, err := strategytest.Regression(16, 5, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 1}))
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), failingModule{newTapped()}, loader(t, ds, 8, false, false), nil)
	if err == nil || !strings.Contains(err.Error(), "module.OnBeforeBackward: loss") || !strings.Contains(err.Error(), "before the backward pass") {
		t.Errorf("Fit: %v", err)
	}
}

// ignoring is a strategy of one's own that drops TrainOptions.BeforeBackward.
type ignoring struct{ strategy.Strategy }

func (s ignoring) Step(ctx context.Context, mode module.Mode, b *data.Batch, o strategy.TrainOptions) (strategy.StepResult, error) {
	o.BeforeBackward = nil
	return s.Strategy.Step(ctx, mode, b, o)
}

// TestBeforeBackwardWithAStrategyThatIgnoresIt: the hooks still run once
// per batch, with its loss, after the strategy's Step.
func TestBeforeBackwardWithAStrategyThatIgnoresIt(t *testing.T) {
	ds, err := strategytest.Regression(32, 5, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := newTapped()
	s := &backwardSpy{m: m.Tapped}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 1, StrategyImpl: ignoring{single.NewSingle()}, Callbacks: []trainer.Callback{s}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), m, loader(t, ds, 8, false, false), nil); err != nil {
		t.Fatal(err)
	}
	if len(s.losses) != 4 || len(m.atHook) != 4 {
		t.Fatalf("%d callback and %d module calls for 4 batches", len(s.losses), len(m.atHook))
	}
	for i := range s.losses {
		if s.losses[i] != s.endLoss[i] || s.atHook[i] != s.atEnd[i] {
			t.Errorf("batch %d: the hook saw the loss %v after %d gradient ops; the batch's loss %v, %d ops", i, s.losses[i], s.atHook[i], s.endLoss[i], s.atEnd[i])
		}
	}
}
