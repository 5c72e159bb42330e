package cli_test

import (
	"path/filepath"
	"testing"

	"github.com/fulgur-ml/fulgur/cli"
)

// A fit resumed with -ckpt-path (as an elastic restart resumes) reports the
// run's epochs and global step, as Lightning's current_epoch and
// global_step are, and train_samples_per_s of its own training only: none
// when nothing was left to train. The models are one with validation (its
// last checkpoint is written after the last epoch's validation) and one
// without (written at the epoch's end, where a resumed fit has nothing of
// that epoch left to run).
func TestResumedFitSummaryCountsTheRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		app  func(root string) cli.App
	}{
		{"mlp", mlpApp},
		{"train step only", func(root string) cli.App {
			return cli.App{Name: "first", Model: &trainStepOnly{}, Data: &cli.FashionMNIST{}, Trainer: cli.Settings{RootDir: root}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			args := []string{"-no-progress-bar", "-no-model-summary", "-limit-train-batches", "3", "-limit-val-batches", "1", "-limit-test-batches", "1"}
			fit := func(more ...string) (epochs, step int, perS float64) {
				t.Helper()
				s, _ := run(t, tc.app(root), append(append([]string{}, args...), more...)...)
				return s.Epochs, s.GlobalStep, s.TrainSamplesPerS
			}
			if e, st, _ := fit("-max-epochs", "2"); e != 2 || st != 6 {
				t.Fatalf("the first fit: epochs %d, global_step %d; want 2 and 6", e, st)
			}
			last := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
			if tc.name == "mlp" {
				// The test command reports the checkpoint's, as it logs them.
				s, _ := run(t, tc.app(root), "test", "-no-progress-bar", "-limit-test-batches", "1", "-ckpt-path", last)
				if s.Epochs != 2 || s.GlobalStep != 6 {
					t.Errorf("test -ckpt-path last: epochs %d, global_step %d; want the checkpoint's 2 and 6", s.Epochs, s.GlobalStep)
				}
			}
			if e, st, perS := fit("-max-epochs", "2", "-ckpt-path", last); e != 2 || st != 6 || perS != 0 {
				t.Errorf("resumed with nothing left to train: epochs %d, global_step %d, train_samples_per_s %g; want 2, 6 and 0", e, st, perS)
			}
			if e, st, perS := fit("-max-epochs", "3", "-ckpt-path", last); e != 3 || st != 9 || !(perS > 0) {
				t.Errorf("resumed for one more epoch: epochs %d, global_step %d, train_samples_per_s %g; want 3, 9 and the epoch's rate", e, st, perS)
			}
		})
	}
}
