package cli_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// -ckpt-every-n-steps with -ckpt-monitor val_loss: the ranked checkpoints
// are those of the weights each validation measured (15 steps an epoch:
// validations at 15, 30 and 45, step checkpoints at 10, 20, 30 and 40),
// and "best" resolves to one of them.
func TestStepCheckpointsRankedByValidation(t *testing.T) {
	root := t.TempDir()
	runIn(t, root, "-max-epochs", "3", "-limit-train-batches", "15", "-ckpt-every-n-steps", "10", "-ckpt-monitor", "val_loss", "-ckpt-top-k", "3", "-no-plots")
	dir := filepath.Join(root, "lightning_logs", "version_0", "checkpoints")
	want := []string{"epoch=0-step=15.ckpt", "epoch=1-step=30.ckpt", "epoch=2-step=45.ckpt", "last.ckpt"}
	if got := list(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("checkpoints %v, want %v", got, want)
	}
	best, err := trainer.ResolveCheckpoint(root, "best")
	if err != nil {
		t.Fatal(err)
	}
	info, err := trainer.ReadCheckpointInfo(best)
	if err != nil || info.GlobalStep%15 != 0 {
		t.Errorf("best is %s at step %d (%v): not a validated step", best, info.GlobalStep, err)
	}
}
