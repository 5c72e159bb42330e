package trainer_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// TestResumeWithAnotherSchedulerSaysWhatToDo: a checkpoint of a run with
// a warm-up resumed by a module that configures a StepLR is refused with
// both schedulers named and what to do, on one device and under fsdp
// (which restores the scheduler itself).
func TestResumeWithAnotherSchedulerSaysWhatToDo(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	root := t.TempDir()
	fitWarmedUp(t, ds, root)
	last := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
	check := func(where string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: resuming a LinearWarmup checkpoint with a StepLR: no error", where)
		}
		for _, want := range []string{"LinearWarmup", "StepLR", "configure the same scheduler"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", where, err, want)
			}
		}
	}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	check("one device", tr.Fit(context.Background(), &everyEpochHalved{linreg{in: 4, lr: 0.2, sgd: true}}, loader(t, ds, 16, false, false), nil, trainer.FromCheckpoint(last)))
	dir := t.TempDir()
	_, errs := onRanks(t, 2, fsdpRank(t), func(r int) trainer.Config {
		return quiet(trainer.Config{MaxEpochs: 2, LogDir: dir})
	}, func(r int, tr *trainer.Trainer) error {
		defer tr.Teardown(context.Background())
		return tr.Fit(context.Background(), &everyEpochHalved{linreg{in: 4, lr: 0.2, sgd: true}}, loader(t, ds, 8, false, false), nil, trainer.FromCheckpoint(last))
	})
	check("fsdp rank 0", errs[0])
}
