package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
)

// LRFindConfig configures LRFind (Lightning's Tuner.lr_find). Every zero
// value is Lightning's default.
type LRFindConfig struct {
	// MinLR and MaxLR bound the rates tried. 0: 1e-8 and 1.
	MinLR, MaxLR float64
	// NumTraining is the number of optimizer steps, one rate each. 0: 100.
	NumTraining int
	// Mode is how the rate grows from step to step: "exponential" (the
	// default) or "linear".
	Mode string
	// EarlyStopThreshold stops the search once the smoothed loss exceeds
	// this many times the lowest seen. 0: 4; negative: never.
	EarlyStopThreshold float64
}

// LRFindResult is what an LRFind run saw.
type LRFindResult struct {
	// LRs and Losses hold, for each optimizer step run, the learning rate
	// it used and the training loss smoothed as Lightning does (an
	// exponential average with factor 0.98, bias corrected).
	LRs, Losses []float64
	// Suggestion is the rate where the smoothed loss falls fastest (the
	// steepest descent of the curve, leaving out the first 10 steps, the
	// last, and those after the lowest loss), and 0 when fewer than 2
	// finite losses remain to compare.
	Suggestion float64
	// Stopped says why the search ended before NumTraining steps ("":
	// it ran them all).
	Stopped string
}

// LRFind runs Lightning's learning-rate range test: it trains m on train
// for NumTraining optimizer steps, raising the learning rate from MinLR to
// MaxLR step by step, records the smoothed loss, and suggests the rate at
// which the loss fell fastest. It runs in a trainer of its own built from
// t's Config (no validation, callbacks, loggers or checkpoints; its files
// go into a temporary directory it removes), so t and the weights of a
// later Fit are untouched: Fit initialises m's parameters again. Set the
// suggestion as the module's learning rate (in ConfigureOptimizers), then
// Fit. A ctx cancelled during the search ends it with an error matching
// ctx.Err() (errors.Is), and no result.
//
// As Lightning's, it runs on one device: a Config for several devices,
// nodes or a launched job is an error, since the rate that suits a
// larger global batch differs (find it on one device and scale it with the
// batch, or tune at the job's batch size on one device).
func (t *Trainer) LRFind(ctx context.Context, m module.Module, train *data.Loader, cfg LRFindConfig) (LRFindResult, error) {
	if err := t.notMade("LRFind"); err != nil {
		return LRFindResult{}, err
	}
	if ctx == nil {
		return LRFindResult{}, errors.New("LRFind: the context is nil: pass context.Background() or a context of your own")
	}
	if m == nil || train == nil {
		return LRFindResult{}, errors.New("LRFind: the module and the training loader must not be nil")
	}
	if err := zeroLoader("LRFind", "training loader", train); err != nil {
		return LRFindResult{}, err
	}
	s, err := newLRSweep(cfg)
	if err != nil {
		return LRFindResult{}, fmt.Errorf("LRFind: %w", err)
	}
	c := t.cfg
	if c.StrategyImpl != nil || c.Devices != 1 || c.NumNodes != 1 || (c.Strategy != "auto" && c.Strategy != "single") {
		asked := fmt.Sprintf("%s is %q on %s and %s", c.name("Strategy"), c.Strategy, count(c.Devices, "device"), count(c.NumNodes, "node"))
		if c.StrategyImpl != nil {
			asked = fmt.Sprintf("the trainer has a StrategyImpl (%s)", c.StrategyImpl.Info().Name)
		}
		return LRFindResult{}, fmt.Errorf("LRFind: %s: the search runs on one device, as Lightning's lr_find: call it on a trainer of %s 1 and %s auto or single, then train at scale (the rate that suits a larger global batch differs)", asked, c.name("Devices"), c.name("Strategy"))
	}
	dir, err := os.MkdirTemp("", "fulgur-lrfind-")
	if err != nil {
		return LRFindResult{}, fmt.Errorf("LRFind: %w", err)
	}
	defer os.RemoveAll(dir)
	// Checked above: one device, here, whatever a launcher's variables say.
	c.Strategy = "single"
	c.MaxEpochs, c.MaxSteps, c.MinEpochs, c.MinSteps = 0, s.cfg.NumTraining, 0, 0
	c.FastDevRun, c.ValCheckInterval = 0, 0
	c.Callbacks, c.Loggers = []Callback{s}, nil
	c.DisableCheckpointing, c.DisableLogger, c.DisableSanityCheck = true, true, true
	c.DefaultRootDir, c.LogDir = dir, dir
	c.HandleSignals = Bool(false)
	// A rate too high gives a NaN loss: that ends the search, not the run.
	c.WarnOnNaN = true
	c.Profiler = nil
	tr, err := New(c)
	if err != nil {
		return LRFindResult{}, fmt.Errorf("LRFind: %w", err)
	}
	tr.schedOverride = s
	ferr := tr.Fit(ctx, m, train, nil)
	if ie := (*InterruptedError)(nil); errors.As(ferr, &ie) {
		// Its checkpoint is in dir, removed on return: name none. Signals
		// are not handled here (HandleSignals off), so the context ended it.
		cause := ie.Err
		if cause == nil {
			cause = errors.New("interrupted")
		}
		ferr = fmt.Errorf("the search was stopped by its context after %d of its %d steps (%w): its run is removed and no rate is suggested; run LRFind again", len(s.losses), s.cfg.NumTraining, cause)
	}
	// Torn down whether Fit failed or not: the trainer is LRFind's alone.
	if err := errors.Join(ferr, tr.Teardown(ctx)); err != nil {
		return LRFindResult{}, fmt.Errorf("LRFind: %w", err)
	}
	r := LRFindResult{LRs: s.lrs, Losses: s.losses, Stopped: s.stopped}
	r.Suggestion = suggestLR(r.LRs, r.Losses)
	return r, nil
}

// lrSweep is LRFind's schedule (it sets each step's rate) and its callback
// (it records each step's rate, as the trainer reads it from the optimizer,
// and loss, and stops the run when the loss diverges).
type lrSweep struct {
	cfg       LRFindConfig
	step      int
	lr        float64 // the rate of the step in progress, as the trainer reads it
	avg, best float64
	lrs       []float64
	losses    []float64
	stopped   string
}

func newLRSweep(cfg LRFindConfig) (*lrSweep, error) {
	if cfg.MinLR == 0 {
		cfg.MinLR = 1e-8
	}
	if cfg.MaxLR == 0 {
		cfg.MaxLR = 1
	}
	if cfg.NumTraining == 0 {
		cfg.NumTraining = 100
	}
	if cfg.Mode == "" {
		cfg.Mode = "exponential"
	}
	if cfg.EarlyStopThreshold == 0 {
		cfg.EarlyStopThreshold = 4
	}
	var errs []error
	if !(cfg.MinLR > 0) || !(cfg.MaxLR > cfg.MinLR) || math.IsInf(cfg.MaxLR, 0) {
		errs = append(errs, fmt.Errorf("MinLR %g and MaxLR %g: use 0 < MinLR < MaxLR, finite (0: 1e-8 and 1)", cfg.MinLR, cfg.MaxLR))
	}
	if cfg.NumTraining < 2 {
		errs = append(errs, fmt.Errorf("NumTraining is %d: use 2 or more steps (0: 100)", cfg.NumTraining))
	}
	if cfg.Mode != "exponential" && cfg.Mode != "linear" {
		errs = append(errs, fmt.Errorf("Mode is %q: use \"exponential\" or \"linear\"", cfg.Mode))
	}
	if math.IsNaN(cfg.EarlyStopThreshold) {
		errs = append(errs, errors.New("EarlyStopThreshold is NaN: use a positive number, or a negative one to never stop early (0: 4)"))
	}
	return &lrSweep{cfg: cfg}, errors.Join(errs...)
}

// rate is step i's learning rate.
func (s *lrSweep) rate(i int) float64 {
	f := float64(i) / float64(s.cfg.NumTraining-1)
	if s.cfg.Mode == "linear" {
		return s.cfg.MinLR + f*(s.cfg.MaxLR-s.cfg.MinLR)
	}
	return s.cfg.MinLR * math.Pow(s.cfg.MaxLR/s.cfg.MinLR, f)
}

func (s *lrSweep) Interval() optim.Interval  { return optim.PerStep }
func (s *lrSweep) Start(opt optim.Optimizer) { opt.SetLR(s.rate(0)) }
func (s *lrSweep) Step(opt optim.Optimizer, _ float64) {
	s.step++
	opt.SetLR(s.rate(s.step))
}
func (s *lrSweep) State() map[string]float64          { return map[string]float64{"step": float64(s.step)} }
func (s *lrSweep) LoadState(map[string]float64) error { return nil }

func (s *lrSweep) Name() string { return "LRFind" }

// OnBeforeOptimizerStep notes the rate the step is about to use.
func (s *lrSweep) OnBeforeOptimizerStep(ctx context.Context, st *State) error {
	s.lr = st.LR
	return nil
}

// OnAfterOptimizerStep records the step's rate and smoothed loss, and
// stops the run once the loss is not finite or has diverged.
func (s *lrSweep) OnAfterOptimizerStep(ctx context.Context, st *State) error {
	i := len(s.losses)
	const beta = 0.98
	loss := st.Loss
	s.avg = beta*s.avg + (1-beta)*loss
	smoothed := s.avg / (1 - math.Pow(beta, float64(i+1)))
	s.lrs = append(s.lrs, s.lr)
	s.losses = append(s.losses, smoothed)
	switch {
	case math.IsNaN(loss) || math.IsInf(loss, 0):
		s.stopped = fmt.Sprintf("the loss was %v at learning rate %.3g", loss, s.lr)
	case s.cfg.EarlyStopThreshold > 0 && i > 1 && smoothed > s.cfg.EarlyStopThreshold*s.best:
		s.stopped = fmt.Sprintf("the smoothed loss %.4g passed %g times the lowest, %.4g, at learning rate %.3g", smoothed, s.cfg.EarlyStopThreshold, s.best, s.lr)
	}
	if i == 0 || smoothed < s.best {
		s.best = smoothed
	}
	if s.stopped != "" {
		return Stop("LRFind: %s", s.stopped)
	}
	return nil
}

// suggestLR is the rate at the steepest descent of the smoothed losses
// (central differences), leaving out the first 10 points and the last as
// Lightning does, any that are not finite, and, unlike Lightning, every
// point after the lowest loss: once the loss has diverged its smoothed
// curve can fall again as the average forgets the peak (an MLP with Adam
// on Fashion-MNIST fell faster from 5.2 at rate 0.39 than anywhere before
// its lowest point, at 0.06, and Lightning's rule suggested 0.57). 0 when
// fewer than 2 points remain.
func suggestLR(lrs, losses []float64) float64 {
	const skipBegin, skipEnd = 10, 1
	end := len(losses) - skipEnd
	low := math.Inf(1)
	for i, v := range losses[:max(end, 0)] {
		if v < low {
			low, end = v, i+1
		}
	}
	var x, y []float64
	for i := skipBegin; i < end; i++ {
		if !math.IsNaN(losses[i]) && !math.IsInf(losses[i], 0) {
			x, y = append(x, lrs[i]), append(y, losses[i])
		}
	}
	if len(y) < 2 {
		return 0
	}
	best, at := math.Inf(1), 0
	for i := range y {
		var g float64
		switch i {
		case 0:
			g = y[1] - y[0]
		case len(y) - 1:
			g = y[i] - y[i-1]
		default:
			g = (y[i+1] - y[i-1]) / 2
		}
		if g < best {
			best, at = g, i
		}
	}
	return x[at]
}
