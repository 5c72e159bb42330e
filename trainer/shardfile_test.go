package trainer_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A sharded checkpoint is an index beside one file per rank; a user who
// picks a rank's file (last.ckpt.rank0-of-2) to evaluate, resume, load or
// verify is told that it is a shard and which index to pass. Before, each
// said the shard's missing trainer state: 'metadata field
// "fulgur.trainer": EOF'.
func TestShardFileNamesItsIndex(t *testing.T) {
	ctx := context.Background()
	ds := regression(t, 64, 0.01, 4)
	dir := t.TempDir()
	fitShardedOnTwoRanks(t, ds, dir)
	index := filepath.Join(dir, "checkpoints", "last.ckpt")
	shard := index + ".rank1-of-2"
	want := "the file is rank 1's shard of the 2-rank sharded checkpoint " + index
	says := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "pass the index, "+index+",") {
			t.Errorf("%s of a shard file: %v\nwant it to say %q and to pass the index", what, err, want)
		}
	}
	_, err := trainer.VerifyCheckpoint(shard)
	says("VerifyCheckpoint", err)
	_, err = trainer.ReadCheckpointInfo(shard)
	says("ReadCheckpointInfo", err)
	tr, err := trainer.New(quiet(trainer.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.Validate(ctx, newEvalReg(), loader(t, ds, 8, false, false), trainer.WithCheckpoint(shard))
	says("Validate", err)
	tr, err = trainer.New(quiet(trainer.Config{MaxEpochs: 2, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	says("Fit", tr.Fit(ctx, newEvalReg(), loader(t, ds, 8, false, false), nil, trainer.FromCheckpoint(shard)))
	// The index itself still verifies.
	if _, err := trainer.VerifyCheckpoint(index); err != nil {
		t.Errorf("the index: %v", err)
	}
}

// fitShardedOnTwoRanks fits newEvalReg on ds with fsdp on two in-process
// ranks, writing sharded checkpoints under dir (LogDir).
func fitShardedOnTwoRanks(t *testing.T, ds data.Dataset, dir string) {
	t.Helper()
	ctx := context.Background()
	_, errs := onRanks(t, 2, fsdpRank(t), func(r int) trainer.Config {
		return quiet(trainer.Config{MaxEpochs: 1, Seed: 1, LogDir: dir, ShardedCheckpoint: true})
	}, func(r int, tr *trainer.Trainer) error {
		defer tr.Teardown(ctx)
		return tr.Fit(ctx, newEvalReg(), loader(t, ds, 8, false, false), nil)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}
