package trainer_test

import (
	"context"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/trainer"
)

// plateauReg is linreg trained by SGD under a ReduceOnPlateau, with a
// validation score that rises as the loss falls.
type plateauReg struct {
	linreg
	cfg optim.PlateauConfig
}

func (m *plateauReg) ValidationStep(s *module.Step) error {
	loss := m.loss(s)
	s.Log("val_loss", loss)
	s.Log("val_score", G.Must(G.Neg(loss)))
	return nil
}

func (m *plateauReg) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewSGD(optim.SGDConfig{LR: m.lr})
	if err != nil {
		return nil, nil, err
	}
	s, err := optim.NewReduceOnPlateau(m.cfg)
	return o, s, err
}

// lrTrace records the learning rate after every optimizer step.
type lrTrace struct{ lrs []float64 }

func (c *lrTrace) Name() string { return "lrTrace" }
func (c *lrTrace) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	c.lrs = append(c.lrs, s.LR)
	return nil
}

// TestReduceOnPlateauFollowsItsMetric: the scheduler watched a fixed choice
// of metric and got NaN per step, so under a falling loss it still cut the
// rate every Patience+1 steps (0.01 to 1.6e-4 in 20 steps), and with Mode
// "max" it watched val_loss, falling, and cut it every few epochs. It now
// gets PlateauConfig.Monitor (default val_loss, else train_loss, per step
// too), and an unlogged one is an error.
func TestReduceOnPlateauFollowsItsMetric(t *testing.T) {
	ctx := context.Background()
	ds := regression(t, 64, 0.01, 2)
	for _, c := range []struct {
		name    string
		cfg     optim.PlateauConfig
		val     bool
		wantErr string
	}{
		{"per step, train loss", optim.PlateauConfig{Patience: 1, Factor: 0.5, Interval: optim.PerStep}, false, ""},
		{"max, val score", optim.PlateauConfig{Patience: 0, Factor: 0.5, Mode: "max", Monitor: "val_score"}, true, ""},
		{"min, val loss", optim.PlateauConfig{Patience: 0, Factor: 0.5}, true, ""},
		{"not logged", optim.PlateauConfig{Patience: 0, Factor: 0.5, Mode: "max", Monitor: "val_acc"}, true, `monitors "val_acc", which is not logged`},
		{"max on the default loss", optim.PlateauConfig{Patience: 0, Factor: 0.5, Mode: "max"}, true, `Mode "max" and no Monitor`},
	} {
		t.Run(c.name, func(t *testing.T) {
			trace := &lrTrace{}
			tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 20, Callbacks: []trainer.Callback{trace}}))
			if err != nil {
				t.Fatal(err)
			}
			m := &plateauReg{linreg: linreg{in: 4, lr: 0.01}, cfg: c.cfg}
			var val = loader(t, ds, 64, false, false)
			if !c.val {
				val = nil
			}
			// One full batch an epoch: gradient descent, the loss falls at every step.
			err = tr.Fit(ctx, m, loader(t, ds, 64, false, false), val)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(trace.lrs) != 20 {
				t.Fatalf("%d steps, want 20", len(trace.lrs))
			}
			for i, lr := range trace.lrs {
				if lr != 0.01 {
					t.Fatalf("learning rate %g after step %d while the metric improves at every interval, want 0.01 throughout: %v", lr, i+1, trace.lrs)
				}
			}
		})
	}
}

// TestReduceOnPlateauAgreesAcrossRanks: each ddp rank's training loss is
// its own; a per-step ReduceOnPlateau on it took different decisions on
// the ranks, whose learning rates (and replicas) then drifted apart. Every
// rank now takes rank 0's value.
func TestReduceOnPlateauAgreesAcrossRanks(t *testing.T) {
	ctx := context.Background()
	ds := regression(t, 256, 0.5, 3)
	traces := []*lrTrace{{}, {}}
	_, errs := onRanks(t, 2, ddpRank(t), func(r int) trainer.Config {
		return quiet(trainer.Config{MaxEpochs: 3, Seed: 1, Callbacks: []trainer.Callback{traces[r]}})
	}, func(r int, tr *trainer.Trainer) error {
		defer tr.Teardown(ctx)
		m := &plateauReg{linreg: linreg{in: 4, lr: 0.05}, cfg: optim.PlateauConfig{Patience: 0, Factor: 0.9, Interval: optim.PerStep}}
		return tr.Fit(ctx, m, loader(t, ds, 4, true, false), nil)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for i := range traces[0].lrs {
		if traces[0].lrs[i] != traces[1].lrs[i] {
			t.Fatalf("after step %d rank 0's learning rate is %g, rank 1's %g", i+1, traces[0].lrs[i], traces[1].lrs[i])
		}
	}
	if last := traces[0].lrs[len(traces[0].lrs)-1]; last == 0.05 {
		t.Fatalf("the rate never fell over %d noisy steps with patience 0: the test shows nothing", len(traces[0].lrs))
	}
}
