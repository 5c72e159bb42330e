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

type ValidationEpochStartHook interface {
	OnValidationEpochStart(ctx context.Context, s *State) error
}

// ValidationBatchStartHook and ValidationBatchEndHook run around each
// validation batch's ValidationStep (s.BatchIdx is the batch). Per-batch
// values are not reduced across ranks: each rank sees its own.
type ValidationBatchStartHook interface {
	OnValidationBatchStart(ctx context.Context, s *State) error
}

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

type TestEpochStartHook interface {
	OnTestEpochStart(ctx context.Context, s *State) error
}

type TestBatchStartHook interface {
	OnTestBatchStart(ctx context.Context, s *State) error
}

type TestBatchEndHook interface {
	OnTestBatchEnd(ctx context.Context, s *State) error
}

type TestEpochEndHook interface {
	OnTestEpochEnd(ctx context.Context, s *State) error
}

// The predict loop's hooks (Trainer.Predict and PredictEach), in the
// order of the validation loop's.
type PredictStartHook interface {
	OnPredictStart(ctx context.Context, s *State) error
}

type PredictEpochStartHook interface {
	OnPredictEpochStart(ctx context.Context, s *State) error
}

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

type PredictEpochEndHook interface {
	OnPredictEpochEnd(ctx context.Context, s *State) error
}

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
