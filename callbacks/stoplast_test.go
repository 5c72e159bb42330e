package callbacks_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// TestModelCheckpointLastAfterAStopMidEpoch: a Timer (or any callback's
// Stop) that ends training in the middle of an epoch ends the epoch
// there; with SaveLast, last.ckpt holds the weights the run ended with, as
// Lightning's saves when a Timer stops training. Inside an accumulation window there is nothing a
// checkpoint can hold, and Fit still succeeds.
func TestModelCheckpointLastAfterAStopMidEpoch(t *testing.T) {
	for _, c := range []struct {
		name     string
		accum    int
		wantStep int // last.ckpt's; -1: none
	}{
		{"every batch steps", 1, 10},
		{"inside a window", 4, -1}, // the 10th batch is the 2nd of step 3's window
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			tm, err := callbacks.NewTimer(callbacks.TimerConfig{Duration: 10 * time.Second, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, SaveLast: true})
			if err != nil {
				t.Fatal(err)
			}
			// 16 batches an epoch: the Timer stops at the 10th.
			tr, err := fit(t, trainer.Config{MaxEpochs: 2, AccumulateGradBatches: c.accum, Callbacks: []trainer.Callback{tick{&now}, tm, mc}}, false)
			if err != nil {
				t.Fatal(err)
			}
			if s := tr.Stats(); s.StoppedEarly == "" || s.Epochs != 0 {
				t.Fatalf("stats %+v: want the Timer's stop in epoch 0", s)
			}
			last := filepath.Join(dir, "last.ckpt")
			info, err := trainer.ReadCheckpointInfo(last)
			switch {
			case c.wantStep < 0 && err == nil:
				t.Errorf("last.ckpt of step %d written inside an accumulation window", info.GlobalStep)
			case c.wantStep >= 0 && err != nil:
				t.Fatalf("no last.ckpt after the Timer's stop: %v", err)
			case c.wantStep >= 0 && (info.GlobalStep != c.wantStep || info.BatchIdx != 10 || mc.LastModelPath() != last):
				t.Errorf("last.ckpt: step %d, batch %d, LastModelPath %q; want step %d, batch 10, %q", info.GlobalStep, info.BatchIdx, mc.LastModelPath(), c.wantStep, last)
			}
		})
	}
}
