package strategy

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/rs/zerolog"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/device"
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
	// NewOptimizer makes an optimizer and optional scheduler; a strategy
	// calls it once per process (for its replicas, or its shard), in Setup.
	NewOptimizer func() (optim.Optimizer, optim.Scheduler, error)
	Log          zerolog.Logger
	// Profiler records the strategy's communication spans (gradient
	// buckets on the communication track, waits on the training one).
	// nil: profiler.Nop.
	Profiler profiler.Profiler
	// SettingName names a trainer.Config field ("Precision") in the
	// errors of the steps the strategy runs as its user knows it
	// (trainer.Config.SettingName: a cli's flag); nil or "": its Go name.
	// Strategies pass it to their engines (engine.WithSettingName).
	SettingName func(field string) string
}

// OptimizerOptions control one optimizer step.
type OptimizerOptions struct {
	ClipNorm  float64 // clip the global gradient norm to this when > 0
	ClipValue float64 // clip each gradient to ±this when > 0
	// BeforeUpdate, when set, is called on every rank once the step's
	// gradients are reduced, before clipping and the update, with their
	// global L2 norm (the trainer's OnBeforeOptimizerStep hooks). An error
	// skips the update and is returned. Setting it makes DDP wait for every
	// gradient bucket before updating, and the sharded strategy all-reduce
	// the norm.
	BeforeUpdate func(gradNorm float64) error
}

// TrainOptions control one forward and backward pass (Step in module.Train
// mode; other modes ignore them).
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
	// BeforeBackward, when set, is called once per Step, after the forward
	// pass has computed the loss and before any op of the backward pass
	// runs (the trainer's OnBeforeBackward hooks, Lightning's
	// on_before_backward), with the loss Step returns: with one process per
	// rank (ddp, sharded, fsdp) every rank calls it with its own loss, as
	// Lightning's DDP does; DP, whose replicas share one process, calls it
	// once, with the replicas' losses averaged by rows, as one device would
	// see the batch's, every replica waiting before its backward pass. An
	// error ends the step without a backward pass and Step returns it,
	// wrapped. Set it to a function bound once: Step calls it without
	// allocating.
	BeforeBackward func(loss float64) error
	// Ride, when set on a Sync step, asks for a few values to be summed
	// across ranks with the step's last gradient reduction instead of a
	// Reduce of their own (the trainer's stop agreement). A strategy that
	// carries them (ddp) sets Ride.Rode in OptimizerStep; others leave Ride
	// alone, and the caller then reduces the values itself: fsdp and
	// sharded stage 2, whose last reduction is a reduce-scatter (a sum
	// there reaches only the rank owning the values' block), sharded stage
	// 1, whose unit all-reduces could carry them but do not yet, and dp and
	// single, which run one process and agree with nobody.
	Ride *Ride
}

// Ride is values summed across ranks on board a training step's gradient
// reduction (TrainOptions.Ride). They travel in the gradients' dtype:
// counts up to 2^24 stay exact in float32.
type Ride struct {
	// Values holds this rank's values once Sample has run, and their sum
	// over the ranks once OptimizerStep has returned with Rode set. Its
	// length is fixed for a run.
	Values []float64
	// Sample writes this rank's values into Values. The strategy calls it
	// once per Sync step, as it queues the step's last gradient bucket:
	// inside Step (on the goroutine that runs the pass, after
	// TrainOptions.BeforeBackward), before any later hook of the step.
	Sample func(values []float64)
	// Rode is set by a strategy that carried Values: the caller clears it
	// before each Step and reads it after OptimizerStep.
	Rode bool
}

// StepResult is what one Step returns for this process.
type StepResult struct {
	// Loss is the training loss (module.Train only).
	Loss float64
	// Metrics are the logged values of this process, not yet reduced
	// across ranks.
	Metrics []module.Metric
	// Output is the predict graph's output (module.Predict only).
	Output *tensor.Dense
}

// SaveOptions control SaveState.
type SaveOptions struct {
	// Full gathers sharded tensors whole onto rank 0.
	Full bool
}

// Info describes a strategy and this process's place in the job.
type Info struct {
	Name string
	// Rank and WorldSize: 0 and 1 for one process, whatever the number of
	// in-process replicas.
	Rank, WorldSize int
	// GlobalZero: this process writes logs and checkpoints.
	GlobalZero bool
}

// Strategy runs a module's steps on one or more replicas. Abilities beyond
// these eight methods are optional interfaces that callers test for:
// Replica, Launcher, FitRunner, Rebinder, Sampler, MemoryReporter,
// GroupJoiner.
type Strategy interface {
	// Info is valid after construction; Rank and WorldSize may change in
	// Setup when the job's group is joined there.
	Info() Info
	// Setup builds replicas and optimizers, and makes every replica start
	// from the same parameters and buffers (broadcast from rank 0).
	Setup(ctx context.Context, s Setup) error
	// Step runs the graph of mode on b. In module.Train it runs forward and
	// backward and, when o.Sync, reduces gradients across replicas; in
	// module.Predict it returns the output.
	Step(ctx context.Context, mode module.Mode, b *data.Batch, o TrainOptions) (StepResult, error)
	// OptimizerStep updates parameters from the reduced gradients and
	// returns the gradient norm before clipping (NaN if not computed).
	OptimizerStep(ctx context.Context, o OptimizerOptions) (gradNorm float64, err error)
	// Reduce combines per-rank values across the job in place, each by its
	// Reduce kind (Mean values arrive as weighted sums with their weights).
	// With no values it is a barrier: it returns once every rank called it.
	Reduce(ctx context.Context, sums []float64, weights []float64, ops []module.Reduce) error
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

// Barrier waits for every rank of s's job: Reduce with no values.
func Barrier(ctx context.Context, s Strategy) error { return s.Reduce(ctx, nil, nil, nil) }

// Replica is implemented by strategies that hold the whole model in this
// process: Store is this process's parameters, buffers and gradients (rank
// 0's replica of an in-process group). A strategy that keeps parameters
// sharded does not implement it; its state is reached through SaveState.
type Replica interface {
	Store() *module.Store
}

// Launcher is implemented by strategies that must start processes before
// Setup (DDP starting its local ranks); for a worker process it reports
// that the caller should not run the code after Fit (DDP-spawn workers).
type Launcher interface {
	// Launch is called by the trainer before Setup.
	Launch(ctx context.Context) (worker bool, err error)
}

// FitResult is what a training process reports to the process that
// launched it (DDP-spawn): the figures of its Fit and the latest metrics,
// meant as trainer.Stats' are. Epochs and GlobalStep are the run's (a
// resumed Fit counts those before it); the training figures are this
// Fit's own.
type FitResult struct {
	Metrics          map[string]float64
	Epochs           int     // epochs the run completed
	GlobalStep       int     // optimizer steps the run has taken
	TrainSamples     int     // samples one rank trained on in this Fit
	TrainSeconds     float64 // this Fit's wall time in training batches
	TrainSamplesPerS float64 // this Fit's throughput, all ranks together
	LastTrainLoss    float64
	WorldSize        int
	StoppedEarly     string
	// Callbacks is rank 0's state of each stateful callback, by name, as
	// a checkpoint holds it: the launching process loads it into its own
	// callback values (best model path, early stopping's reason).
	Callbacks map[string][]byte
	// LogDir is the run directory the Fit logged into, where the launching
	// process's Validate and Test log too.
	LogDir string
}

// ErrScalarPrediction is what a strategy's Step returns in predict mode
// when the module's PredictStep returned a scalar node: predictions are
// gathered row by row, one for each example of the batch.
var ErrScalarPrediction = errors.New("predict step: PredictStep returned a scalar: predictions are rows, one for each example of the batch; return a tensor whose first axis is the batch, as [batch] or [batch, classes]")

// FitInterrupted is the error fit (the function a FitRunner is handed)
// returns when a signal or a cancelled context stopped training after
// every rank saved Checkpoint, and the error RunFit returns when that
// happened in the processes it ran fit in. The trainer turns it into its
// *trainer.InterruptedError.
type FitInterrupted struct {
	// Signal is the signal that stopped training (syscall.SIGINT,
	// SIGTERM, SIGUSR1), 0 when a context was cancelled.
	Signal syscall.Signal
	// Cancelled is that context's error (context.DeadlineExceeded, say)
	// when Signal is 0, for the message; nil reads as context.Canceled.
	Cancelled error
	// GlobalStep is the optimizer steps taken; Checkpoint the file that
	// resumes the run.
	GlobalStep int
	Checkpoint string
	// Result is rank 0's Fit so far.
	Result FitResult
	// Err is the error fit returned in this process; nil when training
	// ran in other processes.
	Err error
}

func (e *FitInterrupted) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	// The trainer's InterruptedError reads as this (its Summary).
	why := context.Canceled.Error()
	if e.Signal != 0 {
		why = SignalName(e.Signal)
	} else if e.Cancelled != nil {
		why = e.Cancelled.Error()
	}
	if e.Checkpoint == "" {
		return fmt.Sprintf("training interrupted (%s) before it began; nothing was saved", why)
	}
	return fmt.Sprintf("training interrupted (%s) at global step %d; checkpoint saved to %s", why, e.GlobalStep, e.Checkpoint)
}

func (e *FitInterrupted) Unwrap() error { return e.Err }

// ExitCode is the status a process stopped this way exits with: 128 plus
// the signal, as a shell reports a process the signal killed; 1 for a
// cancelled context.
func (e *FitInterrupted) ExitCode() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	return 1
}

// FitRunner is implemented by strategies that decide where training runs
// (DDP-spawn): the trainer hands RunFit its training, fit, once Setup is
// done, instead of calling it.
type FitRunner interface {
	// RunFit either calls fit here and hands its result on (remote false;
	// a DDP-spawn worker gives rank 0's result and weights to the launching
	// process and exits with status 0, so it returns only on failure), or
	// has other processes train and returns their result with remote true,
	// the trained weights loaded into this process's replica.
	RunFit(ctx context.Context, fit func(context.Context) (FitResult, error)) (r FitResult, remote bool, err error)
}

// Rebinder is implemented by strategies that can run another value of the
// module over the parameters and buffers they hold: after Fit, the trainer
// evaluates a freshly built module value (whose Configure declared the same
// tensors, checked by the trainer) with the trained weights, on the ranks
// that trained, instead of building new replicas.
type Rebinder interface {
	Rebind(m module.Module) error
}

// GroupJoiner is implemented by strategies that start and join a job's
// processes themselves (ddp: self-launched local ranks, or the ranks a
// launcher describes). Another strategy built by name over the same
// processes (fsdp) builds one, calls its Launch (Launcher) where the trainer
// calls its own, and takes the group over in Setup instead of calling
// the joiner's Setup; the joiner's Teardown then only waits for the
// processes it started.
type GroupJoiner interface {
	// JoinGroup joins the job's group (once, before Setup would) and hands
	// it over with the device of this process's rank: the caller owns the
	// group and closes it.
	JoinGroup(ctx context.Context) (collective.Collective, device.Device, error)
}

// PeerLossExplainer is implemented by a GroupJoiner that started the job's
// local ranks itself (ddp): ExplainPeerLoss returns err, an error that lost
// a peer (collective.ErrPeerLost), with what the launcher knows of the rank
// that ended (its exit status, its rank_N.log and the log's last lines), or
// err unchanged. A strategy that took the joiner's group over calls it when
// it fails, as the joiner itself does.
type PeerLossExplainer interface {
	ExplainPeerLoss(err error) error
}

// StopAgreer is implemented by strategies whose group warns when a peer
// ends: the trainer calls StopAgreed once every rank agreed to stop on a
// signal or a cancelled context, after which a rank ending before the
// others is the stop they agreed on (collective.StopAgreed), not a loss.
type StopAgreer interface {
	StopAgreed()
}

// Sampler is implemented by strategies that shard data across ranks; the
// trainer inserts the returned sampler into its loaders unless told not to.
type Sampler interface {
	DistributedSampler(shuffle bool, seed uint64, train bool) data.Sampler
}

// Memory is what one rank holds for training, in bytes.
type Memory struct {
	// Params is the parameters and buffers (a full replica on every rank;
	// under fsdp, this rank's shard and the buffers).
	Params int
	// LocalGrads is the gradient buffer backward writes into (full size:
	// every rank differentiates the whole model; under fsdp, the shard,
	// each unit's whole gradient living only until it is reduce-scattered).
	LocalGrads int
	// ReducedGrads is what the rank keeps of the reduced gradients for its
	// update: all of them under DDP and ZeRO stage 1, its shard under stage 2.
	ReducedGrads int
	// OptimizerState is the optimizer's per-parameter state (momentum,
	// moments): all of it under DDP, its shard under ZeRO.
	OptimizerState int
}

// MemoryReporter is implemented by strategies that account for the memory
// they hold per rank.
type MemoryReporter interface {
	Memory() Memory
}
