package callbacks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fulgur-ml/fulgur/trainer"
)

// TimerConfig configures a Timer.
type TimerConfig struct {
	// Duration is the wall-clock budget of training; required.
	Duration time.Duration
	// Interval is when the budget is checked: "step" (the default: after
	// each batch) or "epoch".
	Interval string
	// Now is the clock. nil: time.Now.
	Now func() time.Time
}

// Timer stops training once its wall-clock budget is spent. Its clock runs
// from OnTrainStart to OnTrainEnd, as Lightning's Timer times the training
// stage: the validations during training count, the sanity check before it
// does not. Time spent by earlier runs resumed from a checkpoint counts.
// Ranks' clocks differ, so the trainer makes every rank stop at the same
// step when any one does. Make it with NewTimer: the zero Timer has no
// budget, and the trainer refuses it.
type Timer struct {
	cfg     TimerConfig
	start   time.Time
	running bool
	before  time.Duration // elapsed in earlier runs (from a checkpoint)
}

var (
	_ trainer.FitStartHook      = (*Timer)(nil)
	_ trainer.TrainStartHook    = (*Timer)(nil)
	_ trainer.TrainEndHook      = (*Timer)(nil)
	_ trainer.TrainBatchEndHook = (*Timer)(nil)
	_ trainer.StepEndStopper    = (*Timer)(nil)
	_ trainer.TrainEpochEndHook = (*Timer)(nil)
	_ trainer.Stateful          = (*Timer)(nil)
	_ trainer.ReadyChecker      = (*Timer)(nil)
)

// NewTimer validates cfg and returns the callback.
func NewTimer(cfg TimerConfig) (*Timer, error) {
	var errs []error
	if cfg.Duration <= 0 {
		errs = append(errs, fmt.Errorf("Timer Duration is %v: give the training budget, such as 2*time.Hour", cfg.Duration))
	}
	switch cfg.Interval {
	case "":
		cfg.Interval = "step"
	case "step", "epoch":
	default:
		errs = append(errs, fmt.Errorf("Timer Interval is %q: use \"step\" or \"epoch\"", cfg.Interval))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Timer{cfg: cfg}, nil
}

func (t *Timer) Name() string { return "Timer" }

// CheckReady refuses a Timer not made by NewTimer (trainer.ReadyChecker):
// a zero budget would never stop training.
func (t *Timer) CheckReady() error {
	if t.cfg.Now == nil { // NewTimer always sets it
		return literal("NewTimer", "has no Duration and would never stop training")
	}
	return nil
}

// Elapsed is the training time used so far, earlier runs included.
func (t *Timer) Elapsed() time.Duration {
	if !t.running {
		return t.before
	}
	return t.before + t.cfg.Now().Sub(t.start)
}

// Remaining is what is left of the budget (never negative).
func (t *Timer) Remaining() time.Duration { return max(t.cfg.Duration-t.Elapsed(), 0) }

// OnFitStart, as Lightning's, stops the Fit before its first step when a
// run it resumes spent the budget already (with Interval "epoch" it would
// otherwise train one more epoch over it).
func (t *Timer) OnFitStart(ctx context.Context, s *trainer.State) error { return t.check() }

// OnTrainStart starts the clock, after the sanity check.
func (t *Timer) OnTrainStart(ctx context.Context, s *trainer.State) error {
	t.start, t.running = t.cfg.Now(), true
	return nil
}

// OnTrainEnd stops the clock.
func (t *Timer) OnTrainEnd(ctx context.Context, s *trainer.State) error {
	t.before, t.running = t.Elapsed(), false
	return nil
}

// StopsAtStepEnd (trainer.StepEndStopper) is true with Interval "step":
// the budget is checked at each batch end, and a Timer stops the batch in
// which it ran out. Sampling the clock as the step's gradients are sent
// instead, as a signal is, would stop a step later whenever the budget
// runs out after that, so the ranks keep their all-reduce per batch. With
// "epoch" it stops only at an epoch's end.
func (t *Timer) StopsAtStepEnd() bool { return t.cfg.Interval == "step" }

func (t *Timer) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if t.cfg.Interval == "step" {
		return t.check()
	}
	return nil
}

func (t *Timer) OnTrainEpochEnd(ctx context.Context, s *trainer.State) error { return t.check() }

func (t *Timer) check() error {
	if el := t.Elapsed(); el >= t.cfg.Duration {
		return trainer.Stop("Timer: the time budget of %v is spent (%v elapsed)", t.cfg.Duration, el.Round(time.Millisecond))
	}
	return nil
}

func (t *Timer) StateDict() ([]byte, error) {
	return json.Marshal(map[string]int64{"elapsed_ns": int64(t.Elapsed())})
}

func (t *Timer) LoadStateDict(b []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("Timer state: %w", err)
	}
	t.before = time.Duration(m["elapsed_ns"])
	if t.running {
		t.start = t.cfg.Now()
	}
	return nil
}
