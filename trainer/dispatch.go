package trainer

import (
	"context"
	"fmt"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/panics"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy"
)

// dispatch.go is the only place that calls hooks of modules and callbacks.
// Each call opens a profiler span named after the hook and wraps any error
// with it, as in "callbacks/ModelCheckpoint.OnValidationEnd: write: no space".

func (t *Trainer) span(name string) func() {
	sp := t.cfg.Profiler.Start(name)
	return sp.End
}

// flushProfiler has every rank write its profiler's files and wait for the
// others, so that rank 0's report can gather them.
func (t *Trainer) flushProfiler(ctx context.Context) error {
	f, ok := t.cfg.Profiler.(profiler.Flusher)
	if !ok {
		return nil
	}
	if err := f.Flush(); err != nil {
		return fmt.Errorf("profiler flush: %w", err)
	}
	if t.strat.Info().WorldSize > 1 {
		if err := strategy.Barrier(ctx, t.strat); err != nil {
			return fmt.Errorf("profiler flush: wait for the other ranks: %w", err)
		}
	}
	return nil
}

// guarded calls a hook of the user's code; a panic in it becomes an error
// carrying the panic value and the user's frames, on the rank it happened.
func guarded(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panics.Recovered(r)
		}
	}()
	return f()
}

func wrap(owner, hook string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := isStop(err); ok {
		return err
	}
	return fmt.Errorf("%s.%s: %w", owner, hook, err)
}

// moduleHook calls one hook of the user's module in a profiler span (its
// name, a constant, so that nothing is built per call) and wraps its error
// with the hook's name.
func (t *Trainer) moduleHook(span, hook string, call func() error) error {
	end := t.span(span)
	err := guarded(call)
	end()
	return wrap("module", hook, err)
}

// callHook calls hook on every callback implementing H, each in a profiler
// span named after it (the name is built only when a profiler is on).
// Checkpoints that callbacks ask for during the hook are written after the
// last callback has run it, so every callback's state in the file is the
// state after this hook.
func callHook[H any](t *Trainer, ctx context.Context, hook string, call func(h H, s *State) error) error {
	var stop error
	view := t.state.view()
	t.saves, t.hooking = t.saves[:0], true
	defer func() { t.hooking = false }()
	_, nop := t.cfg.Profiler.(profiler.Nop)
	for _, cb := range t.cfg.Callbacks {
		h, ok := cb.(H)
		if !ok {
			continue
		}
		var sp profiler.Span
		if !nop {
			sp = t.cfg.Profiler.Start("callbacks/" + cb.Name() + "." + hook)
		}
		t.hookOwner = cb.Name()
		t.hookView = view // each callback its own copy, in one reused place
		err := guarded(func() error { return call(h, &t.hookView) })
		sp.End()
		if err == nil {
			continue
		}
		if err = wrap("callbacks/"+cb.Name(), hook, err); err != nil {
			if _, ok := isStop(err); ok {
				if stop == nil {
					stop = err
				}
				continue
			}
			return err
		}
	}
	t.hooking = false
	if len(t.saves) > 0 {
		paths := make([]string, len(t.saves))
		for i, s := range t.saves {
			paths[i] = s.path
		}
		if err := t.writeCheckpoint(ctx, paths...); err != nil {
			return wrap("callbacks/"+t.saves[0].owner, hook, err)
		}
	}
	return stop
}

func (t *Trainer) onFitStart(ctx context.Context, m module.Module) error {
	if h, ok := m.(module.FitStarter); ok {
		if err := t.moduleHook("module.OnFitStart", "OnFitStart", func() error { return h.OnFitStart(ctx) }); err != nil {
			return err
		}
	}
	return callHook(t, ctx, "OnFitStart", func(h FitStartHook, s *State) error { return h.OnFitStart(ctx, s) })
}

func (t *Trainer) onFitEnd(ctx context.Context, m module.Module) error {
	if h, ok := m.(module.FitEnder); ok {
		if err := t.moduleHook("module.OnFitEnd", "OnFitEnd", func() error { return h.OnFitEnd(ctx) }); err != nil {
			return err
		}
	}
	return callHook(t, ctx, "OnFitEnd", func(h FitEndHook, s *State) error { return h.OnFitEnd(ctx, s) })
}

func (t *Trainer) onTrainEpochStart(ctx context.Context, m module.Module, epoch int) error {
	if h, ok := m.(module.TrainEpochStarter); ok {
		if err := t.moduleHook("module.OnTrainEpochStart", "OnTrainEpochStart", func() error { return h.OnTrainEpochStart(ctx, epoch) }); err != nil {
			return err
		}
	}
	return callHook(t, ctx, "OnTrainEpochStart", func(h TrainEpochStartHook, s *State) error { return h.OnTrainEpochStart(ctx, s) })
}

func (t *Trainer) onTrainEpochEnd(ctx context.Context, m module.Module, epoch int) error {
	if h, ok := m.(module.TrainEpochEnder); ok {
		if err := t.moduleHook("module.OnTrainEpochEnd", "OnTrainEpochEnd", func() error { return h.OnTrainEpochEnd(ctx, epoch) }); err != nil {
			return err
		}
	}
	return callHook(t, ctx, "OnTrainEpochEnd", func(h TrainEpochEndHook, s *State) error { return h.OnTrainEpochEnd(ctx, s) })
}

func (t *Trainer) onTrainBatchStart(ctx context.Context, m module.Module, b *data.Batch, idx int) error {
	if h, ok := m.(module.TrainBatchStarter); ok {
		return t.moduleHook("module.OnTrainBatchStart", "OnTrainBatchStart", func() error { return h.OnTrainBatchStart(ctx, b, idx) })
	}
	return nil
}

func (t *Trainer) onTrainBatchEnd(ctx context.Context, m module.Module, b *data.Batch, idx int) error {
	if h, ok := m.(module.TrainBatchEnder); ok {
		if err := t.moduleHook("module.OnTrainBatchEnd", "OnTrainBatchEnd", func() error { return h.OnTrainBatchEnd(ctx, b, idx) }); err != nil {
			return err
		}
	}
	if len(t.cfg.Callbacks) == 0 {
		return nil
	}
	return callHook(t, ctx, "OnTrainBatchEnd", func(h TrainBatchEndHook, s *State) error { return h.OnTrainBatchEnd(ctx, s) })
}

func (t *Trainer) onBeforeBackward(ctx context.Context, m module.Module, loss float64) error {
	if h, ok := m.(module.BeforeBackwarder); ok {
		if err := t.moduleHook("module.OnBeforeBackward", "OnBeforeBackward", func() error { return h.OnBeforeBackward(ctx, loss) }); err != nil {
			return err
		}
	}
	return t.midStep("OnBeforeBackward", func() error {
		return callHook(t, ctx, "OnBeforeBackward", func(h BeforeBackwardHook, s *State) error { return h.OnBeforeBackward(ctx, s, loss) })
	})
}

func (t *Trainer) onBeforeOptimizerStep(ctx context.Context, m module.Module) error {
	if h, ok := m.(module.BeforeOptimizerStepper); ok {
		if err := t.moduleHook("module.OnBeforeOptimizerStep", "OnBeforeOptimizerStep", func() error { return h.OnBeforeOptimizerStep(ctx, t.state.GradNorm) }); err != nil {
			return err
		}
	}
	return t.midStep("OnBeforeOptimizerStep", func() error {
		return callHook(t, ctx, "OnBeforeOptimizerStep", func(h BeforeOptimizerStepHook, s *State) error { return h.OnBeforeOptimizerStep(ctx, s) })
	})
}

func (t *Trainer) onAfterOptimizerStep(ctx context.Context, m module.Module) error {
	if h, ok := m.(module.AfterOptimizerStepper); ok {
		if err := t.moduleHook("module.OnAfterOptimizerStep", "OnAfterOptimizerStep", func() error { return h.OnAfterOptimizerStep(ctx, t.state.GlobalStep) }); err != nil {
			return err
		}
	}
	return t.midStep("OnAfterOptimizerStep", func() error {
		return callHook(t, ctx, "OnAfterOptimizerStep", func(h AfterOptimizerStepHook, s *State) error { return h.OnAfterOptimizerStep(ctx, s) })
	})
}

// midStep runs the callbacks of a per-step hook with checkpoints refused:
// in the middle of a step the weights and the loop position disagree, so
// such a checkpoint would not resume where the run stood.
func (t *Trainer) midStep(hook string, call func() error) error {
	save := t.state.save
	t.state.save = func(context.Context, string) error {
		return fmt.Errorf("a checkpoint cannot be saved in %s, in the middle of a training step: save in OnTrainBatchEnd", hook)
	}
	defer func() { t.state.save = save }()
	return call()
}

// stepHooks reports which of the per-step hooks m or a callback
// implements, so that the loop skips the others at no cost.
func (t *Trainer) stepHooks(m module.Module) (beforeBackward, beforeStep, afterStep bool) {
	_, beforeBackward = m.(module.BeforeBackwarder)
	_, beforeStep = m.(module.BeforeOptimizerStepper)
	_, afterStep = m.(module.AfterOptimizerStepper)
	for _, cb := range t.cfg.Callbacks {
		_, bb := cb.(BeforeBackwardHook)
		_, bs := cb.(BeforeOptimizerStepHook)
		_, as := cb.(AfterOptimizerStepHook)
		beforeBackward, beforeStep, afterStep = beforeBackward || bb, beforeStep || bs, afterStep || as
	}
	return
}

// stopsAtStepEnd reports whether m or a callback may return Stop from a
// hook that runs after the step's gradients are sent (StepEndStopper):
// then the ranks agree on stopping in an all-reduce after each batch.
func (t *Trainer) stopsAtStepEnd(m module.Module) bool {
	hooked := func(v any) bool {
		if s, ok := v.(StepEndStopper); ok {
			return s.StopsAtStepEnd()
		}
		return true
	}
	_, be := m.(module.TrainBatchEnder)
	_, bs := m.(module.BeforeOptimizerStepper)
	_, as := m.(module.AfterOptimizerStepper)
	if (be || bs || as) && hooked(m) {
		return true
	}
	for _, cb := range t.cfg.Callbacks {
		_, be := cb.(TrainBatchEndHook)
		_, bs := cb.(BeforeOptimizerStepHook)
		_, as := cb.(AfterOptimizerStepHook)
		if (be || bs || as) && hooked(cb) {
			return true
		}
	}
	return false
}

func (t *Trainer) onValidationEnd(ctx context.Context, m module.Module, epoch int) error {
	if h, ok := m.(module.ValidationEpochEnder); ok {
		if err := t.moduleHook("module.OnValidationEpochEnd", "OnValidationEpochEnd", func() error { return h.OnValidationEpochEnd(ctx, epoch) }); err != nil {
			return err
		}
	}
	t.state.inValEnd = true
	defer func() { t.state.inValEnd = false }()
	return callHook(t, ctx, "OnValidationEnd", func(h ValidationEndHook, s *State) error { return h.OnValidationEnd(ctx, s) })
}

func (t *Trainer) onTestEnd(ctx context.Context) error {
	return callHook(t, ctx, "OnTestEnd", func(h TestEndHook, s *State) error { return h.OnTestEnd(ctx, s) })
}

func (t *Trainer) logMetrics(step int, m map[string]float64) error {
	if !t.state.IsGlobalZero || len(m) == 0 {
		return nil
	}
	if step != t.logStep {
		t.logStep, t.logRows = step, 0
	}
	if t.logRows >= 0 {
		t.logRows++
	}
	for _, l := range t.loggers {
		end := t.span("loggers/" + l.Name() + ".LogMetrics")
		err := guarded(func() error { return l.LogMetrics(step, m) })
		end()
		if err != nil {
			return fmt.Errorf("loggers/%s.LogMetrics: %w", l.Name(), err)
		}
	}
	return nil
}

// resumeLoggers tells the loggers that can forget (Resumer) the global
// step training goes on from.
func (t *Trainer) resumeLoggers() error {
	if !t.state.IsGlobalZero {
		return nil
	}
	for _, l := range t.loggers {
		if r, ok := l.(RowResumer); ok && t.logRows >= 0 {
			if err := guarded(func() error { return r.ResumeAtRow(t.state.GlobalStep, t.logRows) }); err != nil {
				return fmt.Errorf("loggers/%s.ResumeAtRow: %w", l.Name(), err)
			}
		} else if r, ok := l.(Resumer); ok {
			if err := guarded(func() error { return r.ResumeAt(t.state.GlobalStep) }); err != nil {
				return fmt.Errorf("loggers/%s.ResumeAt: %w", l.Name(), err)
			}
		}
	}
	return nil
}

func (t *Trainer) logHyperparams(h map[string]any) error {
	if !t.state.IsGlobalZero {
		return nil
	}
	for _, l := range t.loggers {
		if err := guarded(func() error { return l.LogHyperparams(h) }); err != nil {
			return fmt.Errorf("loggers/%s.LogHyperparams: %w", l.Name(), err)
		}
	}
	return nil
}

func (t *Trainer) finalizeLoggers(status string) error {
	if !t.state.IsGlobalZero {
		return nil
	}
	var first error
	for _, l := range t.loggers {
		if err := guarded(func() error { return l.Finalize(status) }); err != nil && first == nil {
			first = fmt.Errorf("loggers/%s.Finalize: %w", l.Name(), err)
		}
	}
	return first
}
