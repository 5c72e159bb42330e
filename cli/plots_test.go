package cli_test

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAddPlotsLeavesChartsAndReport(t *testing.T) {
	root := t.TempDir()
	args := []string{"-max-epochs", "2", "-no-progress-bar", "-limit-train-batches", "20", "-limit-val-batches", "2", "-limit-test-batches", "2",
		"-log-every-n-steps", "5", "-profiler", "simple", "-no-model-summary"}
	run(t, mlpApp(root), args...)
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

// -no-plots leaves the run directory without charts or a report.
func TestNoPlots(t *testing.T) {
	root := t.TempDir()
	run(t, mlpApp(root), "-no-plots", "-no-progress-bar", "-max-steps", "3", "-limit-val-batches", "1", "-limit-test-batches", "1", "-no-model-summary")
	dir := filepath.Join(root, "lightning_logs", "version_0")
	for _, name := range []string{"plots", "report.md"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s with -no-plots: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "metrics.csv")); err != nil {
		t.Error(err)
	}
}

// Charts are drawn from metrics.csv: with -loggers lacking csv the run
// says why it leaves none, instead of leaving none without a word.
func TestPlotsWithoutCSVLoggerSaySo(t *testing.T) {
	root := t.TempDir()
	_, stderr := run(t, mlpApp(root), "-loggers", "jsonl", "-no-progress-bar", "-max-steps", "3", "-limit-val-batches", "1", "-limit-test-batches", "1", "-no-model-summary")
	if _, err := os.Stat(filepath.Join(root, "lightning_logs", "version_0", "metrics.jsonl")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, `-loggers "jsonl"`) || !strings.Contains(stderr, "add csv to -loggers") {
		t.Errorf("-loggers jsonl drew no charts and did not say why:\n%s", stderr)
	}
}
