package trainer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A sharded checkpoint's index beside a shard file of another save (one
// copied there, or, before saves alternated between two sets of names, a
// rank's new shard left by a save that a rank died in) is refused, naming
// the shard. Before, resuming assembled the model from both saves without a
// word. Built here by putting an index and rank 1's shard of one run beside
// rank 0's shard of another.
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

// rankDiesAt returns an error from its rank's OnTrainBatchEnd at a step: put
// before a ModelCheckpoint, that rank dies before its save while the others
// write theirs.
type rankDiesAt struct{ rank, step int }

func (f *rankDiesAt) Name() string { return "rankDiesAt" }
func (f *rankDiesAt) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.Rank == f.rank && s.GlobalStep == f.step {
		return errors.New("rank dies before its save")
	}
	return nil
}

// A rank that dies before its part of a sharded save (an elastic job's
// rank killed at a checkpoint step) leaves the checkpoint saved before it
// whole: the other ranks' new shards do not replace the files its index
// names. Before, they did, and the restart either resumed from shards of two
// saves or (with the index's digests) could not resume at all.
func TestShardedSaveThatARankMissesLeavesTheEarlierCheckpoint(t *testing.T) {
	ctx := context.Background()
	ds := regression(t, 64, 0.01, 4)
	dir := t.TempDir()
	_, errs := onRanks(t, 2, fsdpRank(t), func(r int) trainer.Config {
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{EveryNTrainSteps: 2, LastOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		return quiet(trainer.Config{MaxEpochs: 1, Seed: 1, LogDir: dir, ShardedCheckpoint: true, Callbacks: []trainer.Callback{&rankDiesAt{1, 6}, mc}})
	}, func(r int, tr *trainer.Trainer) error {
		defer tr.Teardown(ctx)
		return tr.Fit(ctx, newEvalReg(), loader(t, ds, 4, false, false), nil)
	})
	if errs[1] == nil {
		t.Fatal("rank 1's Fit: no error, want its callback's")
	}
	index := filepath.Join(dir, "checkpoints", "last.ckpt")
	info, err := trainer.VerifyCheckpoint(index)
	if err != nil {
		t.Fatalf("the checkpoint saved before the failed save: %v", err)
	}
	if info.GlobalStep != 4 {
		t.Errorf("last.ckpt is at step %d, want 4 (the save at step 6 did not finish)", info.GlobalStep)
	}
	// Rank 0's shard of the save that did not finish, under the other
	// slot's name, is still recognised as a shard of the index.
	alt := index + ".rank0-of-2.alt"
	if _, err := trainer.VerifyCheckpoint(alt); err == nil || !strings.Contains(err.Error(), "pass the index, "+index+",") {
		t.Errorf("VerifyCheckpoint of %s: %v, want an error naming the index", alt, err)
	}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(ctx, newEvalReg(), loader(t, ds, 8, false, false), nil, trainer.FromCheckpoint(index)); err != nil {
		t.Errorf("resume from it: %v", err)
	}
}
