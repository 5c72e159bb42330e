package trainer

import (
	"context"
	"fmt"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
)

// dispatch.go is the only place that calls hooks of modules and callbacks.
// Each call opens a profiler span named after the hook and wraps any error
// with it, as in "callbacks/ModelCheckpoint.OnValidationEnd: write: no space".

func (t *Trainer) span(name string) func() {
	sp := t.cfg.Profiler.Start(name)
	return sp.End
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

// callbackHook calls hook on every callback. Checkpoints that callbacks ask
// for during the hook are written after the last callback has run it, so
// every callback's state in the file is the state after this hook.
func (t *Trainer) callbackHook(ctx context.Context, hook string, call func(cb Callback) (bool, error)) error {
	var stop error
	t.saves, t.hooking = t.saves[:0], true
	defer func() { t.hooking = false }()
	for _, cb := range t.cfg.Callbacks {
		end := t.span("callbacks/" + cb.Name() + "." + hook)
		t.hookOwner = cb.Name()
		_, err := call(cb)
		end()
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
	for _, s := range t.saves {
		if err := t.writeCheckpoint(ctx, s.path); err != nil {
			return wrap("callbacks/"+s.owner, hook, err)
		}
	}
	return stop
}

func (t *Trainer) onFitStart(ctx context.Context, m module.Module) error {
	if h, ok := m.(module.FitStarter); ok {
		end := t.span("module.OnFitStart")
		err := h.OnFitStart(ctx)
		end()
		if err := wrap("module", "OnFitStart", err); err != nil {
			return err
		}
	}
	return t.callbackHook(ctx, "OnFitStart", func(cb Callback) (bool, error) {
		if h, ok := cb.(FitStartHook); ok {
			return true, h.OnFitStart(ctx, &t.state)
		}
		return false, nil
	})
}

func (t *Trainer) onFitEnd(ctx context.Context, m module.Module) error {
	if h, ok := m.(module.FitEnder); ok {
		end := t.span("module.OnFitEnd")
		err := h.OnFitEnd(ctx)
		end()
		if err := wrap("module", "OnFitEnd", err); err != nil {
			return err
		}
	}
	return t.callbackHook(ctx, "OnFitEnd", func(cb Callback) (bool, error) {
		if h, ok := cb.(FitEndHook); ok {
			return true, h.OnFitEnd(ctx, &t.state)
		}
		return false, nil
	})
}

func (t *Trainer) onTrainEpochStart(ctx context.Context, m module.Module, epoch int) error {
	if h, ok := m.(module.TrainEpochStarter); ok {
		end := t.span("module.OnTrainEpochStart")
		err := h.OnTrainEpochStart(ctx, epoch)
		end()
		if err := wrap("module", "OnTrainEpochStart", err); err != nil {
			return err
		}
	}
	return t.callbackHook(ctx, "OnTrainEpochStart", func(cb Callback) (bool, error) {
		if h, ok := cb.(TrainEpochStartHook); ok {
			return true, h.OnTrainEpochStart(ctx, &t.state)
		}
		return false, nil
	})
}

func (t *Trainer) onTrainEpochEnd(ctx context.Context, m module.Module, epoch int) error {
	if h, ok := m.(module.TrainEpochEnder); ok {
		end := t.span("module.OnTrainEpochEnd")
		err := h.OnTrainEpochEnd(ctx, epoch)
		end()
		if err := wrap("module", "OnTrainEpochEnd", err); err != nil {
			return err
		}
	}
	return t.callbackHook(ctx, "OnTrainEpochEnd", func(cb Callback) (bool, error) {
		if h, ok := cb.(TrainEpochEndHook); ok {
			return true, h.OnTrainEpochEnd(ctx, &t.state)
		}
		return false, nil
	})
}

func (t *Trainer) onTrainBatchStart(ctx context.Context, m module.Module, b *data.Batch, idx int) error {
	if h, ok := m.(module.TrainBatchStarter); ok {
		end := t.span("module.OnTrainBatchStart")
		err := h.OnTrainBatchStart(ctx, b, idx)
		end()
		return wrap("module", "OnTrainBatchStart", err)
	}
	return nil
}

func (t *Trainer) onTrainBatchEnd(ctx context.Context, m module.Module, b *data.Batch, idx int) error {
	if h, ok := m.(module.TrainBatchEnder); ok {
		end := t.span("module.OnTrainBatchEnd")
		err := h.OnTrainBatchEnd(ctx, b, idx)
		end()
		if err := wrap("module", "OnTrainBatchEnd", err); err != nil {
			return err
		}
	}
	if len(t.cfg.Callbacks) == 0 {
		return nil
	}
	return t.callbackHook(ctx, "OnTrainBatchEnd", func(cb Callback) (bool, error) {
		if h, ok := cb.(TrainBatchEndHook); ok {
			return true, h.OnTrainBatchEnd(ctx, &t.state)
		}
		return false, nil
	})
}

func (t *Trainer) onValidationEnd(ctx context.Context, m module.Module, epoch int) error {
	if h, ok := m.(module.ValidationEpochEnder); ok {
		end := t.span("module.OnValidationEpochEnd")
		err := h.OnValidationEpochEnd(ctx, epoch)
		end()
		if err := wrap("module", "OnValidationEpochEnd", err); err != nil {
			return err
		}
	}
	return t.callbackHook(ctx, "OnValidationEnd", func(cb Callback) (bool, error) {
		if h, ok := cb.(ValidationEndHook); ok {
			return true, h.OnValidationEnd(ctx, &t.state)
		}
		return false, nil
	})
}

func (t *Trainer) onTestEnd(ctx context.Context) error {
	return t.callbackHook(ctx, "OnTestEnd", func(cb Callback) (bool, error) {
		if h, ok := cb.(TestEndHook); ok {
			return true, h.OnTestEnd(ctx, &t.state)
		}
		return false, nil
	})
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
	for _, l := range t.cfg.Loggers {
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
	for _, l := range t.cfg.Loggers {
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
	for _, l := range t.cfg.Loggers {
		if err := l.Finalize(status); err != nil && first == nil {
			first = fmt.Errorf("loggers/%s.Finalize: %w", l.Name(), err)
		}
	}
	return first
}
