package plot_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/plot"
)

// A root directory's run is the newest version_N that holds a metrics.csv:
// a later version without one (a predict command's, which logs no metrics;
// a run with -loggers jsonl, or one that failed before logging) must not
// hide the runs before it. "fulgur plot ROOT" failed with "has no
// metrics.csv" as soon as such a directory was the newest.
func TestFindMetricsSkipsNewerVersionsWithoutMetrics(t *testing.T) {
	root := t.TempDir()
	logs := filepath.Join(root, "lightning_logs")
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(logs, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("version_0/metrics.csv", "epoch,step,train_loss\n0,1,2.5\n")
	write("version_1/metrics.csv", "epoch,step,train_loss\n0,1,1.5\n")
	write("version_2/hparams.yaml", "lr: 0.1\n")
	write("version_10/metrics.jsonl", "{\"step\":1}\n")
	got, err := plot.FindMetrics(root)
	if want := filepath.Join(logs, "version_1", "metrics.csv"); err != nil || got != want {
		t.Fatalf("FindMetrics(root) = %q, %v; want %s", got, err, want)
	}
	if _, _, err := plot.ReadRun(root); err != nil {
		t.Errorf("ReadRun(root): %v", err)
	}

	empty := t.TempDir()
	if err := os.MkdirAll(filepath.Join(empty, "lightning_logs", "version_0"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = plot.FindMetrics(empty)
	if err == nil || !strings.Contains(err.Error(), "version_0") {
		t.Errorf("FindMetrics of a root whose runs logged no metrics.csv: %v; want an error naming version_0", err)
	}
}
