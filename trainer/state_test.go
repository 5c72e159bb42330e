package trainer_test

import (
	"context"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// meddler writes into everything its State lets it reach, at every batch
// end and at fit end.
type meddler struct{ sumBefore, sumAfter string }

func (meddler) Name() string { return "meddler" }
func (m *meddler) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	s.GlobalStep, s.Epoch, s.MaxSteps, s.BatchIdx = 1000, 7, 1, 99
	for _, l := range s.Layers() {
		l.Params = -1
		if len(l.OutShape) > 0 {
			l.OutShape[0] = -1
		}
	}
	return nil
}
func (m *meddler) OnFitEnd(ctx context.Context, s *trainer.State) error {
	m.sumBefore = s.Weights.SHA256()
	w, err := s.Weights.Tensor("w")
	if err != nil {
		return err
	}
	for i := range w.Data().([]float32) {
		w.Data().([]float32)[i] = 42
	}
	m.sumAfter = s.Weights.SHA256()
	return nil
}

// witness records what the next callback of the same hook sees.
type witness struct{ steps []int }

func (witness) Name() string { return "witness" }
func (w *witness) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	w.steps = append(w.steps, s.GlobalStep)
	return nil
}

// TestHooksCannotChangeTheRun: a callback that writes into its State
// changes neither what the next callback sees nor the trainer's loop, and
// the weights it reads are copies.
func TestHooksCannotChangeTheRun(t *testing.T) {
	ds := regression(t, 64, 0.01, 1)
	md, wt := &meddler{}, &witness{}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 1, Callbacks: []trainer.Callback{md, wt}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	// 4 batches an epoch, 2 epochs.
	if s := tr.Stats(); s.GlobalStep != 8 || s.Epochs != 2 {
		t.Errorf("global step %d, epochs %d; want 8 and 2", s.GlobalStep, s.Epochs)
	}
	for i, s := range wt.steps {
		if s != i+1 {
			t.Fatalf("the next callback saw global steps %v, want 1..8", wt.steps)
		}
	}
	if len(wt.steps) != 8 {
		t.Errorf("the next callback ran %d times, want 8", len(wt.steps))
	}
	if md.sumBefore == "" || md.sumBefore != md.sumAfter || md.sumBefore != tr.Store().SHA256() {
		t.Errorf("weights changed through State.Weights: %s before, %s after, trainer %s", md.sumBefore, md.sumAfter, tr.Store().SHA256())
	}
}

// TestMetricsView: Metrics reads the trainer's latest values.
func TestMetricsView(t *testing.T) {
	m := trainer.MetricsOf(map[string]float64{"b": 2, "a": 1})
	if v, ok := m.Get("a"); !ok || v != 1 {
		t.Errorf("Get(a) = %v, %v", v, ok)
	}
	if _, ok := m.Get("c"); ok {
		t.Error("Get(c) found a metric never logged")
	}
	if n := m.Names(); m.Len() != 2 || len(n) != 2 || n[0] != "a" || n[1] != "b" {
		t.Errorf("Len %d, Names %v", m.Len(), n)
	}
	// A metric logged on step and epoch answers to its bare name, as in
	// Lightning's callback_metrics: the epoch value once there is one.
	both := trainer.MetricsOf(map[string]float64{"loss_step": 3, "loss_epoch": 4, "acc_step": 5})
	for name, want := range map[string]float64{"loss": 4, "acc": 5, "loss_step": 3} {
		if v, ok := both.Get(name); !ok || v != want {
			t.Errorf("Get(%s) = %v, %v; want %v", name, v, ok, want)
		}
	}
	if v, ok := both.Get("lo"); ok {
		t.Errorf("Get(lo) = %v: a prefix is not a metric", v)
	}
	c := m.Map()
	c["a"] = 5
	if v, _ := m.Get("a"); v != 1 {
		t.Errorf("a copy from Map changed the view: a = %v", v)
	}
}
