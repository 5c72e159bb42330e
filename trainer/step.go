package trainer

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
)

// trainBatch runs training batch bi of nb: forward and backward, then the
// optimizer step when the batch closes its accumulation window (last).
func (f *fitRun) trainBatch(ctx context.Context, epoch, bi, nb int, b *data.Batch) (metrics []module.Metric, last bool, err error) {
	t := f.t
	micro, last := accumWindow(bi, nb, t.accum)
	t0 := t.cfg.Now()
	loss, metrics, err := f.forwardBackward(ctx, epoch, bi, micro, last, b)
	if err != nil {
		return nil, false, err
	}
	if last {
		if err := f.optimizerStep(ctx, epoch, bi); err != nil {
			return nil, false, err
		}
	}
	f.trainDur += t.cfg.Now().Sub(t0)
	t.stats.TrainSamples += b.Size
	t.progress.batch(bi+1, loss, b.Size, t.state.Metrics, metrics)
	return metrics, last, nil
}

// forwardBackward runs the strategy's forward and backward pass on b (micro
// is its place in the accumulation window, last whether it closes it),
// checks the loss and, with DetectAnomaly, the gradients, and records the
// logged values.
func (f *fitRun) forwardBackward(ctx context.Context, epoch, bi, micro int, last bool, b *data.Batch) (float64, []module.Metric, error) {
	t, cfg := f.t, &f.t.cfg
	sp := cfg.Profiler.Start("forward+backward")
	f.ctx, f.backwardHooked, f.micro = ctx, false, micro
	var ride *strategy.Ride
	if last && f.ride != nil {
		ride, f.ride.Rode, f.sampledStop = f.ride, false, false
	}
	res, err := t.strat.Step(f.stepCtx(ctx), module.Train, b, strategy.TrainOptions{Sync: last, Accumulate: micro > 0, Scale: 1 / float64(t.accum), Key: uint64(epoch)<<32 | uint64(bi), BeforeBackward: f.backwardHook, Ride: ride})
	f.ctx = nil
	sp.End()
	loss, metrics := res.Loss, res.Metrics
	if err != nil {
		return 0, nil, fmt.Errorf("epoch %d batch %d: %w", epoch, bi, err)
	}
	if f.backwardHook != nil && !f.backwardHooked {
		// A strategy that does not call TrainOptions.BeforeBackward: the
		// hooks run after its pass, as they would after a fused one.
		if err := f.backwardHook(loss); err != nil {
			return 0, nil, fmt.Errorf("epoch %d batch %d: %w", epoch, bi, err)
		}
	}
	if f.afterBackward && !last {
		// Inside the window: this process's accumulated gradients, which
		// no collective is writing. The window's last runs the hooks
		// once they are reduced (beforeUpdate).
		if err := f.stepHook(t.onAfterBackward(ctx, f.m)); err != nil {
			return 0, nil, fmt.Errorf("epoch %d batch %d: %w", epoch, bi, err)
		}
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		if !cfg.WarnOnNaN {
			if where := nonFiniteInput(b); where != "" {
				return 0, nil, fmt.Errorf("the loss is %v at epoch %d, batch %d (global step %d): %s: fix the data (the Dataset's Read), or set %s to carry on", loss, epoch, bi, t.state.GlobalStep, where, cfg.name("WarnOnNaN"))
			}
			if t.state.GlobalStep == 0 {
				// No update has been made: the learning rate cannot be the cause.
				return 0, nil, fmt.Errorf("the loss is %v at epoch %d, batch %d (global step 0), before the first optimizer step (from the initial weights and a finite batch): look in TrainingStep for a log, square root or division of zero or a negative number, or set %s to carry on", loss, epoch, bi, cfg.name("WarnOnNaN"))
			}
			return 0, nil, fmt.Errorf("the loss is %v at epoch %d, batch %d (global step %d): lower the learning rate, clip gradients (%s), or set %s to carry on", loss, epoch, bi, t.state.GlobalStep, cfg.name("GradientClipVal"), cfg.name("WarnOnNaN"))
		}
		cfg.Log.Warn().Float64("loss", loss).Int("step", t.state.GlobalStep).Msg("non-finite loss")
	}
	if cfg.DetectAnomaly && last {
		if err := t.checkGrads(epoch, bi); err != nil {
			return 0, nil, err
		}
	}
	t.stats.LastTrainLoss = loss
	t.state.Loss = loss
	t.recordStepMetrics(metrics)
	return loss, metrics, nil
}

// recordStepMetrics adds a batch's logged values to the epoch aggregates
// and makes the per-step ones the latest metrics.
func (t *Trainer) recordStepMetrics(metrics []module.Metric) {
	for _, mt := range metrics {
		if mt.Spec.OnEpoch {
			a := t.epochAgg[mt.Name]
			if a == nil {
				a = &agg{spec: mt.Spec}
				t.epochAgg[mt.Name] = a
			}
			a.addMetric(&mt)
		}
		if mt.Spec.OnStep {
			mt.Values(func(name string, v float64) {
				t.state.setMetric(stepName(name, mt.Spec), v, false)
				if mt.Spec.OnEpoch {
					t.state.setStepNewer(name, true)
				}
			})
		}
	}
}

// optimizerStep updates the parameters from the window's gradients and
// advances the global step and a per-step scheduler.
func (f *fitRun) optimizerStep(ctx context.Context, epoch, bi int) error {
	t := f.t
	f.stepLR = f.opt.LR()
	sp := t.cfg.Profiler.Start("optimizer step")
	f.ctx = ctx
	_, err := t.strat.OptimizerStep(f.stepCtx(ctx), f.stepOpts)
	f.ctx = nil
	sp.End()
	if err != nil {
		return fmt.Errorf("epoch %d batch %d: optimizer step: %w", epoch, bi, err)
	}
	t.state.GlobalStep++
	if f.sched != nil && f.sched.Interval() == optim.PerStep {
		metric, err := t.schedMetric(ctx, f.sched)
		if err != nil {
			return fmt.Errorf("epoch %d batch %d: %w", epoch, bi, err)
		}
		f.sched.Step(f.opt, metric)
	}
	t.state.LR = f.opt.LR()
	if f.afterStep {
		return f.stepHook(t.onAfterOptimizerStep(ctx, f.m))
	}
	return nil
}

// beforeBackwardHook is the strategy's TrainOptions.BeforeBackward: it
// receives the step's loss between the forward and the backward pass and
// calls the BeforeZeroGrad hooks (at a window's first micro-batch, whose
// backward pass replaces the previous step's gradients) and the
// BeforeBackward hooks.
func (f *fitRun) beforeBackwardHook(loss float64) error {
	f.backwardHooked = true
	if f.zeroGrad && f.micro == 0 {
		if err := f.stepHook(f.t.onBeforeZeroGrad(f.ctx, f.m)); err != nil {
			return err
		}
	}
	if !f.beforeBackward {
		return nil
	}
	return f.stepHook(f.t.onBeforeBackward(f.ctx, f.m, loss))
}

// beforeUpdate is the strategy's StepOptions.BeforeUpdate: it receives the
// reduced gradients' norm and calls the AfterBackward hooks of the
// window's last micro-batch, whose gradients are all reduced now, then the
// BeforeOptimizerStep hooks.
func (f *fitRun) beforeUpdate(gradNorm float64) error {
	t := f.t
	t.state.GradNorm = gradNorm
	if t.cfg.LogGradNorm {
		t.state.setMetric("grad_norm", gradNorm, false)
	}
	if f.afterBackward {
		if err := f.stepHook(t.onAfterBackward(f.ctx, f.m)); err != nil {
			return err
		}
	}
	if !f.beforeStep {
		return nil
	}
	return f.stepHook(t.onBeforeOptimizerStep(f.ctx, f.m))
}

// stepHook keeps a Stop from a per-step hook for the batch end (where the
// ranks agree on it) and returns any other error.
func (f *fitRun) stepHook(err error) error {
	stop, err := splitStop(err)
	if stop != nil && f.hookStop == nil {
		f.hookStop = stop
	}
	return err
}

// logStep sends the step's per-step values, the epoch and the learning rate
// the step ran at (not the next step's, which a per-step scheduler has set
// since) to the loggers.
func (f *fitRun) logStep(epoch int, metrics []module.Metric) error {
	clear(f.stepLog)
	for _, mt := range metrics {
		if mt.Spec.OnStep {
			mt.Values(func(name string, v float64) { f.stepLog[stepName(name, mt.Spec)] = v })
		}
	}
	f.stepLog["epoch"] = float64(epoch)
	f.stepLog["lr"] = f.stepLR
	if f.t.cfg.LogGradNorm {
		f.stepLog["grad_norm"] = f.t.state.GradNorm
	}
	return f.t.logMetrics(f.t.state.GlobalStep, f.stepLog)
}

// nonFiniteInput names the first NaN or infinite value in b's fields, with
// the dataset example it came from ("" when every value is finite): a loss
// made non-finite by its data, not by the training.
func nonFiniteInput(b *data.Batch) string {
	for f, col := range b.Data {
		if b.Size == 0 || f >= len(b.Fields) {
			break
		}
		w := len(col) / b.Size
		for i, v := range col {
			if !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
				continue
			}
			row := i / max(w, 1)
			ex := "row " + strconv.Itoa(row)
			if row < len(b.Indices) {
				ex = "dataset example " + strconv.Itoa(b.Indices[row])
			}
			return fmt.Sprintf("input %q of %s holds %v", b.Fields[f].Name, ex, v)
		}
	}
	return ""
}
