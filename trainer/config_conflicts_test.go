package trainer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/trainer"
)

// TestConfigConflicts: settings that would silently ignore each other are
// rejected with an error naming both fields and the fix; defaults beside
// them, and a validated Config validated again, are not.
func TestConfigConflicts(t *testing.T) {
	single, err := strategy.New("single", strategy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bar := func() trainer.Callback {
		pb, err := callbacks.NewProgressBar(callbacks.ProgressBarConfig{Out: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		return pb
	}
	sched := func() trainer.Callback {
		g, err := callbacks.NewGradientAccumulationScheduler(map[int]int{0: 2})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	ckpt := func() trainer.Callback {
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return mc
	}
	stepCkpt := func() trainer.Callback {
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: t.TempDir(), EveryNTrainSteps: 6})
		if err != nil {
			t.Fatal(err)
		}
		return mc
	}
	monitoredStepCkpt := func() trainer.Callback {
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: t.TempDir(), EveryNTrainSteps: 6, Monitor: "val_loss"})
		if err != nil {
			t.Fatal(err)
		}
		return mc
	}
	stop := func(monitor, name string) trainer.Callback {
		es, err := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: monitor, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	csv, err := callbacks.NewCSVLogger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  trainer.Config
		want []string // fragments of the error; none: valid
	}{
		{"StrategyImpl and Strategy", trainer.Config{StrategyImpl: single, Strategy: "ddp"},
			[]string{`Strategy is "ddp" and StrategyImpl is set`, "set only one"}},
		{"StrategyImpl and Devices", trainer.Config{StrategyImpl: single, Devices: 4},
			[]string{"Devices is 4 and StrategyImpl is set", "leave Devices unset"}},
		{"StrategyImpl and NumNodes", trainer.Config{StrategyImpl: single, NumNodes: 2},
			[]string{"NumNodes is 2 and StrategyImpl is set", "leave NumNodes unset"}},
		{"StrategyImpl and defaults", trainer.Config{StrategyImpl: single, Strategy: "auto", Devices: 1, NumNodes: 1}, nil},
		{"EnableProgressBar false and a ProgressBar", trainer.Config{EnableProgressBar: trainer.Bool(false), Callbacks: []trainer.Callback{bar()}},
			[]string{"EnableProgressBar is false and Callbacks[0] (ProgressBar) draws a progress bar", "leave EnableProgressBar unset"}},
		{"EnableProgressBar true and a ProgressBar", trainer.Config{EnableProgressBar: trainer.Bool(true), Callbacks: []trainer.Callback{bar()}}, nil},
		{"two ProgressBars", trainer.Config{Callbacks: []trainer.Callback{bar(), bar()}},
			[]string{"Callbacks[0] (ProgressBar) and Callbacks[1] (ProgressBar) both draw a progress bar: keep one"}},
		{"AccumulateGradBatches and a scheduler", trainer.Config{AccumulateGradBatches: 4, Callbacks: []trainer.Callback{sched()}},
			[]string{"AccumulateGradBatches is 4 and Callbacks[0] (GradientAccumulationScheduler)", "epoch 0 -> 4", "leave AccumulateGradBatches unset"}},
		{"AccumulateGradBatches 1 and a scheduler", trainer.Config{AccumulateGradBatches: 1, Callbacks: []trainer.Callback{sched()}}, nil},
		{"DisableCheckpointing and a ModelCheckpoint", trainer.Config{DisableCheckpointing: true, Callbacks: []trainer.Callback{ckpt()}},
			[]string{"DisableCheckpointing is true and Callbacks[0] (ModelCheckpoint) writes checkpoints"}},
		{"DisableLogger and Loggers", trainer.Config{DisableLogger: true, Loggers: []trainer.Logger{csv}},
			[]string{"DisableLogger is true and Loggers has 1 logger(s) (CSVLogger first)"}},
		{"value clipping without a bound", trainer.Config{GradientClipAlgorithm: "value"},
			[]string{`GradientClipAlgorithm is "value" and GradientClipVal is 0`}},
		{"FastDevRun overrides", trainer.Config{FastDevRun: 2, MaxEpochs: 5, LimitTrainBatches: 100}, nil},
		// A layout the named strategy can never run is refused by New, not
		// by Fit once the data and model are loaded.
		{"single on 2 devices", trainer.Config{Strategy: "single", Devices: 2},
			[]string{`strategy "single" runs one device, but Devices is 2 and NumNodes is 1`, `or Devices 1`}},
		{"single on 2 nodes", trainer.Config{Strategy: "single", NumNodes: 2},
			[]string{`strategy "single" runs one device, but Devices is 1 and NumNodes is 2`}},
		{"dp on 2 nodes", trainer.Config{Strategy: "dp", Devices: 2, NumNodes: 2},
			[]string{`strategy "dp" runs in one process on one machine, but NumNodes is 2: use "ddp" across machines`}},
		{"single on 1 device", trainer.Config{Strategy: "single", Devices: 1, NumNodes: 1}, nil},
		{"dp on 2 devices", trainer.Config{Strategy: "dp", Devices: 2}, nil},
		// A ModelCheckpoint saving after a mid-epoch validation inside an
		// accumulation window would fail Fit at that validation.
		{"ValCheckInterval inside accumulation windows", trainer.Config{AccumulateGradBatches: 3, ValCheckInterval: 10, Callbacks: []trainer.Callback{ckpt()}},
			[]string{"ValCheckInterval is 10 and AccumulateGradBatches is 3", "Callbacks[0] (ModelCheckpoint) cannot save", "a multiple of 3, such as 9 or 12"}},
		{"ValCheckInterval a multiple of the accumulation", trainer.Config{AccumulateGradBatches: 3, ValCheckInterval: 9, Callbacks: []trainer.Callback{ckpt()}}, nil},
		{"ValCheckInterval inside windows, checkpoints every N steps", trainer.Config{AccumulateGradBatches: 3, ValCheckInterval: 10, Callbacks: []trainer.Callback{stepCkpt()}}, nil},
		// Monitoring a validation metric, it saves at each validation's end.
		{"ValCheckInterval inside windows, checkpoints every N steps ranked by val_loss", trainer.Config{AccumulateGradBatches: 3, ValCheckInterval: 10, Callbacks: []trainer.Callback{monitoredStepCkpt()}},
			[]string{"ValCheckInterval is 10 and AccumulateGradBatches is 3", "Callbacks[0] (ModelCheckpoint) cannot save"}},
		{"ValCheckInterval inside windows, no checkpoint callback", trainer.Config{AccumulateGradBatches: 3, ValCheckInterval: 10}, nil},
		// Callback state is keyed by name in checkpoints.
		{"two ModelCheckpoints of one name", trainer.Config{Callbacks: []trainer.Callback{ckpt(), stepCkpt()}},
			[]string{`Callbacks[0] and Callbacks[1] are both named "ModelCheckpoint", which keys their state in checkpoints`, "give each its own Name"}},
		{"a stateful callback without a name", trainer.Config{Callbacks: []trainer.Callback{unnamed{}}},
			[]string{`Callbacks[0] (trainer_test.unnamed) keeps state in checkpoints under its Name, which is empty`}},
		{"two EarlyStoppings of one name", trainer.Config{Callbacks: []trainer.Callback{stop("val_loss", ""), stop("val_acc", "")}},
			[]string{`Callbacks[0] and Callbacks[1] are both named "EarlyStopping"`}},
		{"two EarlyStoppings, named", trainer.Config{Callbacks: []trainer.Callback{stop("val_loss", ""), stop("val_acc", "stop_acc")}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Out = io.Discard
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				again := cfg
				if err := again.Validate(); err != nil {
					t.Fatalf("a validated Config fails Validate again: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted %s", tc.name)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if _, err := trainer.New(tc.cfg); err == nil {
				t.Errorf("New accepted %s", tc.name)
			}
		})
	}
}

// TestFastDevRunOverridesAreLogged: FastDevRun replaces the limits it
// overrides, CheckValEveryNEpoch included (validation runs in its one
// epoch), and says which.
func TestFastDevRunOverridesAreLogged(t *testing.T) {
	var out bytes.Buffer
	cfg := trainer.Config{FastDevRun: 2, MaxEpochs: 5, LimitTrainBatches: 100, CheckValEveryNEpoch: 3, Out: &out}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.MaxEpochs != 1 || cfg.LimitTrainBatches != 2 || cfg.CheckValEveryNEpoch != 1 {
		t.Errorf("MaxEpochs %d, LimitTrainBatches %d, CheckValEveryNEpoch %d; want 1, 2, 1", cfg.MaxEpochs, cfg.LimitTrainBatches, cfg.CheckValEveryNEpoch)
	}
	for _, w := range []string{"FastDevRun replaces", "MaxEpochs=5", "LimitTrainBatches=100", "CheckValEveryNEpoch=3"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, out.String())
		}
	}
}

// TestValCheckIntervalInCheckedEpochsOnly: with CheckValEveryNEpoch 2,
// ValCheckInterval's mid-epoch validations run only in every second epoch
// too (as Lightning), instead of ignoring CheckValEveryNEpoch.
func TestValCheckIntervalInCheckedEpochsOnly(t *testing.T) {
	ds := regression(t, 320, 0, 1)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 4, ValCheckInterval: 4, CheckValEveryNEpoch: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, false), loader(t, ds, 64, false, false)); err != nil {
		t.Fatal(err)
	}
	// 10 batches an epoch; epochs 1 and 3 validate after batch 4 and 8 and
	// at the end.
	if s := tr.Stats(); s.ValidationsPassed != 6 {
		t.Errorf("validations = %d, want 6", s.ValidationsPassed)
	}
}

// A ValCheckInterval above the epoch's batches never validates within an
// epoch: it is said once, instead of silently (Lightning refuses it). One
// equal to them asks for the epoch-end validation only, and is not warned
// about (it was).
func TestValCheckIntervalAboveTheEpochWarns(t *testing.T) {
	ds := regression(t, 320, 0, 1) // 10 batches of 32
	for _, c := range []struct{ interval, warnings int }{{100, 1}, {11, 1}, {10, 0}} {
		var buf bytes.Buffer
		cfg := quiet(trainer.Config{MaxEpochs: 2, ValCheckInterval: c.interval})
		cfg.Out = &buf
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, false), loader(t, ds, 64, false, false)); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(buf.String(), "ValCheckInterval is above the epoch's training batches"); n != c.warnings {
			t.Errorf("ValCheckInterval %d: the warning appears %d times, want %d:\n%s", c.interval, n, c.warnings, buf.String())
		}
		if s := tr.Stats(); s.ValidationsPassed != 2 {
			t.Errorf("ValCheckInterval %d: %d validations, want 2 (at the epochs' ends)", c.interval, s.ValidationsPassed)
		}
		if want := fmt.Sprintf("batches=10 epoch=0 val_check_interval=%d", c.interval); c.warnings > 0 && !strings.Contains(buf.String(), want) {
			t.Errorf("the warning does not name the interval and the batches:\n%s", buf.String())
		}
	}
}

// A logger or callback whose constructor failed, with its error ignored, is
// a nil pointer in a non-nil interface: New refuses it, naming the entry,
// instead of Fit crashing on it after training.
func TestNilLoggerOrCallbackIsRefused(t *testing.T) {
	csv, _ := callbacks.NewCSVLogger("") // refused: no directory
	mc, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Mode: "sideways"})
	for _, c := range []struct {
		name string
		cfg  trainer.Config
		want string
	}{
		{"logger", trainer.Config{Loggers: []trainer.Logger{csv}}, "Loggers[0] is a nil *trainer.CSVLogger"},
		{"untyped logger", trainer.Config{Loggers: []trainer.Logger{nil}}, "Loggers[0] is nil"},
		{"callback", trainer.Config{Callbacks: []trainer.Callback{mc}}, "Callbacks[0] is a nil *callbacks.ModelCheckpoint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Out = io.Discard
			_, err := trainer.New(c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
		})
	}
}

// unnamed is a stateful callback whose Name is empty.
type unnamed struct{}

func (unnamed) Name() string                 { return "" }
func (unnamed) StateDict() ([]byte, error)   { return nil, nil }
func (unnamed) LoadStateDict(b []byte) error { return nil }
