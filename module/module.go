package module

import (
	"context"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/optim"
)

// Module is what a user implements: declare tensors once, build the training
// graph for a batch as often as asked.
type Module interface {
	// Configure declares every parameter and buffer. It is called once per
	// model, before any graph is built.
	Configure(b *Builder) error
	// TrainingStep builds the training graph for a batch and returns the
	// scalar loss to minimise.
	TrainingStep(s *Step) (*G.Node, error)
}

// Validator builds the validation graph (eval mode): log metrics with s.Log.
type Validator interface {
	ValidationStep(s *Step) error
}

// Tester builds the test graph (eval mode).
type Tester interface {
	TestStep(s *Step) error
}

// Predictor builds the predict graph and returns its output node (one row per
// example).
type Predictor interface {
	PredictStep(s *Step) (*G.Node, error)
}

// OptimizerConfigurer makes the optimizer and an optional scheduler. It is a
// factory: strategies call it once per replica or shard. Without it the
// trainer uses Adam with lr 1e-3.
type OptimizerConfigurer interface {
	ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error)
}

// HParamser reports hyperparameters for loggers and checkpoints.
type HParamser interface {
	HParams() map[string]any
}

// Hooks: each is optional; the trainer's dispatcher calls them.

// FitStarter is called at the start of each Fit, after Setup("fit") and
// the OnLoadCheckpoint of a resumed run (Lightning's on_fit_start);
// FitEnder at its end, after TrainEnder, when it did not fail
// (on_fit_end). Each hook's error ends the call, named after the hook.
type FitStarter interface {
	OnFitStart(ctx context.Context) error
}

// FitEnder is described with FitStarter.
type FitEnder interface {
	OnFitEnd(ctx context.Context) error
}

// TrainEpochStarter is called at the start of each training epoch with
// its number, from 0 (Lightning's on_train_epoch_start); TrainEpochEnder
// at its end, after the epoch's validation (on_train_epoch_end).
type TrainEpochStarter interface {
	OnTrainEpochStart(ctx context.Context, epoch int) error
}

// TrainEpochEnder is described with TrainEpochStarter.
type TrainEpochEnder interface {
	OnTrainEpochEnd(ctx context.Context, epoch int) error
}

// TrainBatchStarter is called before each training batch's TrainingStep
// with the batch and its index in the epoch (Lightning's
// on_train_batch_start); TrainBatchEnder after the batch, after its
// optimizer step when the batch ends an accumulation window
// (on_train_batch_end).
type TrainBatchStarter interface {
	OnTrainBatchStart(ctx context.Context, b *data.Batch, batchIdx int) error
}

// TrainBatchEnder is described with TrainBatchStarter.
type TrainBatchEnder interface {
	OnTrainBatchEnd(ctx context.Context, b *data.Batch, batchIdx int) error
}

// BeforeBackwarder sees each training micro-batch's loss (Lightning's
// on_before_backward), once the forward pass has computed it and before
// any op of the backward pass runs: no gradient of the micro-batch exists
// yet. Every rank of ddp, sharded and fsdp sees its own loss; dp calls it
// once per micro-batch with the replicas' losses averaged by rows. An error
// ends the step before its backward pass.
type BeforeBackwarder interface {
	OnBeforeBackward(ctx context.Context, loss float64) error
}

// BeforeOptimizerStepper is called before each optimizer step, once the
// gradients are reduced across ranks and before clipping, with their
// global L2 norm (Lightning's on_before_optimizer_step).
type BeforeOptimizerStepper interface {
	OnBeforeOptimizerStep(ctx context.Context, gradNorm float64) error
}

// AfterOptimizerStepper is called after each optimizer step with the
// number of steps taken (Lightning's optimizer_step hook, after the step).
type AfterOptimizerStepper interface {
	OnAfterOptimizerStep(ctx context.Context, globalStep int) error
}

// ValidationEpochEnder is described with ValidationStarter.
type ValidationEpochEnder interface {
	OnValidationEpochEnd(ctx context.Context, epoch int) error
}

// TrainStarter is called once training starts, after the sanity check
// (Lightning's on_train_start); TrainEnder once it ends, normally or
// stopped by a hook (on_train_end), before FitEnder.
type TrainStarter interface {
	OnTrainStart(ctx context.Context) error
}

// TrainEnder is described with TrainStarter.
type TrainEnder interface {
	OnTrainEnd(ctx context.Context) error
}

// ValidationStarter and ValidationEnder frame each validation loop (a
// Fit's, the sanity check's and Trainer.Validate's), as Lightning's
// on_validation_start and on_validation_end; ValidationEpochStarter and
// ValidationEpochEnder run just inside them; ValidationBatchStarter and
// ValidationBatchEnder around each batch's ValidationStep.
type ValidationStarter interface {
	OnValidationStart(ctx context.Context) error
}

// ValidationEnder is described with ValidationStarter.
type ValidationEnder interface {
	OnValidationEnd(ctx context.Context) error
}

// ValidationEpochStarter is described with ValidationStarter.
type ValidationEpochStarter interface {
	OnValidationEpochStart(ctx context.Context, epoch int) error
}

// ValidationBatchStarter is described with ValidationStarter.
type ValidationBatchStarter interface {
	OnValidationBatchStart(ctx context.Context, b *data.Batch, batchIdx int) error
}

// ValidationBatchEnder is described with ValidationStarter.
type ValidationBatchEnder interface {
	OnValidationBatchEnd(ctx context.Context, b *data.Batch, batchIdx int) error
}

// The test loop's hooks (Trainer.Test), in the order of the validation
// loop's.
type TestStarter interface {
	OnTestStart(ctx context.Context) error
}

// TestEnder is described with TestStarter.
type TestEnder interface {
	OnTestEnd(ctx context.Context) error
}

// TestEpochStarter is described with TestStarter.
type TestEpochStarter interface {
	OnTestEpochStart(ctx context.Context) error
}

// TestEpochEnder is described with TestStarter.
type TestEpochEnder interface {
	OnTestEpochEnd(ctx context.Context) error
}

// TestBatchStarter is described with TestStarter.
type TestBatchStarter interface {
	OnTestBatchStart(ctx context.Context, b *data.Batch, batchIdx int) error
}

// TestBatchEnder is described with TestStarter.
type TestBatchEnder interface {
	OnTestBatchEnd(ctx context.Context, b *data.Batch, batchIdx int) error
}

// The predict loop's hooks (Trainer.Predict and PredictEach), in the order
// of the validation loop's.
type PredictStarter interface {
	OnPredictStart(ctx context.Context) error
}

// PredictEnder is described with PredictStarter.
type PredictEnder interface {
	OnPredictEnd(ctx context.Context) error
}

// PredictEpochStarter is described with PredictStarter.
type PredictEpochStarter interface {
	OnPredictEpochStart(ctx context.Context) error
}

// PredictEpochEnder is described with PredictStarter.
type PredictEpochEnder interface {
	OnPredictEpochEnd(ctx context.Context) error
}

// PredictBatchStarter is described with PredictStarter.
type PredictBatchStarter interface {
	OnPredictBatchStart(ctx context.Context, b *data.Batch, batchIdx int) error
}

// PredictBatchEnder is described with PredictStarter.
type PredictBatchEnder interface {
	OnPredictBatchEnd(ctx context.Context, b *data.Batch, batchIdx int) error
}

// SetUpper is called at the start of each Fit, Validate, Test and Predict
// call with its stage ("fit", "validate", "test" or "predict"), as
// Lightning's setup(stage), and TearDowner at its end (teardown(stage)),
// after the call's last hook and not after a failure. The trainer package
// documentation says where exactly.
type SetUpper interface {
	Setup(ctx context.Context, stage string) error
}

// TearDowner is described with SetUpper.
type TearDowner interface {
	Teardown(ctx context.Context, stage string) error
}

// CheckpointSaver adds the module's own state (a vocabulary, a counter,
// anything not a parameter or buffer) to every checkpoint the trainer
// writes, as Lightning's on_save_checkpoint adds entries to the checkpoint:
// the bytes are stored as they are. Every rank is asked; rank 0's are
// written. CheckpointLoader is given them back when a Fit resumes from
// the checkpoint or Validate, Test or Predict load its weights
// (on_load_checkpoint), on every rank: nil when the checkpoint holds none
// (written without a CheckpointSaver, or by an older fulgur).
type CheckpointSaver interface {
	OnSaveCheckpoint(ctx context.Context) ([]byte, error)
}

// CheckpointLoader is described with CheckpointSaver.
type CheckpointLoader interface {
	OnLoadCheckpoint(ctx context.Context, state []byte) error
}

// AfterBackwarder is called after each training micro-batch's backward
// pass (Lightning's on_after_backward), before the optimizer step; the
// trainer package documentation says what the gradients are then.
type AfterBackwarder interface {
	OnAfterBackward(ctx context.Context) error
}

// BeforeZeroGrader is called once per optimizer step, at its accumulation
// window's first micro-batch, after the forward pass and before the
// backward pass that replaces the previous step's gradients, just before
// BeforeBackwarder (Lightning's on_before_zero_grad).
type BeforeZeroGrader interface {
	OnBeforeZeroGrad(ctx context.Context) error
}
