package optim

import (
	"fmt"
	"math"
)

// PlateauConfig configures ReduceOnPlateau. Zero values of Mode, Factor,
// ThresholdMode, Eps and Interval take torch's defaults; Patience, Cooldown,
// Threshold and MinLR are taken as given (torch's defaults are patience 10
// and threshold 1e-4: DefaultPlateauConfig returns them all).
type PlateauConfig struct {
	// Mode is "min" (the metric should fall, such as a loss; default) or
	// "max" (it should rise, such as an accuracy).
	Mode string
	// Factor multiplies the learning rate on a plateau; in (0, 1), default 0.1.
	Factor float64
	// Patience is the number of intervals without improvement tolerated;
	// the rate falls on the next one.
	Patience int
	// Threshold is the smallest change that counts as an improvement,
	// relative to the best value ("rel") or absolute ("abs").
	Threshold     float64
	ThresholdMode string // "rel" (default) or "abs"
	// Cooldown is the number of intervals after a reduction during which
	// bad intervals are not counted.
	Cooldown int
	// MinLR is the floor of the learning rate.
	MinLR float64
	// Eps: a reduction smaller than Eps is skipped; default 1e-8.
	Eps float64
	// Interval is when the trainer calls Step; default PerEpoch.
	Interval Interval
	// Monitor is the logged metric the trainer passes to Step (Lightning's
	// "monitor"), such as "val_acc" with Mode "max"; a bare name answers
	// with the value logged last, as State.Metrics.Get does. "": val_loss
	// when it is logged, else train_loss, so Mode "max" needs a Monitor
	// (the trainer refuses it without one). A metric that is not logged
	// stops training with an error naming the logged ones.
	Monitor string
}

// DefaultPlateauConfig returns torch.optim.lr_scheduler.ReduceLROnPlateau's
// defaults.
func DefaultPlateauConfig() PlateauConfig {
	return PlateauConfig{Mode: "min", Factor: 0.1, Patience: 10, Threshold: 1e-4, ThresholdMode: "rel", Eps: 1e-8, Interval: PerEpoch}
}

// Validate fills defaults and returns every problem at once.
func (c *PlateauConfig) Validate() error {
	if c.Mode == "" {
		c.Mode = "min"
	}
	if c.Factor == 0 {
		c.Factor = 0.1
	}
	if c.ThresholdMode == "" {
		c.ThresholdMode = "rel"
	}
	if c.Eps == 0 {
		c.Eps = 1e-8
	}
	if c.Interval == 0 {
		c.Interval = PerEpoch
	}
	var p problems
	if c.Mode != "min" && c.Mode != "max" {
		p.addf("PlateauConfig.Mode is %q: use \"min\" for a metric that should fall (a loss) or \"max\" for one that should rise (an accuracy)", c.Mode)
	}
	if !(c.Factor > 0 && c.Factor < 1) {
		p.addf("PlateauConfig.Factor is %v: use a value in (0, 1), such as 0.1", c.Factor)
	}
	if c.Patience < 0 {
		p.addf("PlateauConfig.Patience is %d: use 0 or more intervals, such as 10", c.Patience)
	}
	if !finite(c.Threshold) || c.Threshold < 0 {
		p.addf("PlateauConfig.Threshold is %v: use a value >= 0, such as 1e-4", c.Threshold)
	}
	if c.ThresholdMode != "rel" && c.ThresholdMode != "abs" {
		p.addf("PlateauConfig.ThresholdMode is %q: use \"rel\" or \"abs\"", c.ThresholdMode)
	}
	if c.Cooldown < 0 {
		p.addf("PlateauConfig.Cooldown is %d: use 0 or more intervals", c.Cooldown)
	}
	if !finite(c.MinLR) || c.MinLR < 0 {
		p.addf("PlateauConfig.MinLR is %v: use a value >= 0", c.MinLR)
	}
	if !finite(c.Eps) || c.Eps < 0 {
		p.addf("PlateauConfig.Eps is %v: use a small value >= 0, such as 1e-8", c.Eps)
	}
	if c.Interval != PerStep && c.Interval != PerEpoch {
		p.addf("PlateauConfig.Interval is %v: use optim.PerEpoch or optim.PerStep", c.Interval)
	}
	return p.err()
}

// ReduceOnPlateau multiplies the learning rate by Factor when the metric
// has not improved for more than Patience intervals: torch's
// ReduceLROnPlateau. A NaN metric never counts as an improvement.
type ReduceOnPlateau struct {
	cfg      PlateauConfig
	best     float64
	bad      int64
	cooldown int64
	count    int64
}

var (
	_ Scheduler = (*ReduceOnPlateau)(nil)
	_ Starter   = (*ReduceOnPlateau)(nil)
	_ Monitored = (*ReduceOnPlateau)(nil)
)

// Monitored is a Scheduler whose Step takes a logged metric: Monitor names
// it ("": the trainer's default, val_loss when logged, else train_loss).
// The trainer passes NaN to the Step of other schedulers.
type Monitored interface {
	Monitor() string
}

// Monitor is the metric the trainer passes to Step (PlateauConfig.Monitor).
func (s *ReduceOnPlateau) Monitor() string { return s.cfg.Monitor }

// NewReduceOnPlateau returns the scheduler, or every problem of cfg.
func NewReduceOnPlateau(cfg PlateauConfig) (*ReduceOnPlateau, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &ReduceOnPlateau{cfg: cfg}
	s.best = s.worst()
	return s, nil
}

// Config returns the validated configuration, defaults filled in.
func (s *ReduceOnPlateau) Config() PlateauConfig { return s.cfg }

func (s *ReduceOnPlateau) worst() float64 {
	if s.cfg.Mode == "min" {
		return math.Inf(1)
	}
	return math.Inf(-1)
}

func (s *ReduceOnPlateau) better(a float64) bool {
	c := s.cfg
	switch {
	case c.Mode == "min" && c.ThresholdMode == "rel":
		return a < s.best*(1-c.Threshold)
	case c.Mode == "min":
		return a < s.best-c.Threshold
	case c.ThresholdMode == "rel":
		return a > s.best*(c.Threshold+1)
	default:
		return a > s.best+c.Threshold
	}
}

func (s *ReduceOnPlateau) Interval() Interval { return s.cfg.Interval }

// Start does nothing: the schedule starts at the optimizer's own rate.
func (s *ReduceOnPlateau) Start(Optimizer) {}

// Step records metric (the monitored value of the interval that ended) and
// lowers opt's learning rate on a plateau.
func (s *ReduceOnPlateau) Step(opt Optimizer, metric float64) {
	s.count++
	if s.better(metric) {
		s.best = metric
		s.bad = 0
	} else {
		s.bad++
	}
	if s.cooldown > 0 {
		s.cooldown--
		s.bad = 0
	}
	if s.bad > int64(s.cfg.Patience) {
		old := opt.LR()
		lr := math.Max(old*s.cfg.Factor, s.cfg.MinLR)
		if old-lr > s.cfg.Eps {
			opt.SetLR(lr)
		}
		s.cooldown = int64(s.cfg.Cooldown)
		s.bad = 0
	}
}

// State holds "best", "num_bad", "cooldown" and "count".
func (s *ReduceOnPlateau) State() map[string]float64 {
	return map[string]float64{"best": s.best, "num_bad": float64(s.bad), "cooldown": float64(s.cooldown), "count": float64(s.count)}
}

func (s *ReduceOnPlateau) LoadState(m map[string]float64) error {
	const who = "ReduceOnPlateau"
	best, ok := m["best"]
	if !ok || math.IsNaN(best) {
		return fmt.Errorf("%s.LoadState: key \"best\" is missing or NaN: pass a map written by %s.State", who, who)
	}
	bad, err := loadCount(who, m, "num_bad")
	if err != nil {
		return err
	}
	cd, err := loadCount(who, m, "cooldown")
	if err != nil {
		return err
	}
	c, err := loadCount(who, m, "count")
	if err != nil {
		return err
	}
	s.best, s.bad, s.cooldown, s.count = best, bad, cd, c
	return nil
}
