package callbacks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// slowSanity advances a fake clock during Fit's sanity check, as a slow
// validation set would.
type slowSanity struct {
	now *time.Time
	by  time.Duration
}

func (slowSanity) Name() string { return "slowSanity" }
func (s slowSanity) OnSanityCheckEnd(context.Context, *trainer.State) error {
	*s.now = s.now.Add(s.by)
	return nil
}

// The Timer's clock starts at OnTrainStart, as Lightning's Timer times its
// training stage from on_train_start: the sanity check, before it, spends
// none of the budget. Before, the clock started at OnFitStart, so a sanity
// check longer than the budget stopped training after its first step.
func TestTimerBudgetStartsAfterTheSanityCheck(t *testing.T) {
	now := time.Unix(1000, 0)
	tm, err := callbacks.NewTimer(callbacks.TimerConfig{Duration: 10 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	// The sanity check takes 100 s; each training batch 1 s.
	cbs := []trainer.Callback{slowSanity{&now, 100 * time.Second}, tick{&now}, tm}
	tr, err := fit(t, trainer.Config{MaxEpochs: 5, Callbacks: cbs}, true)
	if err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.GlobalStep != 10 || !strings.Contains(s.StoppedEarly, "Timer: the time budget of 10s is spent (10s elapsed)") {
		t.Errorf("stats %+v: want a stop after 10 one-second steps, the 100 s sanity check not counted", s)
	}
	if got := tm.Elapsed(); got != 10*time.Second {
		t.Errorf("Elapsed after Fit = %v, want the 10 s of training", got)
	}
}
