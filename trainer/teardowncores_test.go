package trainer_test

import (
	"context"
	"io"
	"testing"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/dp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A dp Fit shares the process's cores between its replicas (blas.Plan for
// two local ranks); Teardown gives them back. The share used to stay, so
// that a program that trained on dp and then on one device ran the second
// Fit on half the cores (with fewer workers, a convolution's weight
// gradient also sums in another order: other weights than the same seeded
// run in a fresh process).
func TestTeardownGivesBackTheCoresDPShared(t *testing.T) {
	ds, err := strategytest.Regression(64, 4, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	train, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	fitOnce := func(cfg trainer.Config) *trainer.Trainer {
		cfg.MaxEpochs, cfg.Out, cfg.DefaultRootDir, cfg.HandleSignals = 1, io.Discard, t.TempDir(), trainer.Bool(false)
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), &strategytest.MLP{In: 4, Hidden: 8, Out: 2}, train, nil); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	// The process's own plan, once the BLAS is chosen (for one local rank,
	// unless a trainer of another test still holds a share).
	if err := fitOnce(trainer.Config{}).Teardown(context.Background()); err != nil {
		t.Fatal(err)
	}
	own := blas.CurrentPlan()

	newDP := func(n int) *dp.DP {
		devs, err := device.Open("cpu", n)
		if err != nil {
			t.Fatal(err)
		}
		s, err := dp.NewDP(dp.DPConfig{Devices: devs})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, c := range []struct {
		name  string
		ranks int // local ranks the plan is for during the Fit
		run   func() []*trainer.Trainer
	}{
		{"dp by name", 2, func() []*trainer.Trainer {
			return []*trainer.Trainer{fitOnce(trainer.Config{Strategy: "dp", Devices: 2})}
		}},
		{"dp value, 3 replicas", 3, func() []*trainer.Trainer {
			return []*trainer.Trainer{fitOnce(trainer.Config{StrategyImpl: newDP(3)})}
		}},
		{"two dp trainers held at once", 3, func() []*trainer.Trainer {
			return []*trainer.Trainer{fitOnce(trainer.Config{StrategyImpl: newDP(2)}), fitOnce(trainer.Config{StrategyImpl: newDP(3)})}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			trs := c.run()
			want := max(own.LocalRanks, c.ranks)
			if got := blas.CurrentPlan().LocalRanks; got != want {
				t.Errorf("after Fit the plan is for %d local ranks, want %d", got, want)
			}
			for i, tr := range trs {
				if err := tr.Teardown(context.Background()); err != nil {
					t.Fatal(err)
				}
				if got := blas.CurrentPlan().LocalRanks; i < len(trs)-1 && got != want {
					t.Errorf("after the first Teardown the plan is for %d local ranks, want %d: the trainer set up still shares them", got, want)
				}
			}
			if got := blas.CurrentPlan(); got != own {
				t.Errorf("after Teardown the plan is %v, want the process's own %v", got, own)
			}
		})
	}
}
