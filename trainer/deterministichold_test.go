package trainer_test

import (
	"context"
	"testing"

	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/nn/ops"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Deterministic holds for every Fit of its trainer, whatever other
// trainers of the process do in between. It was set once, when a trainer
// first set its module up: a trainer without it, run in between (a sweep,
// a service training on request), switched it off for the first trainer's
// next Fit, which then summed the convolution weight gradient per worker
// and trained to other bits than the same sequence run alone; and it stayed
// on after a deterministic Fit, for everything else the process ran.
func TestDeterministicHoldsForEachFit(t *testing.T) {
	t.Cleanup(func() { ops.SetImageWorkers(0) })
	// One worker: without Deterministic a convolution's weight gradient is
	// then one partial sum, with it DeterministicParts.
	ops.SetImageWorkers(1)
	ds := images(t, 64)
	net := func() *models.ResNet { return &models.ResNet{Config: nn.ResNetConfig{Widths: []int{8, 8, 8}}} }
	newTrainer := func(det bool) *trainer.Trainer {
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 4, Deterministic: det}))
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	fit := func(tr *trainer.Trainer) {
		t.Helper()
		if err := tr.Fit(context.Background(), net(), loader(t, ds, 32, false, false), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Alone: two Fits of a deterministic trainer (the second trains the
	// first one's weights on).
	alone := newTrainer(true)
	fit(alone)
	fit(alone)
	want := alone.Store().SHA256()
	if ops.Deterministic() {
		t.Error("Deterministic is still in force after the trainer's Fit returned")
	}

	withOther := newTrainer(true)
	fit(withOther)
	fit(newTrainer(false))
	fit(withOther)
	if got := withOther.Store().SHA256(); got != want {
		t.Errorf("a deterministic trainer's second Fit after another trainer's Fit trained to %s, alone to %s", got, want)
	}
}
