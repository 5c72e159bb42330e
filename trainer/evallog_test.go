package trainer_test

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// csvRows reads metrics.csv as one map per row, empty cells left out.
func csvRows(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]string
	for _, r := range recs[1:] {
		row := map[string]string{}
		for i, v := range r {
			if v != "" {
				row[recs[0][i]] = v
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// rowsWith returns the rows that hold metric name.
func rowsWith(rows []map[string]string, name string) []map[string]string {
	var out []map[string]string
	for _, r := range rows {
		if _, ok := r[name]; ok {
			out = append(out, r)
		}
	}
	return out
}

// Validate and Test log what they measured, as Lightning's trainer.validate
// and trainer.test do: after Fit into its run directory, at the trained
// weights' step, once each.
func TestValidateAndTestLogAfterFit(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 3, DefaultRootDir: root}))
	if err != nil {
		t.Fatal(err)
	}
	m := newEvalReg()
	train, val := loader(t, regression(t, 128, 0.01, 4), 32, true, false), loader(t, regression(t, 64, 0.01, 5), 32, false, false)
	if err := tr.Fit(ctx, m, train, val); err != nil {
		t.Fatal(err)
	}
	res, err := tr.Test(ctx, m, val)
	if err != nil {
		t.Fatal(err)
	}
	vres, err := tr.Validate(ctx, m, val)
	if err != nil {
		t.Fatal(err)
	}
	rows := csvRows(t, filepath.Join(root, "lightning_logs", "version_0", "metrics.csv"))
	tests := rowsWith(rows, "test_loss")
	if len(tests) != 1 || tests[0]["step"] != "8" || tests[0]["test_loss"] != strconv.FormatFloat(res["test_loss"], 'g', -1, 64) {
		t.Errorf("test rows %v, want one at step 8 with test_loss %v", tests, res["test_loss"])
	}
	// Fit validated twice; Validate's row is the third.
	vals := rowsWith(rows, "val_loss")
	if len(vals) != 3 || vals[2]["step"] != "8" || vals[2]["val_loss"] != strconv.FormatFloat(vres["val_loss"], 'g', -1, 64) {
		t.Errorf("validation rows %v, want 3, the last at step 8 with val_loss %v", vals, vres["val_loss"])
	}
}

// Without a Fit, Test logs into Config.LogDir (a CSVLogger) or
// Config.Loggers, at the step of the checkpoint it evaluates; with neither
// it writes nothing.
func TestTestLogsIntoLogDirOrLoggers(t *testing.T) {
	ctx := context.Background()
	ckpt := evalCheckpoint(t)
	test := loader(t, regression(t, 40, 0.01, 5), 16, false, false)

	dir := filepath.Join(t.TempDir(), "eval")
	tr2, err := trainer.New(quiet(trainer.Config{LogDir: dir}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr2.Test(ctx, newEvalReg(), test, trainer.WithCheckpoint(ckpt)); err != nil {
		t.Fatal(err)
	}
	if rows := csvRows(t, filepath.Join(dir, "metrics.csv")); len(rows) != 1 || rows[0]["step"] != "3" || rows[0]["test_loss"] == "" {
		t.Errorf("LogDir rows %v, want one at the checkpoint's step 3", rows)
	}

	rec := &rowRecorder{}
	tr3, err := trainer.New(quiet(trainer.Config{Loggers: []trainer.Logger{rec}, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr3.Test(ctx, newEvalReg(), test, trainer.WithCheckpoint(ckpt)); err != nil {
		t.Fatal(err)
	}
	if len(rec.steps) != 1 || rec.steps[0] != 3 || rec.status != "success" {
		t.Errorf("Loggers got steps %v, status %q; want [3], success", rec.steps, rec.status)
	}

	bare := t.TempDir()
	tr4, err := trainer.New(trainer.Config{Out: quiet(trainer.Config{}).Out, EnableProgressBar: trainer.Bool(false), DefaultRootDir: bare})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr4.Test(ctx, newEvalReg(), test); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(bare); len(ents) != 0 {
		t.Errorf("Test with no logger and no LogDir wrote %v", ents)
	}
}

// evalCheckpoint fits an evalReg for one epoch of 3 steps and returns the
// run's last.ckpt, for evaluations in a fresh Trainer.
func evalCheckpoint(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 3, DefaultRootDir: root}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), newEvalReg(), loader(t, regression(t, 96, 0.01, 4), 32, true, false), nil); err != nil {
		t.Fatal(err)
	}
	ckpt, err := trainer.ResolveCheckpoint(root, "last")
	if err != nil {
		t.Fatal(err)
	}
	return ckpt
}

type rowRecorder struct {
	steps  []int
	status string
}

func (r *rowRecorder) Name() string                        { return "rowRecorder" }
func (r *rowRecorder) LogHyperparams(map[string]any) error { return nil }
func (r *rowRecorder) LogMetrics(step int, m map[string]float64) error {
	r.steps = append(r.steps, step)
	return nil
}
func (r *rowRecorder) Finalize(status string) error { r.status = status; return nil }
