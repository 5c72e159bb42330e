package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/trainer"
)

// fit, then validate, test and predict on its checkpoints, as separate
// programs would: test on "last" gives the accuracy fit measured on the
// trained weights, and predict writes one row of 10 logits per example.
func TestSubcommandsEvaluateCheckpoints(t *testing.T) {
	root := t.TempDir()
	base := []string{"-no-progress-bar", "-no-model-summary", "-seed", "5", "-deterministic"}
	fit, _ := run(t, mlpApp(root), append(base, "-max-steps", "20", "-limit-val-batches", "2", "-limit-test-batches", "2")...)
	if fit.Command != "fit" || fit.TestAcc == nil || *fit.TestAcc <= 0.2 {
		t.Fatalf("fit summary %+v", fit)
	}
	last := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")

	test, _ := run(t, mlpApp(root), append([]string{"test"}, append(base, "-ckpt-path", "last", "-limit-test-batches", "2")...)...)
	if test.Command != "test" || test.Checkpoint != last || num(test.TestAcc) != num(fit.TestAcc) || num(test.TestLoss) != num(fit.TestLoss) || test.WeightsSHA256 != fit.WeightsSHA256 || test.GlobalStep != 20 {
		t.Errorf("test on last: %+v\nfit: %+v", test, fit)
	}

	val, _ := run(t, mlpApp(root), append([]string{"validate"}, append(base, "-ckpt-path", last, "-limit-val-batches", "2")...)...)
	// The validation set is the test split (FashionMNIST): same batches, same figures.
	if val.Command != "validate" || val.Metrics["val_acc"] != num(fit.TestAcc) || val.TestAcc != nil || val.TestLoss != nil {
		t.Errorf("validate: %+v, want val_acc %v", val, fit.TestAcc)
	}

	// No -ckpt-path: the freshly initialised weights, with a warning.
	fresh, stderr := run(t, mlpApp(root), append([]string{"test"}, append(base, "-limit-test-batches", "2")...)...)
	if fresh.WeightsSHA256 == fit.WeightsSHA256 || fresh.Checkpoint != "" || !strings.Contains(stderr, "no -ckpt-path") {
		t.Errorf("test without -ckpt-path: %+v\n%s", fresh, stderr)
	}

	preds := filepath.Join(t.TempDir(), "p.jsonl")
	pred, _ := run(t, mlpApp(root), append([]string{"predict"}, append(base, "-ckpt-path", "last", "-limit-predict-batches", "1", "-predictions", preds)...)...)
	if pred.Command != "predict" || pred.Predictions != 256 {
		t.Errorf("predict: %+v, want 256 rows (one batch of 256)", pred)
	}
	f, err := os.Open(preds)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := 0
	for sc := bufio.NewScanner(f); sc.Scan(); rows++ {
		var logits []float64
		if err := json.Unmarshal(sc.Bytes(), &logits); err != nil || len(logits) != 10 {
			t.Fatalf("row %d: %q: %v", rows, sc.Text(), err)
		}
	}
	if rows != 256 {
		t.Errorf("%s has %d rows, want 256", preds, rows)
	}

	// A checkpoint that is not there is an error naming the flag and the fix.
	err = mlpApp(root).Run(context.Background(), []string{"test", "-ckpt-path", filepath.Join(root, "nope.ckpt")})
	if err == nil || !strings.Contains(err.Error(), "-ckpt-path") || !strings.Contains(err.Error(), `"last" or "best"`) {
		t.Errorf("err = %v", err)
	}
	if runs := list(t, filepath.Join(root, "lightning_logs")); len(runs) != 5 {
		t.Errorf("run directories %v: the refused test left one behind", runs)
	}

	// Each run directory's metrics.csv holds what its command measured, as
	// Lightning's CSVLogger after trainer.test: fit's test after the
	// training rows, validate's and test's at the checkpoint's step.
	for _, c := range []struct {
		version, row string
	}{
		{"version_0", fmt.Sprintf("20,%s,%s,", trainer.FormatValue(num(fit.TestAcc)), trainer.FormatValue(num(fit.TestLoss)))},
		{"version_1", fmt.Sprintf("20,%s,%s", trainer.FormatValue(num(test.TestAcc)), trainer.FormatValue(num(test.TestLoss)))},
		{"version_2", fmt.Sprintf("20,%s,%s", trainer.FormatValue(val.Metrics["val_acc"]), trainer.FormatValue(val.Metrics["val_loss"]))},
	} {
		b, err := os.ReadFile(filepath.Join(root, "lightning_logs", c.version, "metrics.csv"))
		if err != nil {
			t.Errorf("%s: %v", c.version, err)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if last := lines[len(lines)-1]; !strings.Contains(last, c.row) {
			t.Errorf("%s/metrics.csv ends with %q, want the row %q:\n%s", c.version, last, c.row, b)
		}
		if n := strings.Count(string(b), c.row); n != 1 {
			t.Errorf("%s/metrics.csv holds the row %q %d times, want once:\n%s", c.version, c.row, n, b)
		}
	}
}

func TestHelpListsCommandsAndFlags(t *testing.T) {
	var out bytes.Buffer
	app := mlpApp(t.TempDir())
	app.Stdout = &out
	app.Description = "the mlp"
	err := app.Run(context.Background(), []string{"test", "-max-steps", "3", "-h"})
	if err == nil || err.Error() != "flag: help requested" {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	for _, w := range []string{"Usage: mlp [command] [flags]", "the mlp",
		"\n  fit ", "\n  validate ", "\n  test ", "\n  predict ",
		"Trainer flags:", "  -max-epochs int\n", "(default 1)", "  -fast-dev-run [N]", "  -precision 32|64",
		"Model flags:", "  -lr number\n", "learning rate (Adam) (default 0.001)",
		"Data flags:", "  -batch-size int\n", "  -data string",
		"  -config file", "  -print-config"} {
		if !strings.Contains(help, w) {
			t.Errorf("-h lacks %q:\n%s", w, help)
		}
	}
}

// trainOnly is data with a training split alone.
type trainOnly struct{ cli.FashionMNIST }

func (d *trainOnly) Loaders(seed uint64) (cli.Loaders, error) {
	l, err := d.FashionMNIST.Loaders(seed)
	return cli.Loaders{Train: l.Train, Source: l.Source}, err
}

// A command whose split the data lacks is refused before any training;
// fit without a test split trains and skips the test.
func TestCommandNeedsItsSplit(t *testing.T) {
	app := func() cli.App {
		return cli.App{Name: "mlp", Model: &models.MLP{}, Data: &trainOnly{}, Trainer: cli.Settings{MaxEpochs: 1, RootDir: t.TempDir()}}
	}
	// The command first, or after the flags as a launcher script puts it.
	for _, args := range [][]string{{"validate"}, {"-seed", "3", "validate", "-max-steps", "2"}} {
		err := app().Run(context.Background(), args)
		if err == nil || !strings.Contains(err.Error(), "validate: the data (*cli_test.trainOnly) gives no Loaders.Val") {
			t.Errorf("%q: err = %v", args, err)
		}
	}
	a := app()
	var out bytes.Buffer
	a.Stdout, a.Stderr = &out, io.Discard
	if err := a.Run(context.Background(), []string{"-max-steps", "3", "-no-progress-bar", "-no-model-summary"}); err != nil {
		t.Fatal(err)
	}
	// No test ran: no test figures, rather than a -1 a script might
	// average or compare.
	line := lastLine(out.String())
	if !strings.Contains(line, `"test_acc":null,"test_loss":null`) || strings.Contains(line, `"metrics"`) {
		t.Errorf("fit without a test split: %s", line)
	}
	if s := summaryOf(t, out.String()); s.GlobalStep != 3 || s.TestAcc != nil || s.Metrics != nil {
		t.Errorf("fit without a test split: %+v", s)
	}
}

// validate, test and predict on a checkpoint of another model fail naming
// the tensors, and leave no run directory behind; one that succeeds keeps
// its hyperparameters in its run directory.
func TestEvaluateForeignCheckpointLeavesNoRunDirectory(t *testing.T) {
	root := t.TempDir()
	base := []string{"-no-progress-bar", "-no-model-summary", "-sizes", "784,16,10"}
	run(t, mlpApp(root), append(base, "-max-steps", "2", "-limit-val-batches", "1", "-limit-test-batches", "1", "-no-plots")...)
	last := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
	for _, cmd := range []string{"validate", "test", "predict"} {
		var errOut bytes.Buffer
		app := mlpApp(root)
		app.Stdout, app.Stderr = &bytes.Buffer{}, &errOut
		err := app.Run(context.Background(), []string{cmd, "-no-progress-bar", "-no-model-summary", "-sizes", "784,32,10", "-ckpt-path", last, "-limit-val-batches", "1", "-limit-test-batches", "1", "-limit-predict-batches", "1"})
		if err == nil || !strings.Contains(err.Error(), "fc1.weight") {
			t.Errorf("%s on a checkpoint of -sizes 16 with -sizes 32: %v, want an error naming fc1.weight", cmd, err)
		}
		if runs := list(t, filepath.Join(root, "lightning_logs")); len(runs) != 1 {
			t.Errorf("%s failed and left run directories %v, want only version_0", cmd, runs)
		}
	}
	run(t, mlpApp(root), append([]string{"test"}, append(base, "-ckpt-path", last, "-limit-test-batches", "1")...)...)
	if _, err := os.Stat(filepath.Join(root, "lightning_logs", "version_1", "hparams.yaml")); err != nil {
		t.Errorf("a test that ran: %v", err)
	}
}
