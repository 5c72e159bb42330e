package trainer_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// evalLogger logs a figure of its own when a test or a validation ends,
// as a Lightning callback logs in on_test_end, and records the run
// directory its State names.
type evalLogger struct{ logDirs []string }

func (*evalLogger) Name() string { return "evalLogger" }
func (e *evalLogger) OnTestEnd(ctx context.Context, s *trainer.State) error {
	e.logDirs = append(e.logDirs, s.LogDir)
	return s.LogMetrics(map[string]float64{"cb_test": 1})
}
func (e *evalLogger) OnValidationEnd(ctx context.Context, s *trainer.State) error {
	e.logDirs = append(e.logDirs, s.LogDir)
	return s.LogMetrics(map[string]float64{"cb_val": 2})
}

// TestCallbacksLogInAnEvaluationWithoutFit: Test and Validate in a fresh
// process (a checkpoint's weights, Config.LogDir) log their metrics into
// LogDir's metrics.csv; a callback's State.LogMetrics there goes to the
// same logger, at the evaluated weights' step, and State.LogDir is that
// directory, as after a Fit. Without a logger it logs nothing and does not
// fail, as the evaluation's own metrics.
func TestCallbacksLogInAnEvaluationWithoutFit(t *testing.T) {
	ctx := context.Background()
	ckpt := evalCheckpoint(t)
	test := loader(t, regression(t, 40, 0.01, 5), 16, false, false)

	dir := filepath.Join(t.TempDir(), "eval")
	cb := &evalLogger{}
	tr2, err := trainer.New(quiet(trainer.Config{LogDir: dir, Callbacks: []trainer.Callback{cb}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr2.Test(ctx, newEvalReg(), test, trainer.WithCheckpoint(ckpt)); err != nil {
		t.Fatal(err)
	}
	if _, err := tr2.Validate(ctx, newEvalReg(), test, trainer.WithCheckpoint(ckpt)); err != nil {
		t.Fatal(err)
	}
	rows := csvRows(t, filepath.Join(dir, "metrics.csv"))
	for _, name := range []string{"cb_test", "cb_val", "test_loss", "val_loss"} {
		if r := rowsWith(rows, name); len(r) != 1 || r[0]["step"] != "3" {
			t.Errorf("%s: rows %v, want one at the checkpoint's step 3 (all rows: %v)", name, r, rows)
		}
	}
	if len(cb.logDirs) != 2 || cb.logDirs[0] != dir || cb.logDirs[1] != dir {
		t.Errorf("State.LogDir in the evaluation hooks: %q, want %q twice", cb.logDirs, dir)
	}

	tr3, err := trainer.New(quiet(trainer.Config{Callbacks: []trainer.Callback{&evalLogger{}}, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr3.Test(ctx, newEvalReg(), test, trainer.WithCheckpoint(ckpt)); err != nil {
		t.Errorf("Test with no logger, a callback logging: %v", err)
	}
}
