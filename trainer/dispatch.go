package trainer

import (
	"context"
	"encoding/json"
	"errors"
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

// hook calls a hook on the callbacks implementing H, in Callbacks' order,
// then on the module (mod, nil when it does not implement the hook), as
// Lightning calls callbacks before the LightningModule. A Stop from a
// callback lets the others and the module run, and is returned after
// them; an error returns at once. span is the module's profiler span, a
// constant.
func hook[H any](t *Trainer, ctx context.Context, name, span string, mod func() error, call func(h H, s *State) error) error {
	err := callHook(t, ctx, name, call)
	if err != nil {
		if _, ok := isStop(err); !ok {
			return err
		}
	}
	if mod != nil {
		if merr := t.moduleHook(span, name, mod); merr != nil {
			return merr
		}
	}
	return err
}

// modHook is the call of m's hook of interface M, or nil when m does not
// implement it.
func modHook[M any](m module.Module, call func(h M) error) func() error {
	h, ok := m.(M)
	if !ok {
		return nil
	}
	return func() error { return call(h) }
}

// hookSet says which per-batch hooks the callbacks or the module of a call
// implement, found once per call so that the loops skip the others at no
// cost (indexed by module.Mode; Train's are the training batch's).
type hookSet struct {
	batchStart, batchEnd [module.Predict + 1]bool
}

// hooksOf finds the per-batch hooks of the callbacks and of m.
func (t *Trainer) hooksOf(m module.Module) hookSet {
	var h hookSet
	has := func(x any) [module.Predict + 1][2]bool {
		var r [module.Predict + 1][2]bool
		_, r[module.Train][0] = x.(TrainBatchStartHook)
		_, r[module.Train][1] = x.(TrainBatchEndHook)
		_, r[module.Validate][0] = x.(ValidationBatchStartHook)
		_, r[module.Validate][1] = x.(ValidationBatchEndHook)
		_, r[module.Test][0] = x.(TestBatchStartHook)
		_, r[module.Test][1] = x.(TestBatchEndHook)
		_, r[module.Predict][0] = x.(PredictBatchStartHook)
		_, r[module.Predict][1] = x.(PredictBatchEndHook)
		return r
	}
	add := func(r [module.Predict + 1][2]bool) {
		for i := range r {
			h.batchStart[i] = h.batchStart[i] || r[i][0]
			h.batchEnd[i] = h.batchEnd[i] || r[i][1]
		}
	}
	for _, cb := range t.cfg.Callbacks {
		add(has(cb))
	}
	var r [module.Predict + 1][2]bool
	_, r[module.Train][0] = m.(module.TrainBatchStarter)
	_, r[module.Train][1] = m.(module.TrainBatchEnder)
	_, r[module.Validate][0] = m.(module.ValidationBatchStarter)
	_, r[module.Validate][1] = m.(module.ValidationBatchEnder)
	_, r[module.Test][0] = m.(module.TestBatchStarter)
	_, r[module.Test][1] = m.(module.TestBatchEnder)
	_, r[module.Predict][0] = m.(module.PredictBatchStarter)
	_, r[module.Predict][1] = m.(module.PredictBatchEnder)
	add(r)
	return h
}

func (t *Trainer) onFitStart(ctx context.Context, m module.Module) error {
	return hook(t, ctx, "OnFitStart", "module.OnFitStart", modHook(m, func(h module.FitStarter) error { return h.OnFitStart(ctx) }),
		func(h FitStartHook, s *State) error { return h.OnFitStart(ctx, s) })
}

func (t *Trainer) onFitEnd(ctx context.Context, m module.Module) error {
	return hook(t, ctx, "OnFitEnd", "module.OnFitEnd", modHook(m, func(h module.FitEnder) error { return h.OnFitEnd(ctx) }),
		func(h FitEndHook, s *State) error { return h.OnFitEnd(ctx, s) })
}

func (t *Trainer) onTrainStart(ctx context.Context, m module.Module) error {
	return hook(t, ctx, "OnTrainStart", "module.OnTrainStart", modHook(m, func(h module.TrainStarter) error { return h.OnTrainStart(ctx) }),
		func(h TrainStartHook, s *State) error { return h.OnTrainStart(ctx, s) })
}

// trainEnd runs the train-end hooks when training ended (err nil) or a
// hook stopped it (err a Stop, returned unless the hooks fail); a Stop
// they ask for comes too late to matter. The ranks then agree on how the
// hooks went and on a signal or a cancel that came since they last agreed
// on stopping (agreeEnd): such a stop saves the interrupt checkpoint, at
// the end of training, and returns the *InterruptedError.
func (t *Trainer) trainEnd(ctx context.Context, m module.Module, err error) error {
	if err != nil {
		if _, ok := isStop(err); !ok {
			return err
		}
	}
	hctx := t.endHookCtx(ctx)
	herr := hook(t, hctx, "OnTrainEnd", "module.OnTrainEnd", modHook(m, func(h module.TrainEnder) error { return h.OnTrainEnd(hctx) }),
		func(h TrainEndHook, s *State) error { return h.OnTrainEnd(hctx, s) })
	_, fatal := splitStop(herr)
	stops := allStops
	if t.pos.midWindow {
		stops = noStops
	}
	if aerr := t.agreeEnd(ctx, fatal, "OnTrainEnd", stops); aerr != nil {
		return aerr
	}
	return err
}

// endHookCtx is the context of the hooks that end a training or a Fit
// (OnTrainEnd, OnFitEnd, Teardown): the caller's, cancellation included,
// also in a job of several ranks, whose loop runs without it (fitCtx), so
// that a hook that waits on it (a logger's flush) returns once the caller
// cancels. Its ranks then agree on how the hooks went (agreeEnd).
func (t *Trainer) endHookCtx(ctx context.Context) context.Context {
	if t.fitCtx != nil {
		return t.fitCtx
	}
	return ctx
}

func (t *Trainer) onTrainEpochStart(ctx context.Context, m module.Module, epoch int) error {
	return hook(t, ctx, "OnTrainEpochStart", "module.OnTrainEpochStart", modHook(m, func(h module.TrainEpochStarter) error { return h.OnTrainEpochStart(ctx, epoch) }),
		func(h TrainEpochStartHook, s *State) error { return h.OnTrainEpochStart(ctx, s) })
}

func (t *Trainer) onTrainEpochEnd(ctx context.Context, m module.Module, epoch int) error {
	return hook(t, ctx, "OnTrainEpochEnd", "module.OnTrainEpochEnd", modHook(m, func(h module.TrainEpochEnder) error { return h.OnTrainEpochEnd(ctx, epoch) }),
		func(h TrainEpochEndHook, s *State) error { return h.OnTrainEpochEnd(ctx, s) })
}

func (t *Trainer) onTrainBatchStart(ctx context.Context, m module.Module, b *data.Batch, idx int) error {
	if !t.hooks.batchStart[module.Train] {
		return nil
	}
	return hook(t, ctx, "OnTrainBatchStart", "module.OnTrainBatchStart", modHook(m, func(h module.TrainBatchStarter) error { return h.OnTrainBatchStart(ctx, b, idx) }),
		func(h TrainBatchStartHook, s *State) error { return h.OnTrainBatchStart(ctx, s) })
}

// batchStart runs the hooks before training batch bi. A Stop they ask for
// lets the batch run and takes effect at its end, agreed by the ranks as
// one from a per-step hook.
func (f *fitRun) batchStart(ctx context.Context, b *data.Batch, bi int) error {
	stop, err := splitStop(f.t.onTrainBatchStart(ctx, f.m, b, bi))
	if stop != nil && f.hookStop == nil {
		f.hookStop = stop
	}
	return err
}

func (t *Trainer) onTrainBatchEnd(ctx context.Context, m module.Module, b *data.Batch, idx int) error {
	if !t.hooks.batchEnd[module.Train] {
		return nil
	}
	return hook(t, ctx, "OnTrainBatchEnd", "module.OnTrainBatchEnd", modHook(m, func(h module.TrainBatchEnder) error { return h.OnTrainBatchEnd(ctx, b, idx) }),
		func(h TrainBatchEndHook, s *State) error { return h.OnTrainBatchEnd(ctx, s) })
}

func (t *Trainer) onBeforeBackward(ctx context.Context, m module.Module, loss float64) error {
	return t.midStep("OnBeforeBackward", func() error {
		return hook(t, ctx, "OnBeforeBackward", "module.OnBeforeBackward", modHook(m, func(h module.BeforeBackwarder) error { return h.OnBeforeBackward(ctx, loss) }),
			func(h BeforeBackwardHook, s *State) error { return h.OnBeforeBackward(ctx, s, loss) })
	})
}

func (t *Trainer) onBeforeOptimizerStep(ctx context.Context, m module.Module) error {
	return t.midStep("OnBeforeOptimizerStep", func() error {
		return hook(t, ctx, "OnBeforeOptimizerStep", "module.OnBeforeOptimizerStep", modHook(m, func(h module.BeforeOptimizerStepper) error { return h.OnBeforeOptimizerStep(ctx, t.state.GradNorm) }),
			func(h BeforeOptimizerStepHook, s *State) error { return h.OnBeforeOptimizerStep(ctx, s) })
	})
}

func (t *Trainer) onAfterOptimizerStep(ctx context.Context, m module.Module) error {
	return t.midStep("OnAfterOptimizerStep", func() error {
		return hook(t, ctx, "OnAfterOptimizerStep", "module.OnAfterOptimizerStep", modHook(m, func(h module.AfterOptimizerStepper) error { return h.OnAfterOptimizerStep(ctx, t.state.GlobalStep) }),
			func(h AfterOptimizerStepHook, s *State) error { return h.OnAfterOptimizerStep(ctx, s) })
	})
}

func (t *Trainer) onAfterBackward(ctx context.Context, m module.Module) error {
	return t.midStep("OnAfterBackward", func() error {
		return hook(t, ctx, "OnAfterBackward", "module.OnAfterBackward", modHook(m, func(h module.AfterBackwarder) error { return h.OnAfterBackward(ctx) }),
			func(h AfterBackwardHook, s *State) error { return h.OnAfterBackward(ctx, s) })
	})
}

func (t *Trainer) onBeforeZeroGrad(ctx context.Context, m module.Module) error {
	return t.midStep("OnBeforeZeroGrad", func() error {
		return hook(t, ctx, "OnBeforeZeroGrad", "module.OnBeforeZeroGrad", modHook(m, func(h module.BeforeZeroGrader) error { return h.OnBeforeZeroGrad(ctx) }),
			func(h BeforeZeroGradHook, s *State) error { return h.OnBeforeZeroGrad(ctx, s) })
	})
}

// onSetup runs the Setup hooks of a call of stage; a Stop they ask for
// means nothing there and is dropped.
func (t *Trainer) onSetup(ctx context.Context, m module.Module, stage string) error {
	t.state.Stage = stage
	return t.stopOr(hook(t, ctx, "Setup", "module.Setup", modHook(m, func(h module.SetUpper) error { return h.Setup(ctx, stage) }),
		func(h SetupHook, s *State) error { return h.Setup(ctx, s, stage) }))
}

// onTeardown runs the Teardown hooks at the end of a call of stage.
func (t *Trainer) onTeardown(ctx context.Context, m module.Module, stage string) error {
	return t.stopOr(hook(t, ctx, "Teardown", "module.Teardown", modHook(m, func(h module.TearDowner) error { return h.Teardown(ctx, stage) }),
		func(h TeardownHook, s *State) error { return h.Teardown(ctx, s, stage) }))
}

// moduleCheckpoint is the module's own entry of a checkpoint
// (module.CheckpointSaver), as metadata (nil when it has none). Every rank
// asks its module, as Lightning's dump_checkpoint does; rank 0's is
// written.
func (t *Trainer) moduleCheckpoint(ctx context.Context) (map[string]string, error) {
	h, ok := t.mod.(module.CheckpointSaver)
	if !ok {
		return nil, nil
	}
	var b []byte
	if err := t.moduleHook("module.OnSaveCheckpoint", "OnSaveCheckpoint", func() (err error) {
		b, err = h.OnSaveCheckpoint(ctx)
		return err
	}); err != nil {
		if _, stop := isStop(err); stop {
			err = fmt.Errorf("module.OnSaveCheckpoint: %w: a Stop means nothing there", err)
		}
		return nil, err
	}
	j, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("module.OnSaveCheckpoint: %w", err)
	}
	return map[string]string{keyModule: string(j)}, nil
}

// loadModuleCheckpoint gives the module its entry of checkpoint c
// (module.CheckpointLoader; nil when c holds none).
func (t *Trainer) loadModuleCheckpoint(ctx context.Context, c *checkpoint) error {
	h, ok := t.mod.(module.CheckpointLoader)
	if !ok {
		return nil
	}
	return t.stopOr(t.moduleHook("module.OnLoadCheckpoint", "OnLoadCheckpoint", func() error { return h.OnLoadCheckpoint(ctx, c.module) }))
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
func (t *Trainer) stepHooks(m module.Module) (h stepHookSet) {
	_, h.beforeBackward = m.(module.BeforeBackwarder)
	_, h.beforeStep = m.(module.BeforeOptimizerStepper)
	_, h.afterStep = m.(module.AfterOptimizerStepper)
	_, h.afterBackward = m.(module.AfterBackwarder)
	_, h.zeroGrad = m.(module.BeforeZeroGrader)
	for _, cb := range t.cfg.Callbacks {
		_, bb := cb.(BeforeBackwardHook)
		_, bs := cb.(BeforeOptimizerStepHook)
		_, as := cb.(AfterOptimizerStepHook)
		_, ab := cb.(AfterBackwardHook)
		_, zg := cb.(BeforeZeroGradHook)
		h.beforeBackward, h.beforeStep, h.afterStep = h.beforeBackward || bb, h.beforeStep || bs, h.afterStep || as
		h.afterBackward, h.zeroGrad = h.afterBackward || ab, h.zeroGrad || zg
	}
	return h
}

// stepHookSet says which per-step hooks some module or callback has.
type stepHookSet struct {
	beforeBackward, beforeStep, afterStep, afterBackward, zeroGrad bool
}

// stopsAtStepEnd reports whether m or a callback may return Stop from a
// hook that runs after the step's gradients are sent (StepEndStopper;
// OnAfterBackward runs then at the window's last micro-batch):
// then the ranks agree on stopping in an all-reduce after each batch.
func (t *Trainer) stopsAtStepEnd(m module.Module) (bool, error) {
	hooked := func(owner string, v any) (bool, error) {
		if s, ok := v.(StepEndStopper); ok {
			return ability(owner, "StopsAtStepEnd", s.StopsAtStepEnd)
		}
		return true, nil
	}
	_, be := m.(module.TrainBatchEnder)
	_, bs := m.(module.BeforeOptimizerStepper)
	_, as := m.(module.AfterOptimizerStepper)
	_, ab := m.(module.AfterBackwarder)
	if be || bs || as || ab {
		if yes, err := hooked("module", m); yes || err != nil {
			return yes, err
		}
	}
	for _, cb := range t.cfg.Callbacks {
		_, be := cb.(TrainBatchEndHook)
		_, bs := cb.(BeforeOptimizerStepHook)
		_, as := cb.(AfterOptimizerStepHook)
		_, ab := cb.(AfterBackwardHook)
		if be || bs || as || ab {
			if yes, err := hooked("callbacks/"+cb.Name(), cb); yes || err != nil {
				return yes, err
			}
		}
	}
	return false, nil
}

// ability asks one of the abilities of a callback or the module (owner,
// as "callbacks/ProgressBar" or "module"), a method returning a bool
// (StopsAtStepEnd, DisplaysProgress, WantsLayerShapes, SavesOnValidation):
// it is the user's code, as a hook is, so a panic in it is an error naming
// owner and method, with the user's line, not a crash.
func ability(owner, method string, ask func() bool) (bool, error) {
	var yes bool
	if err := guarded(func() error { yes = ask(); return nil }); err != nil {
		return false, fmt.Errorf("%s.%s: %w", owner, method, err)
	}
	return yes, nil
}

// onEvalStart runs the start and epoch-start hooks of mode's loop.
func (t *Trainer) onEvalStart(ctx context.Context, m module.Module, mode module.Mode) error {
	switch mode {
	case module.Validate:
		epoch := t.state.Epoch
		return inTurn(hook(t, ctx, "OnValidationStart", "module.OnValidationStart", modHook(m, func(h module.ValidationStarter) error { return h.OnValidationStart(ctx) }),
			func(h ValidationStartHook, s *State) error { return h.OnValidationStart(ctx, s) }),
			func() error {
				return hook(t, ctx, "OnValidationEpochStart", "module.OnValidationEpochStart", modHook(m, func(h module.ValidationEpochStarter) error { return h.OnValidationEpochStart(ctx, epoch) }),
					func(h ValidationEpochStartHook, s *State) error { return h.OnValidationEpochStart(ctx, s) })
			})
	case module.Test:
		return inTurn(hook(t, ctx, "OnTestStart", "module.OnTestStart", modHook(m, func(h module.TestStarter) error { return h.OnTestStart(ctx) }),
			func(h TestStartHook, s *State) error { return h.OnTestStart(ctx, s) }),
			func() error {
				return hook(t, ctx, "OnTestEpochStart", "module.OnTestEpochStart", modHook(m, func(h module.TestEpochStarter) error { return h.OnTestEpochStart(ctx) }),
					func(h TestEpochStartHook, s *State) error { return h.OnTestEpochStart(ctx, s) })
			})
	case module.Predict:
		return inTurn(hook(t, ctx, "OnPredictStart", "module.OnPredictStart", modHook(m, func(h module.PredictStarter) error { return h.OnPredictStart(ctx) }),
			func(h PredictStartHook, s *State) error { return h.OnPredictStart(ctx, s) }),
			func() error {
				return hook(t, ctx, "OnPredictEpochStart", "module.OnPredictEpochStart", modHook(m, func(h module.PredictEpochStarter) error { return h.OnPredictEpochStart(ctx) }),
					func(h PredictEpochStartHook, s *State) error { return h.OnPredictEpochStart(ctx, s) })
			})
	}
	return nil
}

// inTurn is the error of a hook (whose error is first) and the one after
// it (next, not run after an error of the first): an error, else the
// first Stop.
func inTurn(first error, next func() error) error {
	if _, fatal := splitStop(first); fatal != nil {
		return fatal
	}
	return firstStop(first, next())
}

// firstStop is the error of two hooks run one after the other (b only
// when a was nil or a Stop): b's error, else the first Stop.
func firstStop(a, b error) error {
	if _, fatal := splitStop(b); fatal != nil {
		return fatal
	}
	if a != nil {
		return a
	}
	return b
}

// onEvalBatchStart runs the hooks before batch b (index idx) of mode's
// loop.
func (t *Trainer) onEvalBatchStart(ctx context.Context, m module.Module, mode module.Mode, b *data.Batch, idx int) error {
	if !t.hooks.batchStart[mode] {
		return nil
	}
	t.state.BatchIdx = idx
	switch mode {
	case module.Validate:
		return hook(t, ctx, "OnValidationBatchStart", "module.OnValidationBatchStart", modHook(m, func(h module.ValidationBatchStarter) error { return h.OnValidationBatchStart(ctx, b, idx) }),
			func(h ValidationBatchStartHook, s *State) error { return h.OnValidationBatchStart(ctx, s) })
	case module.Test:
		return hook(t, ctx, "OnTestBatchStart", "module.OnTestBatchStart", modHook(m, func(h module.TestBatchStarter) error { return h.OnTestBatchStart(ctx, b, idx) }),
			func(h TestBatchStartHook, s *State) error { return h.OnTestBatchStart(ctx, s) })
	case module.Predict:
		return hook(t, ctx, "OnPredictBatchStart", "module.OnPredictBatchStart", modHook(m, func(h module.PredictBatchStarter) error { return h.OnPredictBatchStart(ctx, b, idx) }),
			func(h PredictBatchStartHook, s *State) error { return h.OnPredictBatchStart(ctx, s) })
	}
	return nil
}

// onEvalBatchEnd runs the hooks after batch b (index idx) of mode's loop;
// out is a predict batch's predictions.
func (t *Trainer) onEvalBatchEnd(ctx context.Context, m module.Module, mode module.Mode, b *data.Batch, idx int, out PredictBatch) error {
	if !t.hooks.batchEnd[mode] {
		return nil
	}
	t.state.BatchIdx = idx
	switch mode {
	case module.Validate:
		return hook(t, ctx, "OnValidationBatchEnd", "module.OnValidationBatchEnd", modHook(m, func(h module.ValidationBatchEnder) error { return h.OnValidationBatchEnd(ctx, b, idx) }),
			func(h ValidationBatchEndHook, s *State) error { return h.OnValidationBatchEnd(ctx, s) })
	case module.Test:
		return hook(t, ctx, "OnTestBatchEnd", "module.OnTestBatchEnd", modHook(m, func(h module.TestBatchEnder) error { return h.OnTestBatchEnd(ctx, b, idx) }),
			func(h TestBatchEndHook, s *State) error { return h.OnTestBatchEnd(ctx, s) })
	case module.Predict:
		return hook(t, ctx, "OnPredictBatchEnd", "module.OnPredictBatchEnd", modHook(m, func(h module.PredictBatchEnder) error { return h.OnPredictBatchEnd(ctx, b, idx) }),
			func(h PredictBatchEndHook, s *State) error { return h.OnPredictBatchEnd(ctx, s, out) })
	}
	return nil
}

// onValidationEnd runs the hooks after a validation loop's batches, with
// its metrics in State.Metrics: the epoch-end hooks, then the end hooks.
func (t *Trainer) onValidationEnd(ctx context.Context, m module.Module, epoch int) error {
	t.state.inValEnd = true
	defer func() { t.state.inValEnd = false }()
	return inTurn(hook(t, ctx, "OnValidationEpochEnd", "module.OnValidationEpochEnd", modHook(m, func(h module.ValidationEpochEnder) error { return h.OnValidationEpochEnd(ctx, epoch) }),
		func(h ValidationEpochEndHook, s *State) error { return h.OnValidationEpochEnd(ctx, s) }),
		func() error {
			return hook(t, ctx, "OnValidationEnd", "module.OnValidationEnd", modHook(m, func(h module.ValidationEnder) error { return h.OnValidationEnd(ctx) }),
				func(h ValidationEndHook, s *State) error { return h.OnValidationEnd(ctx, s) })
		})
}

// onTestEnd runs the hooks after the test loop's batches: the epoch-end
// hooks, then the end hooks.
func (t *Trainer) onTestEnd(ctx context.Context, m module.Module) error {
	return inTurn(hook(t, ctx, "OnTestEpochEnd", "module.OnTestEpochEnd", modHook(m, func(h module.TestEpochEnder) error { return h.OnTestEpochEnd(ctx) }),
		func(h TestEpochEndHook, s *State) error { return h.OnTestEpochEnd(ctx, s) }),
		func() error {
			return hook(t, ctx, "OnTestEnd", "module.OnTestEnd", modHook(m, func(h module.TestEnder) error { return h.OnTestEnd(ctx) }),
				func(h TestEndHook, s *State) error { return h.OnTestEnd(ctx, s) })
		})
}

// onPredictEnd runs the hooks after the predict loop's batches.
func (t *Trainer) onPredictEnd(ctx context.Context, m module.Module) error {
	return inTurn(hook(t, ctx, "OnPredictEpochEnd", "module.OnPredictEpochEnd", modHook(m, func(h module.PredictEpochEnder) error { return h.OnPredictEpochEnd(ctx) }),
		func(h PredictEpochEndHook, s *State) error { return h.OnPredictEpochEnd(ctx, s) }),
		func() error {
			return hook(t, ctx, "OnPredictEnd", "module.OnPredictEnd", modHook(m, func(h module.PredictEnder) error { return h.OnPredictEnd(ctx) }),
				func(h PredictEndHook, s *State) error { return h.OnPredictEnd(ctx, s) })
		})
}

func (t *Trainer) onSanityCheckStart(ctx context.Context) error {
	return callHook(t, ctx, "OnSanityCheckStart", func(h SanityCheckStartHook, s *State) error { return h.OnSanityCheckStart(ctx, s) })
}

func (t *Trainer) onSanityCheckEnd(ctx context.Context) error {
	return callHook(t, ctx, "OnSanityCheckEnd", func(h SanityCheckEndHook, s *State) error { return h.OnSanityCheckEnd(ctx, s) })
}

// failed runs the exception hooks for err, the error a Fit, Validate,
// Test or Predict call is about to return (once per call), and returns
// err joined with theirs. ctx may be cancelled or nil: the hooks get one
// that is not.
func (t *Trainer) failed(ctx context.Context, err error) error {
	if err == nil || t.excDone {
		return err
	}
	if _, ok := isStop(err); ok {
		return err
	}
	t.excDone = true
	if ctx == nil {
		ctx = context.Background()
	}
	ctx = context.WithoutCancel(ctx)
	save, rank0 := t.state.save, t.state.rank0
	t.state.save = func(context.Context, string) error {
		return errors.New("a checkpoint cannot be saved in OnException: the weights may be those of a step half done; the run's last checkpoint (and the one saved on an interrupt) stands")
	}
	t.state.rank0 = func(context.Context, float64) (float64, error) {
		return 0, errors.New("Rank0Value cannot be called in OnException: the other ranks may not be failing, and would never join the collective")
	}
	defer func() { t.state.save, t.state.rank0 = save, rank0 }()
	var errs []error
	for _, cb := range t.cfg.Callbacks {
		h, ok := cb.(ExceptionHook)
		if !ok {
			continue
		}
		end := t.span("callbacks/" + cb.Name() + ".OnException")
		t.hookOwner, t.hookView = cb.Name(), t.state.view()
		herr := guarded(func() error { return h.OnException(ctx, &t.hookView, err) })
		end()
		if _, ok := isStop(herr); herr != nil && !ok {
			errs = append(errs, fmt.Errorf("callbacks/%s.OnException: %w", cb.Name(), herr))
		}
	}
	if len(errs) == 0 {
		return err
	}
	return errors.Join(append([]error{err}, errs...)...)
}

func (t *Trainer) logMetrics(step int, m map[string]float64) error {
	return t.logRow(step, m, "")
}

// logRow gives one row to the loggers; an evaluation's (stage "validate"
// or "test") to an EvaluationLogger's LogEvaluation.
func (t *Trainer) logRow(step int, m map[string]float64, stage string) error {
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
		method, log := "LogMetrics", l.LogMetrics
		if el, ok := l.(EvaluationLogger); ok && stage != "" {
			method = "LogEvaluation"
			log = func(step int, m map[string]float64) error { return el.LogEvaluation(step, stage, m) }
		}
		end := t.span("loggers/" + l.Name() + "." + method)
		err := guarded(func() error { return log(step, m) })
		end()
		if err != nil {
			return fmt.Errorf("loggers/%s.%s: %w", l.Name(), method, err)
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
