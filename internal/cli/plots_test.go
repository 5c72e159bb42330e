package cli

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/internal/models"
	"github.com/fulgur-ml/fulgur/module"
)

func TestAddPlotsLeavesChartsAndReport(t *testing.T) {
	root := t.TempDir()
	var out, errb bytes.Buffer
	j := ImageJob{
		Program:   "mlp",
		NewModule: func(f *Flags) module.Module { return &models.MLP{LR: f.LR} },
		Defaults:  Flags{MaxEpochs: 2, BatchSize: 64, LR: 1e-3, RootDir: root},
		Stdout:    &out, Stderr: &errb,
		Extra: AddPlots,
	}
	args := []string{"-no-progress-bar", "-limit-train-batches", "20", "-limit-val-batches", "2", "-limit-test-batches", "2",
		"-log-every-n-steps", "5", "-profiler", "simple", "-no-model-summary"}
	if err := j.Run(context.Background(), args); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	dir := filepath.Join(root, "lightning_logs", "version_0")
	f, err := os.Open(filepath.Join(dir, "plots", "loss.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if c, err := png.DecodeConfig(f); err != nil || c.Width != 768 {
		t.Fatalf("loss.png: %+v %v", c, err)
	}
	for _, name := range []string{"loss_epoch.svg", "accuracy.png", "lr.png", "cpu.png", "memory.png"} {
		if _, err := os.Stat(filepath.Join(dir, "plots", name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"world size 1", "| test_acc |", "| cpu_pct |", "| rss_mb |", "| max_epochs | 2 |",
		"| batch_size | 64 |", "checkpoints/last.ckpt", "## Profiler", "forward+backward", "![loss](plots/loss.png)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
