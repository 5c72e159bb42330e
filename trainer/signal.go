package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
)

// DuplicateSignalWindow is how long after the first SIGINT or SIGTERM a
// repeat counts as the same request: a shell or timeout(1) signalling the
// whole process group, a launcher forwarding it to its ranks, or go run
// to its child, makes one request arrive two or three times. A signal
// after the window exits at once.
const DuplicateSignalWindow = strategy.DuplicateSignalWindow

// signalWatch records the first SIGINT, SIGTERM (or, under SLURM, SIGUSR1)
// received during Fit; the loop polls it at each optimizer-step boundary
// (one atomic load, and a receive that does not wait).
//
// A signal reaches a Go program through goroutines: the runtime's handler
// queues it, os/signal's goroutine sends it on the channels, and the
// watcher (strategy.WatchStopSignals) logs it. On a loaded machine these
// can run late, after the loop's last boundary: the run then ended as if
// no signal had come, and the signal was dropped with the handlers, a
// SIGTERM swallowed. So the loop also reads a channel of its own (direct,
// one hop less), and at the last boundary (settle) waits until every
// signal the process has received is on it.
type signalWatch struct {
	got    atomic.Pointer[os.Signal]
	sigs   []os.Signal
	direct chan os.Signal
	seen   chan struct{} // closed once the watcher took in the first signal
	stop   func()        // stops watching
	// endHooks is set once training is over and Fit runs its end hooks
	// (OnFitEnd, Teardown): the signal line says those are being
	// finished, as no step is left.
	endHooks atomic.Bool
}

// InterruptCheckpointName is the file, under the run directory
// (State.LogDir), that a run stopped by a signal or a cancelled context
// saves.
const InterruptCheckpointName = "checkpoints/interrupted.ckpt"

// slurmJob is the SLURM job id when this process runs as a SLURM job.
func slurmJob() string { return os.Getenv("SLURM_JOB_ID") }

func watchSignals(log *zerolog.Logger) *signalWatch {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if slurmJob() != "" {
		sigs = append(sigs, sigUSR1)
	}
	w := &signalWatch{sigs: sigs, direct: make(chan os.Signal, len(sigs)), seen: make(chan struct{})}
	// Under the elastic supervisor and ddp_spawn, every rank of a machine
	// gets the signal and their output meets on one terminal: the
	// machine's first rank says what they do with it, once (the others at
	// debug level).
	say := log.Warn
	sayExit := log.Error
	if strategy.BesideFirstRank(os.LookupEnv) {
		say, sayExit = log.Debug, log.Debug
	}
	signal.Notify(w.direct, sigs...)
	unwatch := strategy.WatchStopSignals(sigs, func(s os.Signal, first bool) {
		if !first {
			log.Debug().Str("signal", strategy.SignalName(s)).Msg("repeat of the first signal within 2 s: the same request")
			return
		}
		// seen is closed once the line is out: stop waits for it, so the
		// line is never lost to the process ending first.
		defer close(w.seen)
		record := func() { w.got.CompareAndSwap(nil, &s) }
		if testHookRecordSignal != nil {
			testHookRecordSignal(record)
		} else {
			record()
		}
		finishing := "finishing the current step"
		if w.endHooks.Load() {
			finishing = "training is over: finishing Fit's end hooks (OnFitEnd, Teardown)"
		}
		msg := finishing + ", then saving a checkpoint and stopping; send the signal again after 2 s to exit at once"
		if s == sigUSR1 {
			msg = "SLURM asked to stop: " + finishing + ", saving a checkpoint and requeueing the job"
		}
		say().Str("signal", strategy.SignalName(s)).Msg(msg)
	}, func(s os.Signal) {
		// The user asked twice: exit now. Lightning ignores SIGINT while
		// it shuts down after a KeyboardInterrupt, which saves nothing
		// and is quick; here the first signal's save may take long (a
		// large model, a slow disk), and a program must not become one
		// that only SIGKILL stops. A checkpoint being written is lost
		// whole: saves go to a temporary file, renamed over the target
		// once complete, which the next Fit removes.
		sayExit().Str("signal", strategy.SignalName(s)).Msg(exitAtOnceMsg)
	})
	w.stop = func() {
		// The watcher's channel stays registered until unwatch: no window
		// where a signal finds its default action.
		signal.Stop(w.direct)
		if w.got.Load() != nil {
			// The loop may have acted on the signal (from direct) before
			// the watcher took it in (os/signal sent it to both): the
			// watcher must have, for unwatch to drop its repeats within
			// DuplicateSignalWindow rather than leave them to kill the
			// process.
			<-w.seen
		}
		unwatch()
	}
	return w
}

// testHookRecordSignal, when set (by a test), is handed the watcher's
// recording of the first signal, to run when it likes or never: the
// watcher late, as on a loaded machine, to see that the loop does not
// depend on it.
var testHookRecordSignal func(record func())

// settle makes received answer for every signal this process received
// before the call, including those still on their way through os/signal:
// signal.Stop returns once the signals received while the channel was
// registered are on it. The watcher's channel stays registered meanwhile,
// so a signal between Stop and Notify reaches it (and got).
func (w *signalWatch) settle() {
	if w == nil || w.got.Load() != nil {
		return
	}
	signal.Stop(w.direct)
	w.received()
	signal.Notify(w.direct, w.sigs...)
}

// exitAtOnceMsg is what Fit logs when a second signal, after
// DuplicateSignalWindow, ends the process at once.
const exitAtOnceMsg = "the signal came again: exiting now, without the interrupt checkpoint; a checkpoint being written is dropped whole (checkpoints are written to a temporary file and renamed once complete), so FromCheckpoint(\"last\") resumes from the newest complete one"

// received is the first signal, or nil.
func (w *signalWatch) received() os.Signal {
	if w == nil {
		return nil
	}
	if p := w.got.Load(); p == nil {
		select {
		case s := <-w.direct:
			w.got.CompareAndSwap(nil, &s)
		default:
			return nil
		}
	}
	return *w.got.Load()
}

// InterruptedError is what Fit returns when a signal (SIGINT, SIGTERM, or
// SIGUSR1 under SLURM) or the cancelling of its context stopped training:
// every rank finished its optimizer step and the run was saved to
// Checkpoint, from which FromCheckpoint(Checkpoint) resumes it. A signal
// that comes during the last step, or during Fit's end hooks (OnFitEnd,
// Teardown, once they ran), ends Fit so too, with GlobalStep the run's
// last (resuming finds nothing left to train), rather than being lost
// when Fit stops watching or killing the process in a hook. Under
// ddp_spawn a signal that reaches the workers before they have started
// training stops them before anything is saved: Checkpoint is "".
type InterruptedError struct {
	// Signal is the signal that stopped training; nil when the context
	// was cancelled (Err says why).
	Signal os.Signal
	// Err is the context's error when it was cancelled, else nil.
	Err error
	// GlobalStep is the optimizer steps taken when training stopped.
	GlobalStep int
	// Checkpoint is the resumable checkpoint saved; "" when the signal
	// came before training began and nothing was saved.
	Checkpoint string
	// SavedOn is the name of the host where rank 0 saved Checkpoint, on
	// ranks that run on another host (where that path may not exist);
	// "" on rank 0 and on the ranks of its host.
	SavedOn string
	// Requeued is set when SIGUSR1 under SLURM requeued the job.
	Requeued bool
}

func (e *InterruptedError) Error() string {
	return e.Summary() + "; " + e.ResumeHint()
}

// Summary is Error without the resume hint: why training stopped, at which
// step, and where the checkpoint was saved. A program that resumes runs its
// own way (a command line, a job script) prints Summary followed by its own
// instructions, since ResumeHint names the Go API.
func (e *InterruptedError) Summary() string {
	// The text is the strategy's, which ddp_spawn's launching process
	// gets: one message, whichever process reports the stop.
	s := e.fitInterrupted().Error()
	if e.Checkpoint == "" {
		return s
	}
	if e.SavedOn != "" {
		s += " on rank 0's host " + e.SavedOn
	}
	if e.Requeued {
		s += "; the SLURM job was requeued"
	}
	return s
}

// fitInterrupted is e as a strategy reports it (without Err, the error Fit
// returned in the process that trained).
func (e *InterruptedError) fitInterrupted() *strategy.FitInterrupted {
	fi := &strategy.FitInterrupted{GlobalStep: e.GlobalStep, Checkpoint: e.Checkpoint, Cancelled: e.Err}
	if e.Signal != nil {
		sig, ok := e.Signal.(syscall.Signal)
		if !ok { // not a signal of this OS's: named as it names itself
			sig, fi.Cancelled = 0, errors.New(strategy.SignalName(e.Signal))
		}
		fi.Signal = sig
	}
	return fi
}

// ResumeHint says how to continue the run.
func (e *InterruptedError) ResumeHint() string {
	if e.Checkpoint == "" {
		return "start the run again"
	}
	return fmt.Sprintf("resume with trainer.FromCheckpoint(%q)", e.Checkpoint)
}

// Unwrap gives the context's error, so errors.Is(err, context.Canceled)
// holds for a cancelled Fit.
func (e *InterruptedError) Unwrap() error { return e.Err }

// ExitCode is the status a program exits with, as a shell reports a
// process killed by the signal: 128+signal (130 for SIGINT, 143 for
// SIGTERM); 1 for a cancelled context.
func (e *InterruptedError) ExitCode() int { return exitCode(e.Signal) }

func exitCode(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

// signal codes agreed on across ranks (the largest wins).
var stopSignals = []os.Signal{nil, os.Interrupt, syscall.SIGTERM, sigUSR1}

const ctxCancelled = 4

// stopOps reduces agreeStop's flags: every one a sum.
var stopOps = func() (ops [1 + ctxCancelled]module.Reduce) {
	for i := range ops {
		ops[i] = module.Sum
	}
	return ops
}()

// agreeStop makes every rank take the same decision after a batch: stop
// when a hook on any rank asked to, and, at an optimizer-step boundary,
// save a checkpoint and return an *InterruptedError when any rank received
// a signal or had its context cancelled. With one process it costs an
// atomic load; with several, one small all-reduce, unless the decision
// rode with the step's gradients (rideStop).
//
// The flags ride on the step's last gradient bucket when the strategy can
// carry them (strategy.TrainOptions.Ride; ddp can) and nothing can ask to
// stop after that bucket is queued: signals, the context and a Stop from
// OnBeforeBackward are known by then and sampled when it is queued, but a
// Stop from OnAfterBackward (at a window's last micro-batch),
// OnBeforeOptimizerStep, OnAfterOptimizerStep or OnTrainBatchEnd comes
// after the step's buckets have gone, and every rank must know
// before its next OnTrainBatchStart (a hook may change what the step
// does) and before any later hook sees the weights. Riding on the next
// step's buckets would stop every rank one step late, or have them run a
// step they must then undo. So this all-reduce stays whenever a module or
// callback has such a hook and does not declare, by StepEndStopper, that
// it never stops there; and after mid-window micro-batches, at the
// epoch's last batch, before a validation and at MaxSteps, where the loop
// next does something other than a training step. Lightning leaves the
// agreement to the callbacks that decide (its EarlyStopping all-reduces
// its decision when it checks), and PyTorch's Join context (uneven
// inputs) spends an all-reduce of its own per iteration to learn whether a
// rank has finished.
func (t *Trainer) agreeStop(ctx context.Context, stop error, boundary bool) (error, error) {
	code := 0
	if boundary {
		code = t.stopCode(ctx)
	}
	if t.strat.Info().WorldSize == 1 {
		return t.stopFor(ctx, stop, code)
	}
	// Counts summed, not codes maxed: a strategy's Reduce runs a Max as a
	// second all-reduce after the sum of the weights. flags[0] counts the
	// ranks asking to stop, flags[c] those with code c.
	flags, weights := &t.stopFlags, &t.stopWeights
	markStop(flags[:], stop != nil, code)
	clear(weights[:])
	// Its own span: a rank that finished its step first waits here for
	// the others (their optimizer step, logging, callbacks), as it waits
	// in the gradients' all-reduce for their backward pass.
	sp := t.cfg.Profiler.Start("stop agreement")
	err := t.strat.Reduce(context.WithoutCancel(ctx), flags[:], weights[:], stopOps[:])
	sp.End()
	if err != nil {
		return nil, fmt.Errorf("agree on stopping across ranks: %w", err)
	}
	return t.rideStop(ctx, stop, flags[:])
}

// rideStop takes the decision from flags, the ranks' stop flags summed
// (by agreeStop's all-reduce, or on board the step's gradients): stop is
// this rank's own request.
func (t *Trainer) rideStop(ctx context.Context, stop error, flags []float64) (error, error) {
	if flags[0] > 0 && stop == nil {
		stop = Stop("another rank stopped training")
	}
	code := 0
	for c := len(flags) - 1; c > 0 && code == 0; c-- {
		if flags[c] > 0 {
			code = c
		}
	}
	return t.stopFor(ctx, stop, code)
}

// stopCode is this rank's reason to stop at an optimizer-step boundary:
// the index in stopSignals of the signal received, ctxCancelled, or 0.
func (t *Trainer) stopCode(ctx context.Context) int {
	if !t.trainingLeft(t.pos.Epoch) {
		// The last boundary: no later one would see a signal still on
		// its way, which the end of Fit would drop.
		t.signals.settle()
	}
	code := 0
	for i, s := range stopSignals {
		if s != nil && s == t.signals.received() {
			code = i
		}
	}
	if code == 0 && t.cancelled(ctx) != nil {
		code = ctxCancelled
	}
	return code
}

// cancelled is the error of the context whose cancellation asks the ranks
// to stop: Fit's own (fitCtx) where the loop runs without its
// cancellation, else ctx.
func (t *Trainer) cancelled(ctx context.Context) error {
	if t.fitCtx != nil {
		return t.fitCtx.Err()
	}
	return ctx.Err()
}

// markStop writes this rank's stop flags: whether it asks to stop, and its
// stopCode.
func markStop(flags []float64, stop bool, code int) {
	clear(flags)
	if stop {
		flags[0] = 1
	}
	if code > 0 {
		flags[code] = 1
	}
}

// stopFor acts on the agreed decision: code 0 returns stop; otherwise
// every rank saves the interrupt checkpoint and returns the
// *InterruptedError.
func (t *Trainer) stopFor(ctx context.Context, stop error, code int) (error, error) {
	if code == 0 {
		return t.holdStop(stop), nil
	}
	if sa, ok := t.strat.(strategy.StopAgreer); ok {
		// Every rank knows: one that ends before the others close
		// their groups ends as agreed, not lost.
		sa.StopAgreed()
	}
	ie := &InterruptedError{GlobalStep: t.state.GlobalStep}
	if code == ctxCancelled {
		ie.Err = t.cancelled(ctx)
		if ie.Err == nil {
			ie.Err = errors.New("another rank's context was cancelled")
		}
	} else {
		ie.Signal = stopSignals[code]
	}
	return nil, t.saveInterrupt(ctx, ie)
}

// holdStop applies MinEpochs and MinSteps to an agreed Stop (nil: none
// asked): one asked before both are met is held and training goes on, as
// Lightning's should_stop waits for min_epochs and min_steps; it comes
// back from the first agreement where they are met (every batch end and
// epoch end has one), the same on every rank, whose epochs and steps are
// the same. Epochs ended are t.pos.Epoch: the epoch in progress, or the
// next one once an epoch's end has run.
func (t *Trainer) holdStop(stop error) error {
	c := &t.cfg
	if c.MinEpochs == 0 && c.MinSteps == 0 {
		return stop
	}
	if t.heldStop == nil {
		t.heldStop = stop
	}
	if t.heldStop == nil || t.pos.Epoch >= c.MinEpochs && t.state.GlobalStep >= c.MinSteps {
		stop, t.heldStop = t.heldStop, nil
		return stop
	}
	if !t.warnedHeld && t.state.IsGlobalZero {
		t.warnedHeld = true
		t.cfg.Log.Info().Str("stop", t.heldStop.Error()).Int("epochs", t.pos.Epoch).Int("min_epochs", c.MinEpochs).Int("global_step", t.state.GlobalStep).Int("min_steps", c.MinSteps).
			Msg("training was asked to stop before " + c.name("MinEpochs") + " and " + c.name("MinSteps") + " are met: it goes on, and stops once they are")
	}
	return nil
}

// agreeHookStop has the ranks agree on a Stop from hooks that run outside
// the training batches (err is their error): every rank returns a Stop
// when one asked for it, nil when none did; an error that is not a Stop
// is returned at once, and the other ranks learn of it as of a lost peer.
// A signal or a cancel is not read here but at the epoch's start
// (agreeBatches).
func (t *Trainer) agreeHookStop(ctx context.Context, err error) error {
	stop, fatal := splitStop(err)
	if fatal != nil {
		return fatal
	}
	if stop, err = t.agreeStop(ctx, stop, false); err != nil {
		return err
	}
	return stop
}

// saveInterrupt saves the interrupt checkpoint for ie (every rank calls
// it), requeues a SLURM job stopped by SIGUSR1, and returns ie.
func (t *Trainer) saveInterrupt(ctx context.Context, ie *InterruptedError) error {
	ctx = context.WithoutCancel(ctx)
	what := "the cancelled context"
	if ie.Signal != nil {
		what = strategy.SignalName(ie.Signal)
	}
	dir := t.state.LogDir
	if dir == "" {
		dir = t.cfg.DefaultRootDir
	}
	path := filepath.Join(dir, filepath.FromSlash(InterruptCheckpointName))
	if err := t.saveCheckpoint(ctx, path); err != nil {
		return fmt.Errorf("stopping on %s: %w", what, err)
	}
	if t.strat.Info().WorldSize > 1 {
		if err := strategy.Barrier(ctx, t.strat); err != nil {
			return fmt.Errorf("stopping on %s: wait for rank 0 to save the checkpoint: %w", what, err)
		}
	}
	ie.Checkpoint, ie.SavedOn = path, t.rank0Host
	t.stats.Interrupted = true
	t.stats.InterruptCheckpoint = path
	if ie.Signal == sigUSR1 && t.state.IsGlobalZero {
		if err := requeue(ctx); err != nil {
			return fmt.Errorf("stopping on SIGUSR1: checkpoint saved to %s, but %w", path, err)
		}
		ie.Requeued = true
		t.cfg.Log.Warn().Str("job", slurmJob()).Str("checkpoint", path).Msg("requeued the SLURM job")
	}
	return ie
}

// slurmResume is the checkpoint a requeued SLURM job resumes from when
// Fit was given none: after SIGUSR1 requeued it (SLURM_RESTART_COUNT > 0),
// the newest last.ckpt or interrupted.ckpt under DefaultRootDir, as
// Lightning resumes from its hpc checkpoint. "" otherwise.
func (t *Trainer) slurmResume() string {
	if slurmJob() == "" {
		return ""
	}
	if n, err := strconv.Atoi(os.Getenv("SLURM_RESTART_COUNT")); err != nil || n < 1 {
		return ""
	}
	p, err := ResolveCheckpoint(t.cfg.DefaultRootDir, CkptLast)
	if err != nil {
		// Requeued before any checkpoint was written (preempted early).
		t.cfg.Log.Warn().Err(err).Msg("requeued SLURM job: no checkpoint to resume from, starting from scratch")
		return ""
	}
	t.cfg.Log.Warn().Str("job", slurmJob()).Str("checkpoint", p).Msg("requeued SLURM job: resuming")
	return p
}

// requeue asks SLURM to run this job again, as Lightning's SLURM support
// does on SIGUSR1.
func requeue(ctx context.Context) error {
	job := slurmJob()
	if job == "" {
		return errors.New("SLURM_JOB_ID is not set: cannot requeue the job")
	}
	out, err := exec.CommandContext(ctx, "scontrol", "requeue", job).CombinedOutput()
	if err != nil {
		return fmt.Errorf("scontrol requeue %s: %w: %s", job, err, strings.TrimSpace(string(out)))
	}
	return nil
}
