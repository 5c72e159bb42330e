package trainer_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/trainer"
)

// elsewhere trains "in other processes" (strategy.FitRunner with remote
// results), as DDP-spawn's launching process does.
type elsewhere struct {
	*single.Single
	r strategy.FitResult
}

func (e *elsewhere) RunFit(ctx context.Context, fit func(context.Context) (strategy.FitResult, error)) (strategy.FitResult, bool, error) {
	return e.r, true, nil
}

// here trains in this process and keeps what it would hand on, as a
// DDP-spawn worker does.
type here struct {
	*single.Single
	got *strategy.FitResult
}

func (h *here) RunFit(ctx context.Context, fit func(context.Context) (strategy.FitResult, error)) (strategy.FitResult, bool, error) {
	r, err := fit(ctx)
	*h.got = r
	return r, false, err
}

// The trainer hands its training to a strategy.FitRunner: a remote result
// replaces training (figures and callback state adopted), a local one is the
// trainer's own Fit, figures and callback state included.
func TestFitRunnerDecidesWhereTrainingRuns(t *testing.T) {
	ds := regression(t, 64, 0.1, 3)
	cnt, _ := json.Marshal(41)
	remote := strategy.FitResult{Epochs: 3, GlobalStep: 12, WorldSize: 2, Metrics: map[string]float64{"val_loss": 0.5}, Callbacks: map[string][]byte{"counter": cnt}}
	c := &counter{}
	cfg := quiet(trainer.Config{MaxEpochs: 2, StrategyImpl: &elsewhere{Single: single.NewSingle(), r: remote}, Callbacks: []trainer.Callback{c}})
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.GlobalStep != 12 || s.Epochs != 3 || s.WorldSize != 2 || c.batches != 41 || tr.Metrics()["val_loss"] != 0.5 {
		t.Errorf("after a remote Fit: stats %+v, counter %d, metrics %v; want the remote figures (step 12, 3 epochs, world 2, counter 41, val_loss 0.5)", s, c.batches, tr.Metrics())
	}

	var got strategy.FitResult
	c = &counter{}
	cfg = quiet(trainer.Config{MaxEpochs: 2, StrategyImpl: &here{Single: single.NewSingle(), got: &got}, Callbacks: []trainer.Callback{c}})
	if tr, err = trainer.New(cfg); err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	var n int
	json.Unmarshal(got.Callbacks["counter"], &n)
	if got.GlobalStep != 8 || got.Epochs != 2 || n != 8 || got.Metrics["train_loss_epoch"] == 0 {
		t.Errorf("a local Fit handed on step %d, %d epochs, counter %d, metrics %v: want step 8, 2 epochs, counter 8 and the training loss", got.GlobalStep, got.Epochs, n, got.Metrics)
	}
}
