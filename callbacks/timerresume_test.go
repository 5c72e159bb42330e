package callbacks_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A Timer resumed with its budget spent stops the Fit before it trains, as
// Lightning's checks in on_fit_start, once its state is restored. It used
// to check only at the next batch or epoch end: with Interval "epoch", a
// whole epoch more.
func TestTimerResumedWithItsBudgetSpentTrainsNothing(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	root := t.TempDir()
	tm, err := callbacks.NewTimer(callbacks.TimerConfig{Duration: 5 * time.Second, Interval: "epoch", Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	// 16 one-second batches an epoch: the budget is spent at epoch 0's end.
	tr, err := fit(t, trainer.Config{MaxEpochs: 5, DefaultRootDir: root, Callbacks: []trainer.Callback{tick{&now}, tm}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.GlobalStep != 16 || !strings.Contains(s.StoppedEarly, "Timer") {
		t.Fatalf("first Fit: %+v; want a Timer stop after epoch 0's 16 steps", s)
	}
	tm2, _ := callbacks.NewTimer(callbacks.TimerConfig{Duration: 5 * time.Second, Interval: "epoch", Now: clock})
	last := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
	tr, err = fit(t, trainer.Config{MaxEpochs: 5, Callbacks: []trainer.Callback{tick{&now}, tm2}}, false, trainer.FromCheckpoint(last))
	if err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.GlobalStep != 16 || !strings.Contains(s.StoppedEarly, "Timer: the time budget of 5s is spent (16s elapsed)") {
		t.Errorf("resumed Fit: step %d, StoppedEarly %q; want 16 (nothing trained), stopped by the Timer", s.GlobalStep, s.StoppedEarly)
	}
}
