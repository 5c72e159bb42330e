package trainer_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// stopAtStep stops a Fit from OnTrainBatchEnd when the global step is n
// (a Timer, a loss threshold), whatever batch of the epoch that is.
type stopAtStep struct{ n int }

func (*stopAtStep) Name() string { return "stopAtStep" }
func (s *stopAtStep) OnTrainBatchEnd(ctx context.Context, st *trainer.State) error {
	if st.GlobalStep == s.n {
		return trainer.Stop("step %d", s.n)
	}
	return nil
}

// TestStopMidEpochSavesTheDefaultCheckpoints: a Fit that a callback stops
// in the middle of an epoch keeps its training: the default checkpoints
// hold the weights it ended with (Lightning's checkpoint callback saves
// when the epoch ends early), and resuming from last.ckpt trains on to the
// weights of a run that was never stopped.
func TestStopMidEpochSavesTheDefaultCheckpoints(t *testing.T) {
	ds := regression(t, 64, 0.01, 1)
	ctx := context.Background()
	fit := func(cfg trainer.Config, opts ...trainer.FitOption) *trainer.Trainer {
		t.Helper()
		tr, err := trainer.New(quiet(cfg))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(ctx, &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, true, false), nil, opts...); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	// 4 batches an epoch: step 6 is the second batch of epoch 1.
	root := t.TempDir()
	stopped := fit(trainer.Config{MaxEpochs: 2, Seed: 1, DefaultRootDir: root, Callbacks: []trainer.Callback{&stopAtStep{6}}})
	if s := stopped.Stats(); s.GlobalStep != 6 || s.StoppedEarly == "" {
		t.Fatalf("stats %+v: want a stop at step 6", s)
	}
	last := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
	info, err := trainer.ReadCheckpointInfo(last)
	if err != nil {
		t.Fatalf("no last.ckpt after a stop in the middle of an epoch: %v", err)
	}
	if info.GlobalStep != 6 || info.Epoch != 1 || info.BatchIdx != 2 {
		t.Errorf("last.ckpt holds step %d, epoch %d, batch %d: want the stop's step 6, epoch 1, batch 2", info.GlobalStep, info.Epoch, info.BatchIdx)
	}
	if _, err := trainer.ReadCheckpointInfo(filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "epoch=1-step=6.ckpt")); err != nil {
		t.Errorf("the epoch checkpoint of the weights the run ended with: %v", err)
	}
	resumed := fit(trainer.Config{MaxEpochs: 2, Seed: 1, DefaultRootDir: root}, trainer.FromCheckpoint(last))
	whole := fit(trainer.Config{MaxEpochs: 2, Seed: 1, DefaultRootDir: t.TempDir()})
	if got, want := resumed.Store().SHA256(), whole.Store().SHA256(); got != want {
		t.Errorf("resumed from the stop's last.ckpt: weights %s, want %s (a run never stopped)", got, want)
	}
}

// TestStopInsideAnAccumulationWindowSavesNothing: a stop at a batch whose
// gradients wait for the window's optimizer step leaves no checkpoint of
// that batch (its partial gradients cannot be saved), and Fit still
// succeeds; the epoch's checkpoint before it stays.
func TestStopInsideAnAccumulationWindowSavesNothing(t *testing.T) {
	ds := regression(t, 64, 0.01, 1)
	root := t.TempDir()
	// 4 batches an epoch, 2 per step: steps 1-2 in epoch 0, step 3 closes
	// batch 1 of epoch 1, and the stop at batch 2 is inside step 4's window.
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, AccumulateGradBatches: 2, DefaultRootDir: root, Callbacks: []trainer.Callback{&stopMidWindow{}}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	info, err := trainer.ReadCheckpointInfo(filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt"))
	if err != nil || info.GlobalStep != 2 {
		t.Errorf("last.ckpt: %+v, %v; want epoch 0's checkpoint (step 2)", info, err)
	}
}

// stopMidWindow stops at batch 2 of epoch 1.
type stopMidWindow struct{}

func (*stopMidWindow) Name() string { return "stopMidWindow" }
func (*stopMidWindow) OnTrainBatchEnd(ctx context.Context, st *trainer.State) error {
	if st.Epoch == 1 && st.BatchIdx == 2 {
		return trainer.Stop("mid window")
	}
	return nil
}
