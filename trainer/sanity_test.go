package trainer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/trainer"
)

// modeLog is a strategy that records the mode of every step the trainer
// asks of it, in order, and by mode the first value of each step's "x".
type modeLog struct {
	strategy.Strategy
	mu    sync.Mutex
	modes []module.Mode
	first map[module.Mode][]float32
}

func (s *modeLog) Step(ctx context.Context, mode module.Mode, b *data.Batch, o strategy.TrainOptions) (strategy.StepResult, error) {
	s.mu.Lock()
	s.modes = append(s.modes, mode)
	if x, ok := b.Field("x"); ok {
		if s.first == nil {
			s.first = map[module.Mode][]float32{}
		}
		s.first[mode] = append(s.first[mode], x[0])
	}
	s.mu.Unlock()
	return s.Strategy.Step(ctx, mode, b, o)
}

// beforeTraining is the number of validation steps before the first
// training step.
func (s *modeLog) beforeTraining(t *testing.T) int {
	t.Helper()
	for i, m := range s.modes {
		if m == module.Train {
			return i
		}
		if m != module.Validate {
			t.Fatalf("step %d before training ran in mode %v", i, m)
		}
	}
	t.Fatalf("no training step among %v", s.modes)
	return 0
}

// TestSanityCheckRunsValidationBeforeTraining: as Lightning's
// num_sanity_val_steps, Fit runs two validation batches before it trains,
// or the number asked for, capped by LimitValBatches; never without a
// validation loader, with DisableSanityCheck or under FastDevRun.
func TestSanityCheckRunsValidationBeforeTraining(t *testing.T) {
	// 5 validation batches of 8.
	val := func() *data.Loader { return loader(t, regression(t, 40, 0.1, 4), 8, false, false) }
	for _, c := range []struct {
		name string
		cfg  trainer.Config
		val  bool
		want int
	}{
		{"default", trainer.Config{}, true, 2},
		{"three", trainer.Config{NumSanityValSteps: 3}, true, 3},
		{"more than there are", trainer.Config{NumSanityValSteps: 9}, true, 5},
		{"all", trainer.Config{NumSanityValSteps: -1}, true, 5},
		{"all within LimitValBatches", trainer.Config{NumSanityValSteps: -1, LimitValBatches: 3}, true, 3},
		{"LimitValBatches below it", trainer.Config{NumSanityValSteps: 4, LimitValBatches: 1}, true, 1},
		{"disabled", trainer.Config{DisableSanityCheck: true}, true, 0},
		{"FastDevRun", trainer.Config{FastDevRun: 2}, true, 0},
		{"no validation loader", trainer.Config{}, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &modeLog{Strategy: single.NewSingle()}
			cfg := c.cfg
			cfg.MaxEpochs, cfg.Seed, cfg.StrategyImpl = 1, 3, s
			tr, err := trainer.New(quiet(cfg))
			if err != nil {
				t.Fatal(err)
			}
			var v *data.Loader
			if c.val {
				v = val()
			}
			if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, regression(t, 64, 0.1, 5), 16, true, false), v); err != nil {
				t.Fatal(err)
			}
			if got := s.beforeTraining(t); got != c.want {
				t.Errorf("%d validation steps before the first training step, want %d (steps %v)", got, c.want, s.modes)
			}
		})
	}
}

// TestSanityCheckChangesNothing: the check's batches leave the weights,
// the logged metrics and the training order as they would be without it,
// on one device and under ddp at 2 ranks; its metrics reach no logger.
func TestSanityCheckChangesNothing(t *testing.T) {
	run := func(t *testing.T, disable bool) (weights []string, csv []string) {
		root := t.TempDir()
		n := 1
		newStrat := func(int, collective.Collective) strategy.Strategy { return single.NewSingle() }
		if strings.Contains(t.Name(), "ddp") {
			n, newStrat = 2, ddpRank(t)
		}
		trs, errs := onRanks(t, n, newStrat, func(int) trainer.Config {
			return quiet(trainer.Config{MaxEpochs: 2, Seed: 21, Deterministic: true, LogEveryNSteps: 1,
				DisableSanityCheck: disable, DefaultRootDir: root, NumSanityValSteps: 2})
		}, func(_ int, tr *trainer.Trainer) error {
			job := newResumeJob(t, 1, 0)
			return tr.Fit(context.Background(), job.mod(), job.train, job.val)
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		for _, tr := range trs {
			weights = append(weights, tr.Store().SHA256())
		}
		b, err := os.ReadFile(filepath.Join(root, "lightning_logs", "version_0", "metrics.csv"))
		if err != nil {
			t.Fatal(err)
		}
		return weights, strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	for _, name := range []string{"single", "ddp"} {
		t.Run(name, func(t *testing.T) {
			wantW, wantCSV := run(t, true)
			gotW, gotCSV := run(t, false)
			if strings.Join(gotW, " ") != strings.Join(wantW, " ") {
				t.Errorf("weights with the sanity check %v, without %v", gotW, wantW)
			}
			if len(gotCSV) != len(wantCSV) {
				t.Fatalf("metrics.csv has %d lines with the sanity check, %d without", len(gotCSV), len(wantCSV))
			}
			for i := range gotCSV {
				if gotCSV[i] != wantCSV[i] {
					t.Errorf("metrics.csv line %d: %q with the sanity check, %q without", i, gotCSV[i], wantCSV[i])
				}
			}
		})
	}
}

// brokenVal is linreg whose validation step fails.
type brokenVal struct{ linreg }

func (m *brokenVal) ValidationStep(s *module.Step) error {
	return errors.New("val_acc needs labels this module never reads")
}

// TestSanityCheckFailsBeforeTraining: a validation step that fails stops
// Fit before the first training step, naming the check and how to skip
// it; without the check the same error came after an epoch's training.
func TestSanityCheckFailsBeforeTraining(t *testing.T) {
	for _, disable := range []bool{false, true} {
		s := &modeLog{Strategy: single.NewSingle()}
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, StrategyImpl: s, DisableSanityCheck: disable}))
		if err != nil {
			t.Fatal(err)
		}
		err = tr.Fit(context.Background(), &brokenVal{linreg{in: 4, lr: 0.01}}, loader(t, regression(t, 64, 0.1, 5), 16, true, false), loader(t, regression(t, 16, 0.1, 4), 8, false, false))
		if err == nil || !strings.Contains(err.Error(), "labels this module never reads") {
			t.Fatalf("DisableSanityCheck %v: Fit = %v, want the validation step's error", disable, err)
		}
		trained := tr.Stats().GlobalStep
		if !disable && (trained != 0 || !strings.Contains(err.Error(), "sanity check") || !strings.Contains(err.Error(), "DisableSanityCheck")) {
			t.Errorf("with the check: %d steps trained before the error %q; want none, and an error naming the sanity check and DisableSanityCheck", trained, err)
		}
		if disable && trained != 4 {
			t.Errorf("without the check: %d steps trained before the error, want the epoch's 4", trained)
		}
	}
}

func TestNumSanityValStepsBelowMinusOneIsRefused(t *testing.T) {
	_, err := trainer.New(quiet(trainer.Config{NumSanityValSteps: -2}))
	if err == nil || !strings.Contains(err.Error(), "NumSanityValSteps is -2") || !strings.Contains(err.Error(), "DisableSanityCheck") {
		t.Fatalf("New = %v, want an error naming NumSanityValSteps -2 and DisableSanityCheck", err)
	}
}
