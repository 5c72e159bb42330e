package trainer_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/trainer"
)

type cancelAtSanity struct{ cancel context.CancelFunc }

func (*cancelAtSanity) Name() string { return "cancelAtSanity" }
func (c *cancelAtSanity) OnSanityCheckStart(context.Context, *trainer.State) error {
	c.cancel()
	return nil
}

type stopAtGlobalStep struct{ step int }

func (*stopAtGlobalStep) Name() string { return "stopAtGlobalStep" }
func (c *stopAtGlobalStep) OnTrainBatchEnd(_ context.Context, s *trainer.State) error {
	if s.GlobalStep == c.step {
		return trainer.Stop("test")
	}
	return nil
}

// stoppedAtStep11 trains 3 epochs of ds in batches of 8 (8 batches an
// epoch) until a Stop at global step 11, and returns its last.ckpt (epoch
// 1, batch 3) and what it says.
func stoppedAtStep11(t *testing.T, ds data.Dataset) (string, trainer.CheckpointInfo) {
	t.Helper()
	root := t.TempDir()
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 3, Seed: 1, DefaultRootDir: root, Callbacks: []trainer.Callback{&stopAtGlobalStep{step: 11}}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), newEvalReg(), loader(t, ds, 8, false, false), loader(t, ds, 8, false, false)); err != nil {
		t.Fatal(err)
	}
	last := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
	info, err := trainer.ReadCheckpointInfo(last)
	if err != nil || info.Epoch != 1 || info.BatchIdx != 3 || info.GlobalStep != 11 {
		t.Fatalf("last.ckpt %+v, %v: want epoch 1, batch 3, step 11", info, err)
	}
	return last, info
}

// A resumed Fit cancelled before its first step (here in the sanity
// check) names the checkpoint it resumed from, which holds the run's
// state. It used to save interrupted.ckpt with the resumed weights and
// step at epoch 0, batch 0 (the loop had not taken up the resumed
// position), so resuming from it trained the first epochs again.
func TestResumedFitCancelledBeforeItsFirstStepKeepsThePosition(t *testing.T) {
	ctx := context.Background()
	ds := regression(t, 64, 0.01, 4) // 8 batches of 8
	last, want := stoppedAtStep11(t, ds)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 3, Seed: 1, DefaultRootDir: t.TempDir(), Callbacks: []trainer.Callback{&cancelAtSanity{cancel}}}))
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(cctx, newEvalReg(), loader(t, ds, 8, false, false), loader(t, ds, 8, false, false), trainer.FromCheckpoint(last))
	var ie *trainer.InterruptedError
	if !errors.As(err, &ie) || !errors.Is(err, context.Canceled) || ie.Checkpoint == "" {
		t.Fatalf("Fit: %v, want an *InterruptedError naming a checkpoint", err)
	}
	got, err := trainer.ReadCheckpointInfo(ie.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	if got.Epoch != want.Epoch || got.BatchIdx != want.BatchIdx || got.GlobalStep != want.GlobalStep {
		t.Errorf("%s: epoch %d, batch %d, step %d; the run resumed at epoch %d, batch %d, step %d", ie.Checkpoint, got.Epoch, got.BatchIdx, got.GlobalStep, want.Epoch, want.BatchIdx, want.GlobalStep)
	}
	if s := tr.Stats(); !s.Interrupted || s.InterruptCheckpoint != ie.Checkpoint {
		t.Errorf("Stats: Interrupted %v, InterruptCheckpoint %q; want true, %q", s.Interrupted, s.InterruptCheckpoint, ie.Checkpoint)
	}
}
