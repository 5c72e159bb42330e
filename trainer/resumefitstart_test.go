package trainer_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// savesAtFitStart saves a checkpoint in OnFitStart and records what
// OnFitStart and OnTrainStart see of the loop's position.
type savesAtFitStart struct {
	path               string
	fitStart, trainBeg [3]int // epoch, batch index, global step
}

func (*savesAtFitStart) Name() string { return "savesAtFitStart" }

func (c *savesAtFitStart) OnFitStart(ctx context.Context, s *trainer.State) error {
	c.fitStart = [3]int{s.Epoch, s.BatchIdx, s.GlobalStep}
	if c.path == "" {
		return nil
	}
	return s.SaveCheckpoint(ctx, c.path)
}

func (c *savesAtFitStart) OnTrainStart(_ context.Context, s *trainer.State) error {
	c.trainBeg = [3]int{s.Epoch, s.BatchIdx, s.GlobalStep}
	return nil
}

// A checkpoint saved in OnFitStart of a resumed Fit holds the resumed
// position, and a resume from it trains on as one from the checkpoint
// it was resumed from. It used to record epoch 0, batch 0 (the loop took
// up the position only as it entered the epoch) with the resumed weights
// and step, so a resume from it trained the first epoch again.
func TestCheckpointSavedInOnFitStartOfAResumedFitHoldsItsPosition(t *testing.T) {
	ctx := context.Background()
	ds := regression(t, 64, 0.01, 4) // 8 batches of 8
	last, want := stoppedAtStep11(t, ds)
	cfg := func(cbs ...trainer.Callback) trainer.Config {
		return quiet(trainer.Config{MaxEpochs: 3, Seed: 1, DefaultRootDir: t.TempDir(), Callbacks: cbs})
	}

	// Resumed from last.ckpt, saving in OnFitStart, trained to the end.
	saver := &savesAtFitStart{path: filepath.Join(t.TempDir(), "fitstart.ckpt")}
	tr1, err := trainer.New(cfg(saver))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr1.Fit(ctx, newEvalReg(), loader(t, ds, 8, false, false), loader(t, ds, 8, false, false), trainer.FromCheckpoint(last)); err != nil {
		t.Fatal(err)
	}
	got, err := trainer.ReadCheckpointInfo(saver.path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Epoch != want.Epoch || got.BatchIdx != want.BatchIdx || got.GlobalStep != want.GlobalStep {
		t.Errorf("checkpoint saved in OnFitStart: epoch %d, batch %d, step %d; the Fit resumed at epoch %d, batch %d, step %d", got.Epoch, got.BatchIdx, got.GlobalStep, want.Epoch, want.BatchIdx, want.GlobalStep)
	}
	// OnFitStart and OnTrainStart see the resumed epoch and step (the next
	// batch has not started: BatchIdx stays 0 until it does).
	for hook, seen := range map[string][3]int{"OnFitStart": saver.fitStart, "OnTrainStart": saver.trainBeg} {
		if seen != [3]int{1, 0, 11} {
			t.Errorf("%s saw epoch, batch, step %v; want [1 0 11]", hook, seen)
		}
	}

	// Resumed from the OnFitStart checkpoint: the same run to the end.
	tr2, err := trainer.New(cfg(&savesAtFitStart{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr2.Fit(ctx, newEvalReg(), loader(t, ds, 8, false, false), loader(t, ds, 8, false, false), trainer.FromCheckpoint(saver.path)); err != nil {
		t.Fatal(err)
	}
	if s1, s2 := tr1.Stats(), tr2.Stats(); s1.GlobalStep != 24 || s2.GlobalStep != s1.GlobalStep || s2.Epochs != s1.Epochs {
		t.Errorf("resumed from the OnFitStart checkpoint: step %d, epochs %d; from last.ckpt: step %d, epochs %d; want 24 steps, 3 epochs for both", s2.GlobalStep, s2.Epochs, s1.GlobalStep, s1.Epochs)
	}
	if w1, w2 := tr1.Store().Data32(), tr2.Store().Data32(); !slices.Equal(w1, w2) {
		t.Errorf("weights resumed from the OnFitStart checkpoint %v, from last.ckpt %v: want the same", w2, w1)
	}
	m1, m2 := tr1.Metrics(), tr2.Metrics()
	if m1["train_loss_epoch"] != m2["train_loss_epoch"] {
		t.Errorf("train_loss_epoch resumed from the OnFitStart checkpoint %v, from last.ckpt %v: want the same (the epoch's aggregates carried over)", m2["train_loss_epoch"], m1["train_loss_epoch"])
	}
}
