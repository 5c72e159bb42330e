package trainer

import "context"

// The hooks of each loop besides those in callback.go, as Lightning 2.x's
// Callback has them. The order in which Fit, Validate, Test and Predict
// call every hook is written down in doc.go.

// SanityCheckStartHook and SanityCheckEndHook frame Fit's sanity check
// (Config.NumSanityValSteps), which runs the validation hooks in between
// with State.SanityChecking set.
type SanityCheckStartHook interface {
	OnSanityCheckStart(ctx context.Context, s *State) error
}

// SanityCheckEndHook is described with SanityCheckStartHook.
type SanityCheckEndHook interface {
	OnSanityCheckEnd(ctx context.Context, s *State) error
}

// TrainStartHook runs once training starts, after the sanity check and
// before the first epoch; TrainEndHook once it ends, after the last
// epoch or a Stop, and before FitEndHook. Neither runs when a resumed
// Fit has nothing left to train, nor after an error.
type TrainStartHook interface {
	OnTrainStart(ctx context.Context, s *State) error
}

// TrainEndHook is described with TrainStartHook.
type TrainEndHook interface {
	OnTrainEnd(ctx context.Context, s *State) error
}

// TrainBatchStartHook runs before each training batch's forward pass
// (s.BatchIdx is the batch).
type TrainBatchStartHook interface {
	OnTrainBatchStart(ctx context.Context, s *State) error
}

// ValidationStartHook runs when a validation loop starts (a Fit's, the
// sanity check's, Trainer.Validate's); ValidationEpochStartHook next,
// before the first batch.
type ValidationStartHook interface {
	OnValidationStart(ctx context.Context, s *State) error
}

// ValidationEpochStartHook is described with ValidationStartHook.
type ValidationEpochStartHook interface {
	OnValidationEpochStart(ctx context.Context, s *State) error
}

// ValidationBatchStartHook and ValidationBatchEndHook run around each
// validation batch's ValidationStep (s.BatchIdx is the batch). Per-batch
// values are not reduced across ranks: each rank sees its own.
type ValidationBatchStartHook interface {
	OnValidationBatchStart(ctx context.Context, s *State) error
}

// ValidationBatchEndHook is described with ValidationBatchStartHook.
type ValidationBatchEndHook interface {
	OnValidationBatchEnd(ctx context.Context, s *State) error
}

// ValidationEpochEndHook runs after the last validation batch, with the
// loop's metrics reduced across ranks in s.Metrics, just before
// ValidationEndHook.
type ValidationEpochEndHook interface {
	OnValidationEpochEnd(ctx context.Context, s *State) error
}

// The test loop's hooks (Trainer.Test), in the order of the validation
// loop's; TestEndHook is in callback.go.
type TestStartHook interface {
	OnTestStart(ctx context.Context, s *State) error
}

// TestEpochStartHook is described with TestStartHook.
type TestEpochStartHook interface {
	OnTestEpochStart(ctx context.Context, s *State) error
}

// TestBatchStartHook is described with TestStartHook.
type TestBatchStartHook interface {
	OnTestBatchStart(ctx context.Context, s *State) error
}

// TestBatchEndHook is described with TestStartHook.
type TestBatchEndHook interface {
	OnTestBatchEnd(ctx context.Context, s *State) error
}

// TestEpochEndHook is described with TestStartHook.
type TestEpochEndHook interface {
	OnTestEpochEnd(ctx context.Context, s *State) error
}

// The predict loop's hooks (Trainer.Predict and PredictEach), in the
// order of the validation loop's.
type PredictStartHook interface {
	OnPredictStart(ctx context.Context, s *State) error
}

// PredictEpochStartHook is described with PredictStartHook.
type PredictEpochStartHook interface {
	OnPredictEpochStart(ctx context.Context, s *State) error
}

// PredictBatchStartHook is described with PredictStartHook.
type PredictBatchStartHook interface {
	OnPredictBatchStart(ctx context.Context, s *State) error
}

// PredictBatchEndHook runs after each predict batch with its predictions
// (Lightning's on_predict_batch_end, where a BasePredictionWriter
// writes): this rank's rows, as PredictEach hands them out, valid during
// the call only.
type PredictBatchEndHook interface {
	OnPredictBatchEnd(ctx context.Context, s *State, out PredictBatch) error
}

// PredictEpochEndHook is described with PredictStartHook.
type PredictEpochEndHook interface {
	OnPredictEpochEnd(ctx context.Context, s *State) error
}

// PredictEndHook is described with PredictStartHook.
type PredictEndHook interface {
	OnPredictEnd(ctx context.Context, s *State) error
}

// ExceptionHook runs when Fit, Validate, Test, Predict or PredictEach
// fails, in every process whose call returns the error (with ddp_spawn,
// the workers' and the launching process's), with that error
// (Lightning's on_exception): an interruption (*InterruptedError) counts,
// a Stop does not. It runs before the loggers are finalized as "failed";
// it may not save a checkpoint (the weights may be those of half a step)
// nor call Rank0Value (the other ranks may not be failing). Its own error
// joins the call's, which stays first.
type ExceptionHook interface {
	OnException(ctx context.Context, s *State, err error) error
}

// SetupHook runs at the start of each Fit, Validate, Test and Predict
// (PredictEach too) with its stage ("fit", "validate", "test" or
// "predict"; s.Stage says the same), as Lightning's setup(stage), and
// TeardownHook at its end, teardown(stage): after OnFitEnd (OnValidationEnd,
// OnTestEnd, OnPredictEnd), on success or a Stop, not after a failure
// (OnException runs then) nor an interruption, as in Lightning.
//
// Setup runs in every process that runs the call (each ddp_spawn worker
// for Fit), once its strategy is set up: its ranks joined (a rank is
// known only then: a launcher or a rendezvous assigns it), the replicas
// or shards built from the module's Configure. Lightning calls setup
// before configure_model and the strategy's setup, so that a
// LightningModule can build layers there; a fulgur module declares its
// tensors in Configure, which reads its fields: shape it from the data
// before Fit. Setup comes before anything else of the call: before a
// checkpoint is restored (FromCheckpoint, WithCheckpoint; Lightning's
// setup also precedes the restore), the hyperparameters are logged and
// OnFitStart. A Stop from either means nothing and is dropped; an error
// ends the call.
type SetupHook interface {
	Setup(ctx context.Context, s *State, stage string) error
}

// TeardownHook is described with SetupHook.
type TeardownHook interface {
	Teardown(ctx context.Context, s *State, stage string) error
}

// AfterBackwardHook runs after each training micro-batch's backward pass
// and before the optimizer step (Lightning's on_after_backward), on every
// rank. What s.Weights' gradients are then:
//
//   - a micro-batch inside an accumulation window: this process's
//     gradients accumulated so far in the window (each scaled by
//     1/AccumulateGradBatches), not reduced across ranks, as Lightning's
//     under DDP's no_sync;
//   - the window's last micro-batch: the window's gradients reduced across
//     ranks. With ddp the reduction overlaps the backward pass, bucket by
//     bucket, and the update may follow each bucket as it lands; with this
//     hook the trainer waits, as with OnBeforeOptimizerStep, until every
//     bucket is reduced, then runs it (from the optimizer step, just before
//     OnBeforeOptimizerStep, before clipping), so it sees the whole
//     reduced gradient, as Lightning's DDP hook sees it once backward has
//     returned.
//
// sharded (stage 2) and fsdp keep no whole gradient in any process
// (s.Weights says so). A Stop takes effect at the batch end; a hook that
// may stop at the window's last micro-batch counts as one after the
// backward pass for StepEndStopper. s.SaveCheckpoint returns an error, as
// in the other per-step hooks.
type AfterBackwardHook interface {
	OnAfterBackward(ctx context.Context, s *State) error
}

// BeforeZeroGradHook runs once per optimizer step, at the accumulation
// window's first micro-batch, between its forward pass and the backward
// pass that replaces the previous step's gradients, just before
// OnBeforeBackward (Lightning's on_before_zero_grad, which its automatic
// optimization calls after training_step and before zero_grad and
// backward), on every rank (with dp once). s.SaveCheckpoint returns an
// error; a Stop takes effect at the batch end.
type BeforeZeroGradHook interface {
	OnBeforeZeroGrad(ctx context.Context, s *State) error
}
