package trainer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// Two ranks whose own loaders (no distributed sampler) yield 12 and 10
// batches an epoch: every rank fails before its first step with an error
// naming each rank's count and the fix, instead of meeting the other's
// gradient reduction with its end of epoch.
func TestUnevenBatchesAcrossRanksNamed(t *testing.T) {
	root := t.TempDir()
	steps := make([]int, 2)
	_, errs := onRanks(t, 2, ddpRank(t), func(int) trainer.Config {
		return quiet(trainer.Config{MaxEpochs: 1, Seed: 1, DefaultRootDir: root, UseDistributedSampler: trainer.Bool(false)})
	}, func(r int, tr *trainer.Trainer) error {
		err := tr.Fit(context.Background(), newResumeJob(t, 1, 0).mod(), loader(t, regression(t, 96-16*r, 0.1, 9), 8, false, false), nil)
		steps[r] = tr.Stats().GlobalStep
		return err
	})
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: Fit succeeded with uneven batches", r)
		}
		for _, want := range []string{"rank 0 has 12, rank 1 has 10", "UseDistributedSampler"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("rank %d: error %q lacks %q", r, err, want)
			}
		}
		if steps[r] != 0 {
			t.Errorf("rank %d trained %d steps before the error, want 0", r, steps[r])
		}
	}
}

// TestNoTrainingBatchOnARankIsAnError: 100 examples on 2 ranks are 50 a
// rank, fewer than a batch of 64 with DropLast: every epoch had no batch,
// and Fit returned nil after training nothing (one process refuses the
// loader itself). Every rank now fails naming BatchSize and DropLast.
func TestNoTrainingBatchOnARankIsAnError(t *testing.T) {
	_, errs := onRanks(t, 2, ddpRank(t), func(int) trainer.Config {
		return quiet(trainer.Config{MaxEpochs: 2, DefaultRootDir: t.TempDir()})
	}, func(r int, tr *trainer.Trainer) error {
		defer tr.Teardown(context.Background())
		return tr.Fit(context.Background(), newResumeJob(t, 1, 0).mod(), loader(t, regression(t, 100, 0.1, 9), 64, true, true), nil)
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "no training batch") || !strings.Contains(err.Error(), "BatchSize 64 and DropLast") {
			t.Errorf("rank %d: err = %v, want no training batch, naming BatchSize 64 and DropLast", r, err)
		}
	}
}
