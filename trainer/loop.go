package trainer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
)

// The training loop, in parts with one job each:
//
//	loop.go        epochs and the batches of one epoch (this file)
//	step.go        one batch: forward and backward, the optimizer step, step logs
//	accumulate.go  gradient accumulation windows
//	valsched.go    when validation runs, and a hook's stop told apart from an error
//	signal.go      ranks agreeing on stopping (agreeStop)

// fitRun is one Fit's training loop: what stays the same across its epochs.
type fitRun struct {
	t          *Trainer
	m          module.Module
	train, val *data.Loader
	stepOpts   strategy.OptimizerOptions
	opt        optim.Optimizer
	sched      optim.Scheduler
	// resume is where a resumed run re-enters the loop, until its epoch.
	resume  *loopPos
	stepLog map[string]float64
	// stepLR is the learning rate of the latest optimizer step, for its
	// row of step metrics.
	stepLR float64
	// trainDur is the wall time of this epoch's training batches.
	trainDur time.Duration

	// The per-step hooks that some module or callback implements, and
	// what they need during a step: micro is the micro-batch's place in
	// its accumulation window.
	stepHookSet
	micro    int
	ctx      context.Context // of the step or optimizer step in progress
	hookStop error           // a Stop from a per-step hook, for the batch end
	// backwardHook is TrainOptions.BeforeBackward, nil when no hook wants
	// it; backwardHooked records that the strategy called it in this step.
	backwardHook   func(loss float64) error
	backwardHooked bool
	// ride carries the stop flags (rideFlags) with the gradients of each
	// optimizer step of the epoch (see agreeStop); nil when the ranks agree
	// in an all-reduce after every batch (one process, or a hook on some
	// rank that may stop after the backward pass: stepEndStop on this
	// one). fitCtx is Fit's context, which the flags sample; sampledStop:
	// hookStop was set when they were sampled.
	ride        *strategy.Ride
	rideVal     strategy.Ride
	stepEndStop bool
	rideFlags   [1 + ctxCancelled]float64
	fitCtx      context.Context
	sampledStop bool
	// warnedInterval: the ValCheckInterval warning was given.
	warnedInterval bool
	// warnedLogEvery: the LogEveryNSteps warning was given.
	warnedLogEvery bool
	// counted: numBatches counted countedEpoch's batches (in t.trainNB).
	counted      bool
	countedEpoch int
}

func (t *Trainer) newFitRun(m module.Module, train, val *data.Loader) (*fitRun, error) {
	f := &fitRun{t: t, m: m, train: train, val: val, stepLog: map[string]float64{}}
	if c := &t.cfg; c.GradientClipVal > 0 {
		if c.GradientClipAlgorithm == "value" {
			f.stepOpts.ClipValue = c.GradientClipVal
		} else {
			f.stepOpts.ClipNorm = c.GradientClipVal
		}
	}
	f.opt, f.sched = t.opt, t.sched
	f.resume, t.resumeAt = t.resumeAt, nil
	f.stepHookSet = t.stepHooks(m)
	if f.beforeStep || f.afterBackward || t.cfg.LogGradNorm {
		// Bound once: the strategy calls it every step.
		f.stepOpts.BeforeUpdate = f.beforeUpdate
	}
	if f.beforeBackward || f.zeroGrad {
		f.backwardHook = f.beforeBackwardHook
	}
	var err error
	if f.stepEndStop, err = t.stopsAtStepEnd(m); err != nil {
		return nil, err
	}
	f.rideVal = strategy.Ride{Values: f.rideFlags[:], Sample: f.sampleStop}
	return f, nil
}

// sampleStop is the ride's Sample: this rank's stop flags as the step's
// last gradient bucket is queued.
func (f *fitRun) sampleStop(flags []float64) {
	f.sampledStop = f.hookStop != nil
	markStop(flags, f.sampledStop, f.t.stopCode(f.fitCtx))
}

// stepCtx is the context of the strategy's steps and of the training
// data: ctx, or, when the stop decision rides with the gradients, ctx
// without its cancellation, which the next step's flags carry to every
// rank instead of failing this rank's next step alone (a cancellation
// after a step's ride reaches the others only with the next step's). A
// peer that stops answering still fails the step, at the collective's
// timeout, as it does in the all-reduce of the stop flags.
func (f *fitRun) stepCtx(ctx context.Context) context.Context {
	if f.ride != nil {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// fitLoop trains epochs from startEpoch until MaxEpochs or MaxSteps, or
// until a hook or a signal stops it (returned as the error).
func (t *Trainer) fitLoop(ctx context.Context, m module.Module, train, val *data.Loader, startEpoch int) error {
	f, err := t.newFitRun(m, train, val)
	if err != nil {
		return err
	}
	f.fitCtx = ctx
	if p, ok := f.sched.(*optim.ReduceOnPlateau); ok && p.Config().Mode == "max" && p.Monitor() == "" {
		return errors.New(`ReduceOnPlateau has Mode "max" and no Monitor: it would watch val_loss or train_loss, which should fall, and cut the learning rate while they do: set PlateauConfig.Monitor to the metric that should rise (such as val_acc), or use Mode "min"`)
	}
	// A Stop from the hooks before the first batch (the sanity check's,
	// OnTrainStart) is agreed on where it is asked, as one from
	// OnTrainEpochStart is with the epoch's batch counts: every rank stops
	// there, none waits for the asking one in its next collective.
	if err := t.agreeHookStop(ctx, t.sanityCheck(ctx, val, startEpoch)); err != nil {
		return err
	}
	if !t.trainingLeft(startEpoch) {
		return nil // as Lightning's fit loop, without its train hooks
	}
	// OnTrainStart sees the first epoch's State.NumTrainBatches, as
	// Lightning's on_train_start sees num_training_batches.
	if _, err := f.numBatches(startEpoch); err != nil {
		return err
	}
	if err := t.agreeHookStop(ctx, t.onTrainStart(ctx, m)); err != nil {
		return t.trainEnd(ctx, m, err)
	}
	for epoch := startEpoch; t.trainingLeft(epoch); epoch++ {
		if err := f.epoch(ctx, epoch); err != nil {
			return t.trainEnd(ctx, m, err)
		}
	}
	return t.trainEnd(ctx, m, nil)
}

// startSchedule sets the first step's learning rate on a new run's
// optimizer (a scheduler's Start, which torch does in its constructor) and
// State.LR, before OnFitStart: from Fit's first hook on, State.LR is the
// rate of the next optimizer step (a resumed run's from the checkpoint), as
// Lightning's optimizers hold it from on_fit_start.
//
// torch's schedulers start from the optimizer's rate; a StepLR or cosine
// schedule here starts from its own base rate, which replaces the
// optimizer's: a base other than the optimizer's rate is said, since the
// run then trains at a rate the module's optimizer does not show.
func (t *Trainer) startSchedule(startEpoch int) {
	if st, ok := t.sched.(optim.Starter); ok && startEpoch == 0 && t.state.GlobalStep == 0 && t.resumeAt == nil {
		configured := t.opt.LR()
		st.Start(t.opt)
		if b, ok := t.sched.(interface{ LRAt(int64) float64 }); ok && b.LRAt(0) != configured && t.state.IsGlobalZero {
			t.cfg.Log.Warn().Float64("scheduler_base_lr", b.LRAt(0)).Float64("optimizer_lr", configured).
				Msgf("the %T's base rate %g replaces the optimizer's %g (a schedule here starts from its own base, not from the optimizer's rate as in torch): give both the same rate", t.sched, b.LRAt(0), configured)
		}
	}
	t.state.LR = t.opt.LR()
}

// trainingLeft reports whether epoch is within MaxEpochs and steps remain
// within MaxSteps.
func (t *Trainer) trainingLeft(epoch int) bool {
	c := &t.cfg
	return (c.MaxEpochs <= 0 || epoch < c.MaxEpochs) && !t.stepsDone()
}

func (t *Trainer) stepsDone() bool { return t.cfg.MaxSteps > 0 && t.state.GlobalStep >= t.cfg.MaxSteps }

// epoch runs one training epoch: its batches (from where a resumed run
// stands), the validations due, and the epoch's end.
func (f *fitRun) epoch(ctx context.Context, epoch int) error {
	t := f.t
	r, err := f.enterEpoch(epoch)
	if err != nil {
		return err
	}
	// Counted before OnTrainEpochStart, which sees it in
	// State.NumTrainBatches, as Lightning's hook sees num_training_batches.
	nb, err := f.numBatches(epoch)
	if err != nil {
		return err
	}
	stop, err := splitStop(t.onTrainEpochStart(ctx, f.m, epoch))
	if err != nil {
		return err
	}
	if stop, err = f.agreeBatches(ctx, epoch, nb, stop); err != nil {
		return err
	}
	if stop != nil {
		return stop
	}
	if nb == 0 {
		// Fit would end at once, trained on nothing.
		info, c := t.strat.Info(), f.train.Config()
		if c.DropLast {
			return fmt.Errorf("epoch %d has no training batch on rank %d of %d: the rank's share of the dataset's %d examples is smaller than BatchSize %d and DropLast is set: lower BatchSize or unset DropLast", epoch, info.Rank, info.WorldSize, f.train.Dataset().Len(), c.BatchSize)
		}
		return fmt.Errorf("epoch %d has no training batch on rank %d of %d: the training loader's sampler gives this rank no example of the dataset's %d", epoch, info.Rank, info.WorldSize, f.train.Dataset().Len())
	}
	// The settings are every rank's alike (agreeSettings): one line for
	// the job. n == nb asks for the epoch-end validation only, which it
	// gets, as in Lightning, which refuses n > nb only.
	if n := t.cfg.ValCheckInterval; n > nb && f.val != nil && !f.warnedInterval && t.state.IsGlobalZero {
		f.warnedInterval = true
		t.cfg.Log.Warn().Int("val_check_interval", n).Int("batches", nb).Int("epoch", epoch).
			Msg(t.cfg.name("ValCheckInterval") + " is above the epoch's training batches: validation runs at the epoch's end only; lower it to validate within the epoch")
	}
	// FastDevRun's epoch of a batch or two is short on purpose.
	if k := t.accum; t.cfg.LogEveryNSteps > (nb+k-1)/k && len(t.loggers) > 0 && t.cfg.FastDevRun == 0 && !f.warnedLogEvery && t.state.IsGlobalZero {
		f.warnedLogEvery = true // as Lightning's
		t.cfg.Log.Warn().Int("log_every_n_steps", t.cfg.LogEveryNSteps).Int("steps", (nb+k-1)/k).Int("epoch", epoch).
			Msg(t.cfg.name("LogEveryNSteps") + " is above the epoch's optimizer steps: the loggers (metrics.csv) get step metrics such as a training loss only at multiples of it, so not in every epoch, or never in a short Fit; lower it to record them within each epoch")
	}
	first := min(r.Batch, nb)
	if first > 0 && t.resumeBS > 0 && t.resumeBS != t.trainBS {
		t.cfg.Log.Warn().Int("checkpoint_batch_size", t.resumeBS).Int("batch_size", t.trainBS).Msg("resuming mid-epoch with another batch size: the rest of the epoch is not the interrupted run's")
	}
	t.progress.startEpoch(epoch, t.cfg.MaxEpochs, nb)
	it := skipBatches(f.train, first).Iter(f.stepCtx(ctx), epoch)
	f.trainDur = 0
	if r.ValPending && f.val != nil {
		// The interrupted run stopped just before a mid-epoch validation.
		t.pos.ValPending = false
		if stop, err = f.validateMid(ctx, epoch); err != nil {
			it.Close()
			return err
		}
		if stop != nil {
			first = nb
		}
	}
	stop, now, err := f.batches(ctx, epoch, it, first, nb, stop)
	it.Close()
	if err != nil {
		// An interrupt or a failed step: the batches that ran still count
		// in Stats (samples per second of an interrupted run).
		t.stats.TrainTime += f.trainDur
		return err
	}
	if !now {
		if err := it.Err(); err != nil {
			// A cancel the loader saw first is no fault of the data: said
			// as an evaluation's is (loopDataErr). Fit returns it so
			// inside an accumulation window and with several ranks;
			// elsewhere it saves and returns the *InterruptedError.
			done := first
			if t.pos.Epoch == epoch {
				done = max(done, t.pos.Batch)
			}
			if t.pos.midWindow && t.pos.Epoch == epoch && errors.Is(err, ctx.Err()) {
				// Fit saves no interrupt checkpoint here.
				return fmt.Errorf("epoch %d: training was cancelled after %d of %d batches, inside a gradient accumulation window, whose partial gradients no checkpoint can hold: nothing was saved since the last checkpoint: %w", epoch, done, nb, err)
			}
			return fmt.Errorf("epoch %d: %w", epoch, loopDataErr(ctx, "training", err, done, nb))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		t.stats.TrainTime += f.trainDur
	}
	return f.endEpoch(ctx, epoch, nb, r, stop, now)
}

// enterEpoch sets the state for epoch and returns where a resumed run
// re-enters it (the zero position otherwise).
func (f *fitRun) enterEpoch(epoch int) (loopPos, error) {
	t := f.t
	accum, err := t.accumulation(epoch)
	if err != nil {
		return loopPos{}, err
	}
	t.state.Epoch = epoch
	t.state.LR = f.opt.LR()
	var r loopPos
	if f.resume != nil && f.resume.Epoch == epoch {
		// takeUpPosition made it the run's position, in this world, with
		// the epoch's aggregates.
		r, f.resume = *f.resume, nil
	} else {
		t.epochAgg = map[string]*agg{}
	}
	t.accum = accum
	t.pos = loopPos{Epoch: epoch, Batch: r.Batch, Validated: r.Validated, ValPending: r.ValPending}
	return r, nil
}

// takeUpPosition makes the position a resumed or continued run starts
// from (t.resumeAt) the run's own as soon as it is restored, before any
// hook runs: a checkpoint saved before the loop enters the epoch
// (OnFitStart, the sanity check, OnTrainStart, a cancel there) then holds
// it and the epoch's aggregates, not epoch 0, batch 0 with the restored
// weights and step. The batch, counted in the checkpoint's world, is
// converted to this one (batchAtWorld), which needs the training loader's
// batch size and the epoch's accumulation: the latter may ask a callback,
// whose state the checkpoint has restored by now.
func (t *Trainer) takeUpPosition(train *data.Loader) error {
	p := t.resumeAt
	if p == nil {
		return nil
	}
	accum, err := t.accumulation(p.Epoch)
	if err != nil {
		return err
	}
	bs := train.Config().BatchSize
	p.Batch = batchAtWorld(*p, t.resumeWorld, t.state.WorldSize, t.resumeBS, bs, accum)
	t.resumeWorld = t.state.WorldSize // converted once
	t.pos = loopPos{Epoch: p.Epoch, Batch: p.Batch, Validated: p.Validated, ValPending: p.ValPending}
	t.epochAgg = map[string]*agg{}
	if p.Batch > 0 || p.Validated {
		t.epochAgg = t.resumeAggs
	}
	t.state.Epoch, t.accum, t.trainBS = p.Epoch, accum, bs
	return nil
}

// agreeBatches checks that every rank has nb training batches in epoch:
// each step is a collective, so a rank with fewer batches would meet the
// others' gradient reduction with its end-of-epoch one. The ranks' counts
// are gathered (a sum of one-hot rows) so the error can name each. The
// same all-reduce counts the ranks with a hook that may stop at a step's
// end: the stop flags ride with the gradients in the epoch when none has
// (callbacks may differ between ranks, and every rank must agree the same
// way). It carries the ranks' signals and cancels too (agreeStop's flags):
// one that came during the previous epoch's end or OnTrainEpochStart stops
// every rank here, before the epoch's first step.
func (f *fitRun) agreeBatches(ctx context.Context, epoch, nb int, stop error) (error, error) {
	t := f.t
	f.ride = nil
	info := t.strat.Info()
	if info.WorldSize < 2 {
		return t.stopFor(ctx, stop, 0)
	}
	row := make([]float64, info.WorldSize+2+len(t.stopFlags))
	counts, stoppers, flags := row[:info.WorldSize], row[info.WorldSize:info.WorldSize+2], row[info.WorldSize+2:]
	counts[info.Rank] = float64(nb)
	markStop(flags, false, t.stopCode(ctx))
	if f.stepEndStop {
		stoppers[0] = 1
	}
	if stop != nil {
		stoppers[1] = 1
	}
	if err := t.strat.Reduce(ctx, row, make([]float64, len(row)), sumOps(len(row))); err != nil {
		return nil, fmt.Errorf("epoch %d: agree on the number of training batches: %w", epoch, err)
	}
	if stoppers[1] > 0 && stop == nil {
		stop = Stop("another rank stopped training")
	}
	if stoppers[0] == 0 {
		f.ride = &f.rideVal
	}
	var differ bool
	parts := make([]string, len(counts))
	for r, c := range counts {
		parts[r] = fmt.Sprintf("rank %d has %d", r, int(c))
		differ = differ || int(c) != nb
	}
	if differ {
		fix := "give every rank's loader the same number of batches (a loader's own Sampler, as many indices on every rank)"
		if !t.cfg.distributedSampler() {
			// Named only when it is off: on, it is not the cause, and a
			// command line has no flag for it.
			fix = fmt.Sprintf("turn %s back on (nil, the default), which gives every rank its share of one dataset, or give every rank's loader the same number of batches", t.cfg.field("UseDistributedSampler"))
		}
		return nil, fmt.Errorf("epoch %d: the ranks' training loaders disagree on the number of batches (%s): every step is a collective, so each rank needs as many batches: %s", epoch, strings.Join(parts, ", "), fix)
	}
	return t.rideStop(ctx, stop, flags)
}

// numBatches is the number of training batches of epoch (LimitTrainBatches).
// The first epoch's is counted before OnTrainStart (countedEpoch), and
// not again.
func (f *fitRun) numBatches(epoch int) (int, error) {
	t := f.t
	if f.counted && f.countedEpoch == epoch {
		return t.trainNB, nil
	}
	f.counted, f.countedEpoch = true, epoch
	nb, err := numBatchesOf("training", f.train, epoch)
	if err != nil {
		return 0, fmt.Errorf("epoch %d: %w", epoch, err)
	}
	if l := t.cfg.LimitTrainBatches; l > 0 && l < nb {
		nb = l
	}
	t.trainBS, t.trainNB = f.train.Config().BatchSize, nb
	t.state.NumTrainBatches = nb
	return nb, nil
}

// numBatchesOf is l.NumBatches(epoch), which asks l's sampler for its
// order: a panic in a sampler of the user's is an error naming it, with
// the stack, as a Dataset's Read's is.
func numBatchesOf(what string, l *data.Loader, epoch int) (nb int, err error) {
	err = guarded(func() error {
		nb = l.NumBatches(epoch)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("the %s loader's sampler %T.Order %w", what, l.Config().Sampler, err)
	}
	return nb, nil
}

// batches runs training batches first..nb-1 of epoch from it. It returns
// the stop a hook asked for (stop carries one asked for before the first
// batch); now reports that the ranks agreed to stop at a batch end, where
// the epoch ends (endEpoch's stopped).
func (f *fitRun) batches(ctx context.Context, epoch int, it *data.Iter, first, nb int, stop error) (_ error, now bool, _ error) {
	t := f.t
	for bi := first; bi < nb; bi++ {
		sp := t.cfg.Profiler.Start("data fetch")
		b, ok := it.Next()
		sp.End()
		if !ok {
			break
		}
		t.state.BatchIdx = bi
		if err := f.batchStart(ctx, b, bi); err != nil {
			return nil, false, err
		}
		metrics, last, err := f.trainBatch(ctx, epoch, bi, nb, b)
		if err != nil {
			return nil, false, err
		}
		valDue := f.valDueAfter(epoch, bi, nb)
		t.pos = loopPos{Epoch: epoch, Batch: bi + 1, ValPending: valDue, midWindow: !last}
		if last && t.state.GlobalStep%t.cfg.LogEveryNSteps == 0 {
			if err := f.logStep(epoch, metrics); err != nil {
				return nil, false, err
			}
		}
		s, err := splitStop(t.onTrainBatchEnd(ctx, f.m, b, bi))
		if err != nil {
			return nil, false, err
		}
		rode := last && f.ride != nil && f.ride.Rode
		if rode && (s != nil || f.hookStop != nil && !f.sampledStop) {
			if s == nil {
				s = f.hookStop
			}
			return nil, false, fmt.Errorf("epoch %d batch %d: %v; but no module or callback with OnAfterBackward, OnBeforeOptimizerStep, OnAfterOptimizerStep or OnTrainBatchEnd says it may stop there (StepEndStopper), so the ranks agreed on stopping with the step's gradients, before the hook ran, and cannot all stop at this batch: make its StopsAtStepEnd return true, or stop from OnBeforeBackward or OnTrainEpochEnd", epoch, bi, s)
		}
		if s != nil {
			stop = s
		}
		if stop == nil {
			stop = f.hookStop
		}
		f.hookStop = nil
		if rode && bi+1 < nb && !valDue && !t.stepsDone() {
			// The flags came with the gradients; the loop goes on to the
			// next training batch, whose flags carry what came since.
			stop, err = t.rideStop(ctx, stop, f.ride.Values)
		} else {
			stop, err = t.agreeStop(ctx, stop, last)
		}
		if err != nil {
			return nil, false, err
		}
		if stop != nil {
			if last && t.state.GlobalStep%t.cfg.LogEveryNSteps != 0 {
				// The step training stops at is logged whatever the
				// interval, as Lightning's logger connector logs once
				// should_stop is set.
				if err := f.logStep(epoch, metrics); err != nil {
					return nil, false, err
				}
			}
			t.stats.TrainTime += f.trainDur
			return stop, true, nil
		}
		if t.stepsDone() {
			break
		}
		if valDue {
			t.pos.ValPending = false
			if stop, err = f.validateMid(ctx, epoch); err != nil {
				return nil, false, err
			}
			if stop != nil {
				break
			}
		}
	}
	return stop, false, nil
}

// endEpoch finishes epoch after its batches: epoch metrics, the epoch-end
// validation (unless a resumed run did them already), the per-epoch
// scheduler step, the epoch-end hooks and checkpoint, and the ranks'
// agreement on stopping, returned as the error.
//
// stopped: the ranks agreed at a batch end to stop (a hook's Stop, on any
// rank). As Lightning's training epoch loop once should_stop is set, the
// epoch ends there and its end runs all the same: the epoch metrics of the
// batches that ran (train_loss_epoch), the validation when the epoch is one
// that validates (Lightning's _should_check_val_fx lets a stop validate),
// OnTrainEpochEnd, and the default checkpoints, once. An epoch stopped
// before its last batch (partial; by a mid-epoch validation's Stop too)
// keeps its position in the checkpoints (the batch to resume at, the
// epoch's aggregates), so that a resume trains the rest of it and ends it
// again, and the per-epoch scheduler does not step, as Lightning's steps
// only after an epoch's last batch. Inside an
// accumulation window, whose partial gradients no checkpoint can hold, the
// validation (whose checkpoints could not be saved) is skipped too, and
// the default checkpoints are not written: the warning says so.
func (f *fitRun) endEpoch(ctx context.Context, epoch, nb int, r loopPos, stop error, stopped bool) error {
	t := f.t
	partial := stop != nil && t.pos.Batch < nb
	if !r.Validated {
		if err := t.finishTrainEpoch(ctx, epoch); err != nil {
			return err
		}
		// A stop that did not come at a batch end came from a validation,
		// which has run.
		if (stop == nil || stopped) && f.valDueAtEpochEnd(epoch) && !(partial && t.pos.midWindow) {
			if partial {
				t.pos.ValPending = false
			} else {
				t.pos = loopPos{Epoch: epoch, Batch: nb, Validated: true}
			}
			s, err := f.validate(ctx, epoch)
			if err != nil {
				return err
			}
			if stop == nil {
				stop = s
			}
		}
	}
	if !partial {
		t.stats.Epochs = epoch + 1
		if f.sched != nil && f.sched.Interval() == optim.PerEpoch && !f.waitsForValidation(epoch) {
			metric, err := t.schedMetric(ctx, f.sched)
			if err != nil {
				return fmt.Errorf("epoch %d: %w", epoch, err)
			}
			f.sched.Step(f.opt, metric)
		}
		t.pos = loopPos{Epoch: epoch + 1}
	}
	s, err := splitStop(t.onTrainEpochEnd(ctx, f.m, epoch))
	if err != nil {
		return err
	}
	if s != nil {
		stop = s
	}
	if t.defaultCheckpoints() {
		if t.pos.midWindow {
			if t.state.IsGlobalZero {
				t.cfg.Log.Warn().Int("epoch", t.pos.Epoch).Int("batch", t.pos.Batch-1).Int("global_step", t.state.GlobalStep).
					Msg("training stopped inside a gradient accumulation window, whose partial gradients a checkpoint cannot hold: no checkpoint of this batch; the newest checkpoint is the last one saved")
			}
		} else if err := t.saveEpochCheckpoint(ctx, epoch); err != nil {
			return err
		}
	}
	if stopped {
		return stop // every rank stops already
	}
	if stop, err = t.agreeStop(ctx, stop, true); err != nil {
		return err
	}
	return stop
}

// waitsForValidation reports whether a per-epoch scheduler that watches a
// validation metric (optim.Monitored: one validation logged, or not logged
// yet, or the default, val_loss) skips epoch, which does not validate
// (CheckValEveryNEpoch): it steps after the epochs that validate, once per
// validation, as Lightning's would with frequency set to
// check_val_every_n_epoch, rather than failing before the first
// validation or stepping again on the last one's value, which never
// improves on itself.
func (f *fitRun) waitsForValidation(epoch int) bool {
	mon, ok := f.sched.(optim.Monitored)
	if !ok || f.val == nil || f.valDueAtEpochEnd(epoch) {
		return false
	}
	t := f.t
	name := mon.Monitor()
	if name == "" {
		name = "val_loss"
	}
	m := Metrics{m: t.state.Metrics, stepNewer: t.state.stepNewer, fromVal: t.state.fromVal}
	_, logged := m.Get(name)
	return !logged || m.FromValidation(name)
}

// sanityCheck runs NumSanityValSteps validation batches before training
// (Lightning's sanity check) and discards their metrics: a broken
// validation step fails before an epoch of training is spent. Evaluation
// steps leave the weights, the random streams and the training data's
// order alone, so the run trains as it would without the check.
func (t *Trainer) sanityCheck(ctx context.Context, val *data.Loader, startEpoch int) error {
	c := &t.cfg
	if val == nil || c.DisableSanityCheck || c.FastDevRun > 0 || !t.trainingLeft(startEpoch) {
		return nil
	}
	n := c.NumSanityValSteps
	if n < 0 || (c.LimitValBatches > 0 && c.LimitValBatches < n) {
		n = c.LimitValBatches
	}
	defer t.span("sanity check")()
	if err := t.sanityValidation(ctx, val, n); err != nil {
		return fmt.Errorf("sanity check (validation batches run before training; %s skips it): %w", t.cfg.field("DisableSanityCheck"), err)
	}
	return nil
}
