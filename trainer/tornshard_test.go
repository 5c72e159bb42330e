package trainer_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// A save of a sharded checkpoint over an earlier one (last.ckpt, saved
// every few steps) replaces each rank's shard file, then the index: a rank
// killed in between leaves the earlier index beside some ranks' new shards
// and others' old ones. Resuming from that mix trained on silently (half
// the model from one save, half from the other); it is refused, naming the
// shard file that does not belong to the index. Built here by putting an
// index and rank 1's shard of one run beside rank 0's shard of another.
func TestShardedCheckpointWithAShardOfAnotherSaveIsRefused(t *testing.T) {
	ctx := context.Background()
	dirA, dirB := t.TempDir(), t.TempDir()
	fitShardedOnTwoRanks(t, regression(t, 64, 0.01, 4), dirA)
	fitShardedOnTwoRanks(t, regression(t, 64, 0.01, 5), dirB)
	index := filepath.Join(dirA, "checkpoints", "last.ckpt")
	if _, err := trainer.VerifyCheckpoint(index); err != nil {
		t.Fatalf("the untouched checkpoint: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dirB, "checkpoints", "last.ckpt.rank0-of-2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(index+".rank0-of-2", b, 0o644); err != nil {
		t.Fatal(err)
	}
	says := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "last.ckpt.rank0-of-2") || !strings.Contains(err.Error(), "another save") {
			t.Errorf("%s of an index beside a shard of another save: %v\nwant an error naming last.ckpt.rank0-of-2 as of another save", what, err)
		}
	}
	_, err = trainer.VerifyCheckpoint(index)
	says("VerifyCheckpoint", err)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	says("Fit", tr.Fit(ctx, newEvalReg(), loader(t, regression(t, 64, 0.01, 4), 8, false, false), nil, trainer.FromCheckpoint(index)))
}
