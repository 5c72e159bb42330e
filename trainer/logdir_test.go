package trainer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// After Fit a program finds its run's directory without a callback, as
// Lightning's trainer.log_dir: each Fit of a new Trainer under one root
// gets the next version_N, and its metrics.csv and checkpoints are there.
func TestTrainerLogDirIsTheRunDirectory(t *testing.T) {
	root := t.TempDir()
	ds := regression(t, 64, 0.1, 3)
	for i, want := range []string{"version_0", "version_1"} {
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 2, DefaultRootDir: root}))
		if err != nil {
			t.Fatal(err)
		}
		if d := tr.LogDir(); d != "" {
			t.Errorf("before Fit LogDir() = %q, want \"\"", d)
		}
		if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, true, false), nil); err != nil {
			t.Fatal(err)
		}
		dir := tr.LogDir()
		if dir != filepath.Join(root, "lightning_logs", want) {
			t.Errorf("Fit %d: LogDir() = %q, want %s", i, dir, filepath.Join(root, "lightning_logs", want))
		}
		for _, f := range []string{"metrics.csv", filepath.Join("checkpoints", "last.ckpt")} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("Fit %d: %v", i, err)
			}
		}
	}
}
