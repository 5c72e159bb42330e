package trainer

import (
	"context"
	"fmt"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/internal/panics"
	"github.com/fulgur-ml/fulgur/module"
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

// callHook calls hook on every callback implementing H, each in a profiler
// span named after it (the name is built only when a profiler is on).
// Checkpoints that callbacks ask for during the hook are written after the
// last callback has run it, so every callback's state in the file is the
// state after this hook.
func callHook[H any](t *Trainer, ctx context.Context, hook string, call func(h H) error) error {
	var stop error
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
		err := guarded(func() error { return call(h) })
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
		end := t.span("module.OnFitStart")
		err := guarded(func() error { return h.OnFitStart(ctx) })
		end()
		if err := wrap("module", "OnFitStart", err); err != nil {
			return err
		}
	}
	return callHook(t, ctx, "OnFitStart", func(h FitStartHook) error { return h.OnFitStart(ctx, &t.state) })
}

func (t *Trainer) onFitEnd(ctx context.Context, m module.Module) error {
	if h, ok := m.(module.FitEnder); ok {
		end := t.span("module.OnFitEnd")
		err := guarded(func() error { return h.OnFitEnd(ctx) })
		end()
		if err := wrap("module", "OnFitEnd", err); err != nil {
			return err
		}
	}
	return callHook(t, ctx, "OnFitEnd", func(h FitEndHook) error { return h.OnFitEnd(ctx, &t.state) })
}

func (t *Trainer) onTrainEpochStart(ctx context.Context, m module.Module, epoch int) error {
	if h, ok := m.(module.TrainEpochStarter); ok {
		end := t.span("module.OnTrainEpochStart")
		err := guarded(func() error { return h.OnTrainEpochStart(ctx, epoch) })
		end()
		if err := wrap("module", "OnTrainEpochStart", err); err != nil {
			return err
		}
	}
	return callHook(t, ctx, "OnTrainEpochStart", func(h TrainEpochStartHook) error { return h.OnTrainEpochStart(ctx, &t.state) })
}

func (t *Trainer) onTrainEpochEnd(ctx context.Context, m module.Module, epoch int) error {
	if h, ok := m.(module.TrainEpochEnder); ok {
		end := t.span("module.OnTrainEpochEnd")
		err := guarded(func() error { return h.OnTrainEpochEnd(ctx, epoch) })
		end()
		if err := wrap("module", "OnTrainEpochEnd", err); err != nil {
			return err
		}
	}
	return callHook(t, ctx, "OnTrainEpochEnd", func(h TrainEpochEndHook) error { return h.OnTrainEpochEnd(ctx, &t.state) })
}

func (t *Trainer) onTrainBatchStart(ctx context.Context, m module.Module, b *data.Batch, idx int) error {
	if h, ok := m.(module.TrainBatchStarter); ok {
		end := t.span("module.OnTrainBatchStart")
		err := guarded(func() error { return h.OnTrainBatchStart(ctx, b, idx) })
		end()
		return wrap("module", "OnTrainBatchStart", err)
	}
	return nil
}

func (t *Trainer) onTrainBatchEnd(ctx context.Context, m module.Module, b *data.Batch, idx int) error {
	if h, ok := m.(module.TrainBatchEnder); ok {
		end := t.span("module.OnTrainBatchEnd")
		err := guarded(func() error { return h.OnTrainBatchEnd(ctx, b, idx) })
		end()
		if err := wrap("module", "OnTrainBatchEnd", err); err != nil {
			return err
		}
	}
	if len(t.cfg.Callbacks) == 0 {
		return nil
	}
	return callHook(t, ctx, "OnTrainBatchEnd", func(h TrainBatchEndHook) error { return h.OnTrainBatchEnd(ctx, &t.state) })
}

func (t *Trainer) onValidationEnd(ctx context.Context, m module.Module, epoch int) error {
	if h, ok := m.(module.ValidationEpochEnder); ok {
		end := t.span("module.OnValidationEpochEnd")
		err := guarded(func() error { return h.OnValidationEpochEnd(ctx, epoch) })
		end()
		if err := wrap("module", "OnValidationEpochEnd", err); err != nil {
			return err
		}
	}
	return callHook(t, ctx, "OnValidationEnd", func(h ValidationEndHook) error { return h.OnValidationEnd(ctx, &t.state) })
}

func (t *Trainer) onTestEnd(ctx context.Context) error {
	return callHook(t, ctx, "OnTestEnd", func(h TestEndHook) error { return h.OnTestEnd(ctx, &t.state) })
}

// accumulation is the number of batches per optimizer step in epoch.
func (t *Trainer) accumulation(epoch int) int {
	n := t.cfg.AccumulateGradBatches
	for _, cb := range t.cfg.Callbacks {
		if h, ok := cb.(AccumulationScheduler); ok {
			if k := h.AccumulateGradBatches(epoch); k > 0 {
				n = k
			}
		}
	}
	return n
}

func (t *Trainer) logMetrics(step int, m map[string]float64) error {
	if !t.state.IsGlobalZero || len(m) == 0 {
		return nil
	}
	for _, l := range t.loggers {
		end := t.span("loggers/" + l.Name() + ".LogMetrics")
		err := l.LogMetrics(step, m)
		end()
		if err != nil {
			return fmt.Errorf("loggers/%s.LogMetrics: %w", l.Name(), err)
		}
	}
	return nil
}

func (t *Trainer) logHyperparams(h map[string]any) error {
	if !t.state.IsGlobalZero {
		return nil
	}
	for _, l := range t.loggers {
		if err := l.LogHyperparams(h); err != nil {
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
		if err := l.Finalize(status); err != nil && first == nil {
			first = fmt.Errorf("loggers/%s.Finalize: %w", l.Name(), err)
		}
	}
	return first
}
