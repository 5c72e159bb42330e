package trainer

import (
	"context"
	"errors"
	"fmt"
)

// Callback is anything with a name; what it does is found by the hook
// interfaces below, each optional. Its name keys its state in checkpoints.
type Callback interface {
	Name() string
}

// FitStartHook runs once when fitting starts, after setup.
type FitStartHook interface {
	OnFitStart(ctx context.Context, s *State) error
}

// FitEndHook runs once when fitting ends normally.
type FitEndHook interface {
	OnFitEnd(ctx context.Context, s *State) error
}

// TrainEpochStartHook runs before each training epoch.
type TrainEpochStartHook interface {
	OnTrainEpochStart(ctx context.Context, s *State) error
}

// TrainEpochEndHook runs after each training epoch (after its validation).
type TrainEpochEndHook interface {
	OnTrainEpochEnd(ctx context.Context, s *State) error
}

// TrainBatchEndHook runs after each training batch.
type TrainBatchEndHook interface {
	OnTrainBatchEnd(ctx context.Context, s *State) error
}

// BeforeBackwardHook runs for each training micro-batch with its loss
// (Lightning's on_before_backward): the strategy's Step calls it once the
// forward pass has computed the loss and before any op of the backward
// pass runs, so no gradient of the micro-batch exists yet. With ddp,
// sharded and fsdp it runs on every rank with that rank's loss; with dp
// once per micro-batch, with the replicas' losses averaged by rows (the
// loss the step reports). The compiled graph is fixed: the hook sees the
// loss, it cannot change it. An error ends the step before its backward
// pass and Fit returns it, naming the hook; a Stop takes effect at the
// batch end, after the step's backward pass and optimizer step. (A
// strategy of one's own that does not call strategy.TrainOptions'
// BeforeBackward gets the hook after its Step.)
type BeforeBackwardHook interface {
	OnBeforeBackward(ctx context.Context, s *State, loss float64) error
}

// BeforeOptimizerStepHook runs before each optimizer step, on every rank,
// once the gradients are reduced and before they are clipped (Lightning's
// on_before_optimizer_step); s.GradNorm is their global L2 norm. An error
// skips the step; a Stop takes effect at the batch end. With such a hook
// DDP waits for every gradient bucket before the update instead of
// updating each as it lands.
type BeforeOptimizerStepHook interface {
	OnBeforeOptimizerStep(ctx context.Context, s *State) error
}

// AfterOptimizerStepHook runs after each optimizer step (s.GlobalStep
// counts it, s.LR is the learning rate after a per-step scheduler).
//
// In these three per-step hooks s.SaveCheckpoint returns an error: in the
// middle of a step the weights and the loop position disagree, and such a
// checkpoint would not resume where the run stood; save in OnTrainBatchEnd.
type AfterOptimizerStepHook interface {
	OnAfterOptimizerStep(ctx context.Context, s *State) error
}

// ValidationEndHook runs after each validation loop, with its metrics in
// s.Metrics: a Fit's (s.Stage "fit"; its sanity check's with
// s.SanityChecking set) and Trainer.Validate's (s.Stage "validate"), as
// Lightning's on_validation_end.
type ValidationEndHook interface {
	OnValidationEnd(ctx context.Context, s *State) error
}

// TestEndHook runs after a test loop.
type TestEndHook interface {
	OnTestEnd(ctx context.Context, s *State) error
}

// AccumulationScheduler callbacks choose how many batches each optimizer
// step sums in an epoch (GradientAccumulationScheduler). The last one in
// Callbacks that returns a positive number wins over
// Config.AccumulateGradBatches.
type AccumulationScheduler interface {
	AccumulateGradBatches(epoch int) int
}

// ProgressDisplay is implemented by callbacks that draw training progress
// themselves (callbacks.ProgressBar); with one in Callbacks the trainer's
// built-in progress display stays off.
type ProgressDisplay interface {
	DisplaysProgress() bool
}

// StepEndStopper is implemented by a callback, or a module, that says
// whether its hooks run after a training step's backward pass
// (OnAfterBackward, OnBeforeOptimizerStep, OnAfterOptimizerStep and
// OnTrainBatchEnd) may return Stop. When no module or callback with such a hook may, the ranks
// of a multi-process run agree on stopping (a Stop from OnBeforeBackward,
// a signal, a cancelled context) on board the step's last gradient
// all-reduce instead of in an all-reduce of their own after every batch
// (with ddp; other strategies keep the all-reduce). A callback with one of
// those hooks that does not implement StepEndStopper is taken to stop
// there. One that says false and then returns Stop from such a hook fails
// Fit with an error naming the hook: the other ranks could not learn of it
// in time. Its other hooks (OnValidationEnd, OnTrainEpochEnd) may stop
// either way.
type StepEndStopper interface {
	StopsAtStepEnd() bool
}

// LayerShapesUser is a callback that shows each layer's input and output
// shapes (ModelSummary): when one wants them, the trainer builds the
// training graph once before fit start, for a batch of the training
// loader's size (Lightning's example input), and fills State.Layers'
// InShape and OutShape. That graph's Step reports Summarizing.
type LayerShapesUser interface {
	WantsLayerShapes() bool
}

// Stateful callbacks save and restore their state in checkpoints. Rank 0
// writes checkpoints, so a checkpoint holds rank 0's state, and a resume
// loads it into that callback on every rank (as Lightning's checkpoints
// hold rank 0's callback states): a state that differs between ranks must
// be rebuilt, or agreed on with State.Rank0Value, before it is relied on.
//
// It is a callback's state_dict and load_state_dict in Lightning, and its
// on_save_checkpoint and on_load_checkpoint too: what a callback would add
// to the checkpoint there, it returns from StateDict here, and gets back in
// LoadStateDict. A module's own entries go through
// module.CheckpointSaver and module.CheckpointLoader.
type Stateful interface {
	StateDict() ([]byte, error)
	LoadStateDict([]byte) error
}

// ReadyChecker is a callback or logger that can tell, before the run, that
// it cannot work as it is: New (Config.Validate) calls CheckReady on every
// entry of Callbacks and Loggers that has it, and refuses the Config with
// each error, naming the entry; nil lets it run. The library's callbacks
// and loggers refuse a struct literal (&callbacks.ModelCheckpoint{}) of a
// type whose constructor fills and checks its settings, naming that
// constructor: such a value would otherwise fail its first hook, or do
// nothing, far from the line at fault. A callback of yours that needs its
// constructor, or settings only it can check, can do the same.
type ReadyChecker interface {
	CheckReady() error
}

// Logger receives metrics on rank 0.
type Logger interface {
	Name() string
	LogHyperparams(h map[string]any) error
	// LogMetrics gets one row at a global step. The trainer's own rows
	// carry "epoch", as Lightning adds current_epoch to every logged dict:
	// a training or validation row its 0-based epoch, a row of Validate
	// or Test the epochs the evaluated weights completed (after a Fit of
	// two epochs, 2, as Lightning's current_epoch is then).
	LogMetrics(step int, metrics map[string]float64) error
	// Finalize ends each Fit ("success", "failed" or "interrupted") and
	// each Validate and Test that logged into the logger ("success"), as
	// Lightning's finalize ends fit, validate and test. It is not the
	// logger's last call: a Validate or Test after a Fit logs into the
	// Fit's loggers, after their Finalize, so a logger that closes its
	// file there opens it again at the next LogMetrics (as CSVLogger
	// does; ExampleLogger).
	Finalize(status string) error
}

// EvaluationLogger is a Logger that records which rows are an
// evaluation's: the row of metrics a Validate or Test logs (see
// Trainer.Validate) comes to LogEvaluation instead of LogMetrics, stage
// "validate" or "test". Such a row carries as its "epoch" the epochs the
// evaluated weights completed, not an epoch of training: a reader that
// draws by epoch must leave it out, and cannot always tell it by position
// (a Test of a checkpoint's weights in a trainer that did not fit writes it
// alone). CSVLogger and callbacks.JSONLLogger implement it with a column
// (key) EvaluationColumn of 1 in the row; a Logger without it gets the row
// through LogMetrics, as Lightning's loggers do.
type EvaluationLogger interface {
	LogEvaluation(step int, stage string, metrics map[string]float64) error
}

// EvaluationColumn is the column of metrics.csv (and the key of
// metrics.jsonl) that marks an evaluation's row with 1 (EvaluationLogger);
// empty (absent) in every other row. It is numeric, as the metrics beside
// it, so that a reader that knows nothing of it (pandas' mean over a
// group of rows, an older plot) reads it as one more column. No metric may
// take its name (module.ReservedMetricName).
const EvaluationColumn = "evaluation"

// Resumer is a Logger that can forget what it logged after a step. A Fit
// that resumes from a checkpoint saved at global step S calls ResumeAt(S)
// on rank 0 before training, so that the steps an interrupted run trained
// past its last checkpoint, which the resumed run trains again, are not
// recorded twice. CSVLogger implements it.
type Resumer interface {
	ResumeAt(step int) error
}

// RowResumer is a Resumer that also forgets what was logged at the
// checkpoint's own step after the checkpoint was saved. A checkpoint saved
// at an epoch's last step (ModelCheckpoint every N train steps, say) comes
// before the epoch's end logs its epoch metrics and validation at that same
// step; the resumed run runs the epoch's end again and logs them again. A
// Fit that resumes from a checkpoint saved at global step S after rows
// LogMetrics calls at S calls ResumeAtRow(S, rows) instead of ResumeAt(S):
// keep what was logged before step S and the first rows calls at S, forget
// the rest. (A checkpoint written before this was recorded gets ResumeAt.)
// CSVLogger and callbacks.JSONLLogger implement it; TensorBoard forgets by
// step only, so callbacks.TensorBoardLogger keeps ResumeAt.
type RowResumer interface {
	Resumer
	ResumeAtRow(step, rows int) error
}

// Warn logs msg as a warning through the trainer's logger on rank 0, for a
// callback that carries on past something the user should know about.
func (s *State) Warn(msg string) {
	if s.warn != nil && s.IsGlobalZero {
		s.warn(msg)
	}
}

// LogMetrics sends metrics to the trainer's loggers at the current global
// step (rank 0 only; a no-op elsewhere), as a callback's own figures
// (learning rates, timings). In Validate and Test they go where the
// evaluation's metrics go, at the evaluated weights' step, whether or not
// a Fit came before (nowhere when there is no logger).
func (s *State) LogMetrics(m map[string]float64) error {
	if s.log == nil {
		return errors.New("State.LogMetrics: no logger in this stage (Predict without a Fit before it, or a State made outside a Trainer): log from the hooks of Fit, Validate or Test")
	}
	return s.log(m)
}

// Rank0Value returns rank 0's v on every rank. A callback whose decision
// rests on a value that differs between ranks (a step's loss, which each
// rank computes on its own batch; validation and epoch metrics are
// reduced already) takes rank 0's, so that every rank decides alike: a
// checkpoint under fsdp, or with Config.ShardedCheckpoint, is saved by
// every rank or by none. Every rank calls it at the same point (it is a
// collective); outside Fit, and with one process, it returns v.
func (s *State) Rank0Value(ctx context.Context, v float64) (float64, error) {
	if s.rank0 == nil {
		return v, nil
	}
	return s.rank0(ctx, v)
}

// SaveCheckpoint writes a checkpoint of the run to path (on rank 0).
func (s *State) SaveCheckpoint(ctx context.Context, path string) error {
	if s.save == nil {
		return errors.New("checkpoints are not available in this stage")
	}
	return s.save(ctx, path)
}

// SavePending reports whether a callback has asked, in the hook running
// now, for a checkpoint at path: the trainer writes those once every
// callback has run the hook, so the file may not be on disk yet. A
// callback choosing a free name (ModelCheckpoint's -v1) counts them as
// taken. The same on every rank.
func (s *State) SavePending(path string) bool {
	return s.saving != nil && s.saving(path)
}

// StopTraining is returned by a hook to end fitting gracefully after the
// current step: the trainer finishes the epoch's bookkeeping, calls the end
// hooks and returns nil from Fit.
type StopTraining struct{ Reason string }

func (e *StopTraining) Error() string { return fmt.Sprintf("stop training: %s", e.Reason) }

// Stop returns a StopTraining error with a formatted reason.
func Stop(format string, args ...any) error {
	return &StopTraining{Reason: fmt.Sprintf(format, args...)}
}

func isStop(err error) (*StopTraining, bool) {
	var st *StopTraining
	ok := errors.As(err, &st)
	return st, ok
}
