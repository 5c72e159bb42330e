package callbacks

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fulgur-ml/fulgur/trainer"
)

// LearningRateMonitor logs the learning rate as "lr-<optimizer>" (for
// example "lr-adam") through the trainer's loggers.
type LearningRateMonitor struct {
	interval string
	lastStep int
	lastLR   float64
	logged   bool
}

var (
	_ trainer.TrainBatchEndHook   = (*LearningRateMonitor)(nil)
	_ trainer.StepEndStopper      = (*LearningRateMonitor)(nil)
	_ trainer.TrainEpochStartHook = (*LearningRateMonitor)(nil)
	_ trainer.Stateful            = (*LearningRateMonitor)(nil)
	_ trainer.ReadyChecker        = (*LearningRateMonitor)(nil)
)

// NewLearningRateMonitor logs at every logged step (interval "step" or "",
// following the trainer's LogEveryNSteps) or at every epoch start
// ("epoch"). The value logged at step N is the rate the next step uses.
func NewLearningRateMonitor(interval string) (*LearningRateMonitor, error) {
	switch interval {
	case "":
		interval = "step"
	case "step", "epoch":
	default:
		return nil, fmt.Errorf("LearningRateMonitor interval is %q: use \"step\" or \"epoch\"", interval)
	}
	return &LearningRateMonitor{interval: interval, lastStep: -1}, nil
}

func (l *LearningRateMonitor) Name() string { return "LearningRateMonitor" }

// CheckReady refuses a LearningRateMonitor not made by
// NewLearningRateMonitor (trainer.ReadyChecker).
func (l *LearningRateMonitor) CheckReady() error {
	if l.interval == "" { // NewLearningRateMonitor always sets it
		return literal("NewLearningRateMonitor", "has no interval and would log nothing")
	}
	return nil
}

// StopsAtStepEnd is false: it only logs (trainer.StepEndStopper).
func (l *LearningRateMonitor) StopsAtStepEnd() bool { return false }

func (l *LearningRateMonitor) key(s *trainer.State) string { return "lr-" + s.Optimizer }

func (l *LearningRateMonitor) OnTrainEpochStart(ctx context.Context, s *trainer.State) error {
	if l.interval == "epoch" {
		return l.log(s)
	}
	return l.OnTrainBatchEnd(ctx, s) // the rate of the first step
}

func (l *LearningRateMonitor) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	every := max(s.LogEveryNSteps, 1)
	if l.interval != "step" || s.GlobalStep == l.lastStep || s.GlobalStep%every != 0 {
		return nil
	}
	return l.log(s)
}

func (l *LearningRateMonitor) log(s *trainer.State) error {
	l.lastStep, l.lastLR, l.logged = s.GlobalStep, s.LR, true
	return s.LogMetrics(map[string]float64{l.key(s): s.LR})
}

// Last returns the last learning rate logged and its step.
func (l *LearningRateMonitor) Last() (lr float64, step int, ok bool) {
	return l.lastLR, l.lastStep, l.logged
}

type lrMonitorState struct {
	LastStep int     `json:"last_step"`
	LastLR   float64 `json:"last_lr"`
	Logged   bool    `json:"logged"`
}

// StateDict keeps the step last logged, so that a run resumed from a
// checkpoint saved at that step, which starts its epoch again at that step,
// does not log the same rate twice.
func (l *LearningRateMonitor) StateDict() ([]byte, error) {
	return json.Marshal(lrMonitorState{LastStep: l.lastStep, LastLR: l.lastLR, Logged: l.logged})
}

func (l *LearningRateMonitor) LoadStateDict(b []byte) error {
	var st lrMonitorState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("LearningRateMonitor state: %w", err)
	}
	l.lastStep, l.lastLR, l.logged = st.LastStep, st.LastLR, st.Logged
	return nil
}
