package optim

import (
	"fmt"
	"math"
	"strings"
)

// Interval says when the trainer calls a Scheduler's Step.
type Interval int

const (
	// PerStep: after every optimizer step.
	PerStep Interval = iota + 1
	// PerEpoch: after every epoch (after validation, for ReduceOnPlateau).
	PerEpoch
)

func (iv Interval) String() string {
	switch iv {
	case PerStep:
		return "step"
	case PerEpoch:
		return "epoch"
	}
	return fmt.Sprintf("Interval(%d)", int(iv))
}

// A Scheduler sets an optimizer's learning rate. The trainer calls Start
// (see Starter) once before the first optimizer step, then Step after every
// optimizer step or every epoch, as Interval says, like torch's
// scheduler.step().
type Scheduler interface {
	Interval() Interval
	// Step advances the schedule by one interval and sets the learning rate
	// on opt. metric is used only by ReduceOnPlateau (pass NaN otherwise).
	Step(opt Optimizer, metric float64)
	// State returns the schedule's position for checkpoints; LoadState
	// restores it, with an error naming a missing or bad key.
	State() map[string]float64
	LoadState(map[string]float64) error
}

// Starter is implemented by every scheduler of this package. Start sets the
// learning rate of the schedule's current position (the first step's, for a
// new schedule) on opt. torch does this in a scheduler's constructor; here a
// trainer calls Start once before training begins, and again after
// LoadState when resuming.
type Starter interface {
	Start(opt Optimizer)
}

// A SchedOption changes a rarely changed scheduler setting.
type SchedOption func(*schedOpts)

type schedOpts struct{ every Interval }

// Every sets when the trainer calls the scheduler (default PerStep for
// StepLR, CosineAnnealing and LinearWarmup).
func Every(iv Interval) SchedOption { return func(o *schedOpts) { o.every = iv } }

func schedOptions(who string, def Interval, opts []SchedOption) (schedOpts, error) {
	o := schedOpts{every: def}
	for _, f := range opts {
		f(&o)
	}
	if o.every != PerStep && o.every != PerEpoch {
		return o, fmt.Errorf("%s: interval is %v: use optim.PerStep or optim.PerEpoch", who, o.every)
	}
	return o, nil
}

func loadCount(who string, m map[string]float64, key string) (int64, error) {
	x, ok := m[key]
	if !ok {
		return 0, fmt.Errorf("%s.LoadState: missing key %q: pass a map written by %s.State", who, key, who)
	}
	if x < 0 || x != math.Trunc(x) || x > 1<<53 {
		return 0, fmt.Errorf("%s.LoadState: key %q is %v: a saved count is a whole number >= 0", who, key, x)
	}
	return int64(x), nil
}

// StepLR multiplies the base learning rate by gamma every stepSize
// intervals: lr(t) = baseLR * gamma^floor(t/stepSize) (torch's StepLR, in
// closed form).
type StepLR struct {
	base, gamma float64
	size        int64
	count       int64
	every       Interval
}

var (
	_ Scheduler = (*StepLR)(nil)
	_ Starter   = (*StepLR)(nil)
)

// NewStepLR returns a StepLR schedule, called PerStep unless Every says
// otherwise.
func NewStepLR(baseLR float64, stepSize int, gamma float64, opts ...SchedOption) (*StepLR, error) {
	var p problems
	if !finite(baseLR) || baseLR <= 0 {
		p.addf("StepLR baseLR is %v: use the optimizer's learning rate, > 0", baseLR)
	}
	if stepSize < 1 {
		p.addf("StepLR stepSize is %d: use 1 or more intervals between decays", stepSize)
	}
	if !finite(gamma) || gamma <= 0 {
		p.addf("StepLR gamma is %v: use a factor > 0, such as 0.1", gamma)
	}
	o, err := schedOptions("StepLR", PerStep, opts)
	if err != nil {
		p = append(p, err)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return &StepLR{base: baseLR, gamma: gamma, size: int64(stepSize), every: o.every}, nil
}

// LRAt is the learning rate after t calls of Step.
func (s *StepLR) LRAt(t int64) float64 {
	return s.base * math.Pow(s.gamma, float64(t/s.size))
}

func (s *StepLR) Interval() Interval  { return s.every }
func (s *StepLR) Start(opt Optimizer) { opt.SetLR(s.LRAt(s.count)) }
func (s *StepLR) Step(opt Optimizer, _ float64) {
	s.count++
	opt.SetLR(s.LRAt(s.count))
}
func (s *StepLR) State() map[string]float64 { return map[string]float64{"count": float64(s.count)} }
func (s *StepLR) LoadState(m map[string]float64) error {
	c, err := loadCount("StepLR", m, "count")
	if err != nil {
		return err
	}
	s.count = c
	return nil
}

// CosineAnnealing follows torch's CosineAnnealingLR closed form:
// lr(t) = etaMin + (baseLR - etaMin) * (1 + cos(pi*t/tMax)) / 2. Past tMax
// the cosine continues (rises again), as in torch.
type CosineAnnealing struct {
	base, etaMin float64
	tMax         int64
	count        int64
	every        Interval
}

var (
	_ Scheduler = (*CosineAnnealing)(nil)
	_ Starter   = (*CosineAnnealing)(nil)
)

// NewCosineAnnealing returns a cosine schedule from baseLR down to etaMin
// over tMax intervals, called PerStep unless Every says otherwise.
func NewCosineAnnealing(baseLR float64, tMax int, etaMin float64, opts ...SchedOption) (*CosineAnnealing, error) {
	var p problems
	if !finite(baseLR) || baseLR <= 0 {
		p.addf("CosineAnnealing baseLR is %v: use the optimizer's learning rate, > 0", baseLR)
	}
	if tMax < 1 {
		p.addf("CosineAnnealing tMax is %d: use the number of intervals to anneal over, 1 or more", tMax)
	}
	if !finite(etaMin) || etaMin < 0 || etaMin > baseLR {
		p.addf("CosineAnnealing etaMin is %v: use a final learning rate in [0, baseLR], usually 0", etaMin)
	}
	o, err := schedOptions("CosineAnnealing", PerStep, opts)
	if err != nil {
		p = append(p, err)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return &CosineAnnealing{base: baseLR, etaMin: etaMin, tMax: int64(tMax), every: o.every}, nil
}

// LRAt is the learning rate after t calls of Step.
func (s *CosineAnnealing) LRAt(t int64) float64 {
	// The explicit conversion keeps the compiler from fusing into an FMA, so
	// the rate is the same on every architecture.
	return s.etaMin + float64((s.base-s.etaMin)*(1+math.Cos(math.Pi*float64(t)/float64(s.tMax)))/2)
}

func (s *CosineAnnealing) Interval() Interval  { return s.every }
func (s *CosineAnnealing) Start(opt Optimizer) { opt.SetLR(s.LRAt(s.count)) }
func (s *CosineAnnealing) Step(opt Optimizer, _ float64) {
	s.count++
	opt.SetLR(s.LRAt(s.count))
}
func (s *CosineAnnealing) State() map[string]float64 {
	return map[string]float64{"count": float64(s.count)}
}
func (s *CosineAnnealing) LoadState(m map[string]float64) error {
	c, err := loadCount("CosineAnnealing", m, "count")
	if err != nil {
		return err
	}
	s.count = c
	return nil
}

// LinearWarmup raises the learning rate linearly over warmupSteps
// intervals, lr(t) = baseLR * (t+1)/warmupSteps for t < warmupSteps, so the
// first step uses baseLR/warmupSteps and step warmupSteps-1 uses baseLR. Then
// it hands over to after (started at that point, so its own t counts from
// 0), or holds baseLR when after is nil. This is torch's
// SequentialLR([LinearLR(start_factor=1/W, total_iters=W-1), after],
// milestones=[W]).
type LinearWarmup struct {
	base   float64
	warmup int64
	after  Scheduler
	count  int64
	every  Interval
}

var (
	_ Scheduler = (*LinearWarmup)(nil)
	_ Starter   = (*LinearWarmup)(nil)
)

// NewLinearWarmup returns a warm-up of warmupSteps intervals followed by
// after (may be nil). It is called at after's interval, or PerStep.
func NewLinearWarmup(baseLR float64, warmupSteps int, after Scheduler, opts ...SchedOption) (*LinearWarmup, error) {
	var p problems
	if !finite(baseLR) || baseLR <= 0 {
		p.addf("LinearWarmup baseLR is %v: use the optimizer's peak learning rate, > 0", baseLR)
	}
	if warmupSteps < 1 {
		p.addf("LinearWarmup warmupSteps is %d: use 1 or more", warmupSteps)
	}
	def := PerStep
	if after != nil {
		def = after.Interval()
	}
	o, err := schedOptions("LinearWarmup", def, opts)
	if err != nil {
		p = append(p, err)
	}
	if after != nil && after.Interval() != o.every {
		p.addf("LinearWarmup runs per %v but the scheduler after it runs per %v: give both the same interval (optim.Every(optim.%s) to both); the trainer takes one scheduler from ConfigureOptimizers, so two intervals cannot run side by side", o.every, after.Interval(), intervalName(after.Interval()))
	}
	if _, ok := after.(*ReduceOnPlateau); ok {
		p.addf("LinearWarmup cannot hand over to ReduceOnPlateau, which needs a metric the warm-up does not see, and the trainer takes one scheduler from ConfigureOptimizers: use one of the two (ReduceOnPlateau alone starts at the optimizer's rate), or a warm-up followed by StepLR or CosineAnnealing")
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return &LinearWarmup{base: baseLR, warmup: int64(warmupSteps), after: after, every: o.every}, nil
}

func (s *LinearWarmup) Interval() Interval { return s.every }

func (s *LinearWarmup) Start(opt Optimizer) {
	if s.count < s.warmup {
		opt.SetLR(s.base * float64(s.count+1) / float64(s.warmup))
		return
	}
	if st, ok := s.after.(Starter); ok {
		st.Start(opt)
		return
	}
	if s.after == nil || s.count == s.warmup {
		opt.SetLR(s.base)
	}
}

func (s *LinearWarmup) Step(opt Optimizer, metric float64) {
	s.count++
	switch {
	case s.count <= s.warmup:
		s.Start(opt) // warm-up value, or the start of after
	case s.after != nil:
		s.after.Step(opt, metric)
	default:
		opt.SetLR(s.base)
	}
}

// State holds "count" and after's keys prefixed with "after.".
func (s *LinearWarmup) State() map[string]float64 {
	m := map[string]float64{"count": float64(s.count)}
	if s.after != nil {
		for k, v := range s.after.State() {
			m["after."+k] = v
		}
	}
	return m
}

func (s *LinearWarmup) LoadState(m map[string]float64) error {
	c, err := loadCount("LinearWarmup", m, "count")
	if err != nil {
		return err
	}
	if s.after != nil {
		sub := map[string]float64{}
		for k, v := range m {
			if rest, ok := strings.CutPrefix(k, "after."); ok {
				sub[rest] = v
			}
		}
		if err := s.after.LoadState(sub); err != nil {
			return fmt.Errorf("LinearWarmup.LoadState: after: %w", err)
		}
	}
	s.count = c
	return nil
}

// intervalName is iv's constant's name, for messages that tell what to
// write.
func intervalName(iv Interval) string {
	if iv == PerEpoch {
		return "PerEpoch"
	}
	return "PerStep"
}
