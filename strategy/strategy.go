package strategy

import (
	"context"

	"github.com/rs/zerolog"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/profiler"
)

// Setup is everything a strategy needs to build its replicas. The trainer
// fills it; tests fill it by hand.
type Setup struct {
	Module module.Module
	Specs  []module.Spec
	Dtype  tensor.Dtype
	Seed   uint64
	// Deterministic asks for bitwise-reproducible results: a strategy that
	// cannot promise them for its configuration returns an error from Setup.
	Deterministic bool
	// SyncBatchNorm makes every BatchNorm of the module reduce its batch
	// statistics across all replicas of the job in training (PyTorch's
	// SyncBatchNorm). Strategies with more than one replica give their
	// graphs the means to do so either way, for layers built with
	// nn.BatchNormSync.
	SyncBatchNorm bool
	// Fields describe the training batches (name and per-example shape).
	Fields []data.Field
	// NewOptimizer makes an optimizer and optional scheduler; strategies
	// call it once per replica or shard.
	NewOptimizer func() (optim.Optimizer, optim.Scheduler, error)
	Log          zerolog.Logger
	// Profiler records the strategy's communication spans (gradient
	// buckets on the communication track, waits on the training one).
	// nil: profiler.Nop.
	Profiler profiler.Profiler
}

// profilerOf returns p, or Nop when p is nil.
func profilerOf(p profiler.Profiler) profiler.Profiler {
	if p == nil {
		return profiler.Nop{}
	}
	return p
}

// profiling reports whether p records anything.
func profiling(p profiler.Profiler) bool {
	_, nop := p.(profiler.Nop)
	return p != nil && !nop
}

// StepOptions control one optimizer step.
type StepOptions struct {
	ClipNorm  float64 // clip the global gradient norm to this when > 0
	ClipValue float64 // clip each gradient to ±this when > 0
}

// TrainOptions control one forward and backward pass.
type TrainOptions struct {
	// Sync is false for micro-batches before the last one of an accumulation
	// window: gradients accumulate locally and no communication happens.
	Sync bool
	// Accumulate adds to the gradient buffer instead of overwriting it.
	Accumulate bool
	// Scale multiplies the gradients (1/accumulation steps).
	Scale float64
	// Key identifies the batch in the run (the trainer passes epoch and
	// batch index); randomness inside the graph, such as dropout masks, is
	// drawn from the replica's seed and Key, so a resumed run repeats it.
	Key uint64
}

// SaveOptions control SaveState.
type SaveOptions struct {
	// Full gathers sharded tensors whole onto rank 0.
	Full bool
}

// Strategy runs a module's steps on one or more replicas.
type Strategy interface {
	Name() string
	// Setup builds replicas and optimizers, and makes every replica start
	// from the same parameters and buffers (broadcast from rank 0).
	Setup(ctx context.Context, s Setup) error
	// Rank and WorldSize describe this process in the job (0 and 1 for one
	// process, whatever the number of in-process replicas).
	Rank() int
	WorldSize() int
	// IsGlobalZero reports whether this process writes logs and checkpoints.
	IsGlobalZero() bool
	// Store is this process's view of the model (rank 0's replica).
	Store() *module.Store
	// Optimizer and Scheduler are this process's (nil scheduler if none).
	Optimizer() optim.Optimizer
	Scheduler() optim.Scheduler
	// TrainStep runs forward and backward on b and, when o.Sync, reduces
	// gradients across replicas. It returns the loss and the logged values
	// of this process (not yet reduced across ranks).
	TrainStep(ctx context.Context, b *data.Batch, o TrainOptions) (loss float64, metrics []module.Metric, err error)
	// OptimizerStep updates parameters from the reduced gradients and
	// returns the gradient norm before clipping (NaN if not computed).
	OptimizerStep(ctx context.Context, o StepOptions) (gradNorm float64, err error)
	// EvalStep runs the validation or test graph on b.
	EvalStep(ctx context.Context, mode module.Mode, b *data.Batch) ([]module.Metric, error)
	// PredictStep runs the predict graph on b and returns its output.
	PredictStep(ctx context.Context, b *data.Batch) (*tensor.Dense, error)
	// Reduce combines per-rank values across the job in place, each by its
	// Reduce kind (Mean values arrive as weighted sums with their weights).
	Reduce(ctx context.Context, sums []float64, weights []float64, ops []module.Reduce) error
	// Barrier waits for every rank.
	Barrier(ctx context.Context) error
	// SaveState returns this rank's parameters, buffers, optimizer and
	// scheduler state. Every rank calls it at the same point. With o.Full,
	// tensors sharded across ranks are gathered, so that rank 0 (at least)
	// gets every tensor whole, as a single-file checkpoint needs; without
	// it, each rank gets what it holds, with its spans.
	SaveState(ctx context.Context, o SaveOptions) (*StateDict, error)
	// LoadState restores what sd holds, each rank taking the spans it holds
	// under its own layout (so a dict saved at another world size loads).
	// It checks sd before changing anything. Optimizer and scheduler state
	// are restored when sd has them. Every rank calls it.
	LoadState(ctx context.Context, sd *StateDict) error
	// Teardown releases replicas and connections.
	Teardown(ctx context.Context) error
}

// Launcher is implemented by strategies that must start worker processes
// before training; for a worker process it reports that the caller should
// not run the code after Fit (DDP-spawn workers).
type Launcher interface {
	// Launch is called by the trainer before Setup.
	Launch(ctx context.Context) (worker bool, err error)
}

// FitResult is what a training process reports to the process that
// launched it (DDP-spawn): the figures of its Fit and the latest metrics.
type FitResult struct {
	Metrics          map[string]float64
	Epochs           int
	GlobalStep       int
	TrainSamples     int     // samples trained on by one rank
	TrainSeconds     float64 // wall time in training batches
	TrainSamplesPerS float64 // all ranks together
	LastTrainLoss    float64
	WorldSize        int
	StoppedEarly     string
	// Callbacks is rank 0's state of each stateful callback, by name, as
	// a checkpoint holds it: the launching process loads it into its own
	// callback values (best model path, early stopping's reason).
	Callbacks map[string][]byte
}

// Spawner is implemented by launchers whose training runs entirely in
// worker processes started by Launch (DDP-spawn).
type Spawner interface {
	Launcher
	// Spawned reports, in the launching process after Launch, that the
	// workers have trained: the trainer skips training and takes r; after
	// Setup, Store holds the trained parameters and buffers.
	Spawned() (r FitResult, ok bool)
	// Finish is called by the trainer in a worker once its Fit succeeded
	// (after loggers are closed): rank 0 hands r and its parameters and
	// buffers to the launching process. It returns only on failure; on
	// success the worker process exits with status 0, so a worker never runs
	// the code after Fit.
	Finish(ctx context.Context, r FitResult) error
}

// Rebinder is implemented by strategies that can run another value of the
// module over the parameters and buffers they hold: after Fit, the trainer
// evaluates a freshly built module value (whose Configure declared the same
// tensors, checked by the trainer) with the trained weights, on the ranks
// that trained, instead of building new replicas.
type Rebinder interface {
	Rebind(m module.Module) error
}

// Sampler is implemented by strategies that shard data across ranks; the
// trainer inserts the returned sampler into its loaders unless told not to.
type Sampler interface {
	DistributedSampler(shuffle bool, seed uint64, train bool) data.Sampler
}
