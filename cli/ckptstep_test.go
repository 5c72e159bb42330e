package cli_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// -ckpt-monitor step -ckpt-mode max -ckpt-top-k K keeps the newest K
// checkpoints, as Lightning's monitor="step", mode="max"; -ckpt-top-k
// without -ckpt-monitor says so.
func TestCheckpointMonitorStepKeepsTheNewest(t *testing.T) {
	root := t.TempDir()
	args := []string{"-ckpt-monitor", "step", "-ckpt-mode", "max", "-ckpt-top-k", "2", "-max-epochs", "3",
		"-limit-train-batches", "2", "-limit-val-batches", "1", "-limit-test-batches", "1", "-no-model-summary"}
	app := mlpApp(root)
	app.Stdout, app.Stderr = io.Discard, io.Discard
	if err := app.Run(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(root, "lightning_logs", "version_0", "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if want := []string{"epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt", "last.ckpt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("checkpoints %v, want %v", got, want)
	}
	err = mlpApp(t.TempDir()).Run(context.Background(), []string{"-ckpt-top-k", "3", "-max-steps", "1"})
	if err == nil || !strings.Contains(err.Error(), "-ckpt-top-k is 3 but -ckpt-monitor is empty: ranking needs a metric such as val_loss (-ckpt-monitor step -ckpt-mode max keeps the newest 3)") {
		t.Errorf("-ckpt-top-k 3 alone: %v", err)
	}
}
