package callbacks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/fulgur-ml/fulgur/trainer"
)

// EarlyStoppingConfig configures EarlyStopping (Lightning's fields and
// rules).
type EarlyStoppingConfig struct {
	// Monitor is the metric watched; required.
	Monitor string
	// Mode is "min" (the default: lower is better) or "max".
	Mode string
	// MinDelta is the least change that counts as an improvement (>= 0).
	MinDelta float64
	// Patience is how many checks without improvement are allowed before
	// stopping. 0: 3 (Lightning's default; 1 stops at the first check
	// without improvement).
	Patience int
	// StoppingThreshold stops as soon as the metric is better than it.
	StoppingThreshold *float64
	// DivergenceThreshold stops as soon as the metric is worse than it.
	DivergenceThreshold *float64
	// AllowNonFinite keeps going when the metric is NaN or infinite
	// (by default that stops training).
	AllowNonFinite bool
	// AllowMissing skips a check where the metric was not logged (by
	// default that is an error naming the logged metrics).
	AllowMissing bool
	// CheckOnTrainEpochEnd checks at the end of each training epoch
	// instead of after each validation. A Fit without validation checks
	// there whatever this says, as Lightning's default does: a training
	// metric (train_loss) is then watched once an epoch.
	CheckOnTrainEpochEnd bool
	// Name keys the state in checkpoints. "": "EarlyStopping".
	Name string
}

// Validate fills defaults and reports every problem at once.
func (c *EarlyStoppingConfig) Validate() error {
	var errs []error
	if c.Monitor == "" {
		errs = append(errs, errors.New("EarlyStopping Monitor is empty: name the metric to watch, such as \"val_loss\""))
	}
	switch c.Mode {
	case "":
		c.Mode = "min"
	case "min", "max":
	default:
		errs = append(errs, fmt.Errorf("EarlyStopping Mode is %q: use \"min\" or \"max\"", c.Mode))
	}
	if c.MinDelta < 0 || math.IsNaN(c.MinDelta) {
		errs = append(errs, fmt.Errorf("EarlyStopping MinDelta is %v: use 0 or a positive change", c.MinDelta))
	}
	if c.Patience < 0 {
		errs = append(errs, fmt.Errorf("EarlyStopping Patience is %d: use 0 (the default, 3) or more", c.Patience))
	}
	if c.Patience == 0 {
		c.Patience = 3
	}
	if c.Name == "" {
		c.Name = "EarlyStopping"
	}
	return errors.Join(errs...)
}

// EarlyStopping stops training when a monitored metric has stopped
// improving. Validation metrics are reduced across ranks, so every rank
// takes the same decision.
type EarlyStopping struct {
	cfg          EarlyStoppingConfig
	wait         int
	best         float64
	stoppedEpoch int
	reason       string
}

var (
	_ trainer.ValidationEndHook = (*EarlyStopping)(nil)
	_ trainer.TrainEpochEndHook = (*EarlyStopping)(nil)
	_ trainer.Stateful          = (*EarlyStopping)(nil)
	_ trainer.ReadyChecker      = (*EarlyStopping)(nil)
)

// NewEarlyStopping validates cfg and returns the callback.
func NewEarlyStopping(cfg EarlyStoppingConfig) (*EarlyStopping, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &EarlyStopping{cfg: cfg, best: math.Inf(1), stoppedEpoch: -1}
	if cfg.Mode == "max" {
		e.best = math.Inf(-1)
	}
	return e, nil
}

func (e *EarlyStopping) Name() string { return e.cfg.Name }

// CheckReady refuses an EarlyStopping not made by NewEarlyStopping
// (trainer.ReadyChecker).
func (e *EarlyStopping) CheckReady() error {
	if e.cfg.Name == "" { // Validate always names it
		return literal("NewEarlyStopping", "has no Monitor to watch")
	}
	return nil
}

// Best is the best value seen; Wait the checks since it; StoppedEpoch the
// epoch training was stopped in (-1 if not); Reason why.
func (e *EarlyStopping) Best() float64     { return e.best }
func (e *EarlyStopping) Wait() int         { return e.wait }
func (e *EarlyStopping) StoppedEpoch() int { return e.stoppedEpoch }
func (e *EarlyStopping) Reason() string    { return e.reason }

func (e *EarlyStopping) OnValidationEnd(ctx context.Context, s *trainer.State) error {
	if e.cfg.CheckOnTrainEpochEnd || s.Stage != "fit" || s.SanityChecking {
		return nil // as Lightning's, it never judges the sanity check's metrics
	}
	return e.check(s)
}

func (e *EarlyStopping) OnTrainEpochEnd(ctx context.Context, s *trainer.State) error {
	if !e.cfg.CheckOnTrainEpochEnd && s.HasValidation {
		return nil
	}
	return e.check(s)
}

func (e *EarlyStopping) check(s *trainer.State) error {
	if s.FastDevRun {
		return nil
	}
	v, ok := s.Metrics.Get(e.cfg.Monitor)
	if !ok {
		if e.cfg.AllowMissing {
			return nil
		}
		return fmt.Errorf("EarlyStopping(Monitor %q): the metric was not logged; logged metrics are %v%s: log it, fix Monitor, or set AllowMissing%s", e.cfg.Monitor, s.Metrics.Names(), bareNames(s.Metrics), noValidation(s))
	}
	if stop, reason := e.Update(v); stop {
		e.stoppedEpoch = s.Epoch
		return trainer.Stop("%s", reason)
	}
	return nil
}

func (e *EarlyStopping) better(a, b float64) bool {
	if e.cfg.Mode == "max" {
		return a > b
	}
	return a < b
}

// Update records one value of the monitored metric and reports whether
// training should stop, and why.
func (e *EarlyStopping) Update(v float64) (bool, string) {
	m := e.cfg.Monitor
	delta := e.cfg.MinDelta
	if e.cfg.Mode == "min" {
		delta = -delta
	}
	switch {
	case !e.cfg.AllowNonFinite && (math.IsNaN(v) || math.IsInf(v, 0)):
		e.reason = fmt.Sprintf("monitored metric %s = %v is not finite; the best was %.6g", m, v, e.best)
		return true, e.reason
	case e.cfg.StoppingThreshold != nil && e.better(v, *e.cfg.StoppingThreshold):
		e.reason = fmt.Sprintf("stopping threshold reached: %s = %.6g is better than %.6g", m, v, *e.cfg.StoppingThreshold)
		return true, e.reason
	case e.cfg.DivergenceThreshold != nil && e.better(*e.cfg.DivergenceThreshold, v):
		e.reason = fmt.Sprintf("divergence threshold reached: %s = %.6g is worse than %.6g", m, v, *e.cfg.DivergenceThreshold)
		return true, e.reason
	case e.better(v-delta, e.best):
		e.best, e.wait = v, 0
		return false, ""
	}
	e.wait++
	if e.wait >= e.cfg.Patience {
		e.reason = fmt.Sprintf("monitored metric %s did not improve in the last %d checks; the best was %.6g", m, e.wait, e.best)
		return true, e.reason
	}
	return false, ""
}

type esState struct {
	Wait         int    `json:"wait_count"`
	Best         jf     `json:"best_score"`
	StoppedEpoch int    `json:"stopped_epoch"`
	Patience     int    `json:"patience"`
	Monitor      string `json:"monitor"`
	Mode         string `json:"mode,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

func (e *EarlyStopping) StateDict() ([]byte, error) {
	return json.Marshal(esState{Wait: e.wait, Best: jf(e.best), StoppedEpoch: e.stoppedEpoch, Patience: e.cfg.Patience, Monitor: e.cfg.Monitor, Mode: e.cfg.Mode, Reason: e.reason})
}

func (e *EarlyStopping) LoadStateDict(b []byte) error {
	var st esState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("EarlyStopping state: %w", err)
	}
	if st.Monitor != e.cfg.Monitor || (st.Mode != "" && st.Mode != e.cfg.Mode) {
		// Another metric, or the same one judged the other way (the best
		// of "min" is no best for "max"): start afresh, as Lightning's
		// state is keyed by both.
		return nil
	}
	e.wait, e.best, e.stoppedEpoch, e.reason = st.Wait, float64(st.Best), st.StoppedEpoch, st.Reason
	return nil
}
