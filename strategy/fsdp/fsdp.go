package fsdp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

var (
	_ strategy.Rebinder       = (*FSDP)(nil)
	_ strategy.Launcher       = (*FSDP)(nil)
	_ strategy.Strategy       = (*FSDP)(nil)
	_ strategy.Sampler        = (*FSDP)(nil)
	_ strategy.MemoryReporter = (*FSDP)(nil)
)

// Wrap says how the parameters are cut into units, the blocks that are
// gathered whole for their forward and backward.
type Wrap int

const (
	// WrapLayer makes one unit per layer: the parameters whose names share
	// everything before the last dot ("fc1.weight" and "fc1.bias"), as
	// PyTorch's ModuleWrapPolicy does for every layer.
	WrapLayer Wrap = iota
	// WrapSize joins consecutive parameters, in declaration order, until a
	// unit holds at least MinUnitParams elements (PyTorch's
	// size_based_auto_wrap_policy); the last unit takes what is left.
	WrapSize
)

func (w Wrap) String() string {
	switch w {
	case WrapLayer:
		return "layer"
	case WrapSize:
		return "size"
	}
	return fmt.Sprintf("Wrap(%d)", int(w))
}

// DefaultMinUnitParams is WrapSize's unit size when MinUnitParams is 0.
const DefaultMinUnitParams = 1 << 20

// Config configures one rank of FSDP.
type Config struct {
	// Group is this rank's collective, already joined (tests pass the ranks
	// of inproc.NewGroup). FSDP takes it over and closes it at Teardown or
	// on the first failure. Built by name ("fsdp"), FSDP has none: it
	// starts and joins the job's processes through a ddp strategy (see
	// strategy.GroupJoiner).
	Group collective.Collective
	// ShardGroup and ReplicaGroup, both set, make the strategy
	// HYBRID_SHARD (PyTorch): parameters, gradients and optimizer state are
	// sharded across the ranks of ShardGroup only (the ranks of a node, say)
	// and replicated across ReplicaGroup (the ranks holding the same shard:
	// one per node), whose gradients are all-reduced after each unit's
	// reduce-scatter. Each is this rank's collective of its group, already
	// joined; Group is still the whole job's (setup, buffers, metrics, the
	// final barrier). Their sizes multiply to Group's. Neither set: every
	// rank of Group shares one sharding (FULL_SHARD).
	ShardGroup, ReplicaGroup collective.Collective
	// Sharding is PyTorch's sharding_strategy (FullShard by default).
	// HybridShard and NoShard split Group into shard and replica groups
	// themselves (collective.Splitter), in place of ShardGroup and
	// ReplicaGroup; ShardGradOp sets KeepAfterForward.
	Sharding Sharding
	// NodeSize is HybridShard's ranks per node: node k holds ranks
	// k×NodeSize to (k+1)×NodeSize-1, as torchrun, srun's block
	// distribution and mpirun --map-by slot number them. Built by name it
	// comes from the launcher (LOCAL_WORLD_SIZE), or is the whole job when
	// this process launched it.
	NodeSize int
	// Wrap is the wrapping policy (WrapLayer by default).
	Wrap Wrap
	// MinUnitParams is WrapSize's unit size in elements. 0:
	// DefaultMinUnitParams.
	MinUnitParams int
	// KeepAfterForward keeps each unit's parameters gathered from its
	// forward to its backward (PyTorch's reshard_after_forward=False,
	// SHARD_GRAD_OP): one gather per unit and step instead of two, and the
	// whole model gathered at the end of the forward pass. By default a
	// unit is freed after its forward and gathered again for its backward
	// (FULL_SHARD).
	KeepAfterForward bool
	// NoPrefetch gathers each unit when it is reached instead of while the
	// unit before it computes.
	NoPrefetch bool
	// SyncMicroBatches reduce-scatters every micro-batch of a gradient
	// accumulation window, keeping a rank's gradients at 1/N of the model
	// throughout. By default a micro-batch with TrainOptions.Sync false (all
	// but the window's last, as the trainer's AccumulateGradBatches runs
	// them) communicates nothing: each unit's whole gradient is added into
	// a local, unsharded gradient of the whole model, reduce-scattered with
	// the window's last micro-batch (PyTorch FSDP's no_sync()). That costs
	// one gradient of the whole model per rank (N times the shard: 4 bytes
	// a parameter in float32), made at the first micro-batch without Sync
	// and kept for the windows that follow, in exchange for one
	// reduce-scatter per window instead of one per micro-batch. Without
	// accumulation the two are the same.
	SyncMicroBatches bool
	// CPUOffload asks for the optimizer state's shards (and the parameter
	// and gradient shards) to live in host memory (PyTorch's CPUOffload).
	// In this build they always do, whatever the device: Setup accepts it
	// and logs one line saying so.
	CPUOffload bool
	// Device runs this rank's graphs. nil: the CPU.
	Device device.Device
	// Timeout bounds Teardown's final barrier. 0: collective.DefaultTimeout.
	Timeout time.Duration
	Log     zerolog.Logger
}

// FSDP is fully sharded data parallelism (ZeRO stage 3): rank r of N keeps
// 1/N of every unit's parameters, of their gradients and of the optimizer
// state. Each unit's parameters are all-gathered into a small pool of
// unit-sized buffers just before the first op that reads them, the next
// unit's gather running while this one computes, and freed after their
// last use (after the forward pass, then again after the backward pass,
// unless KeepAfterForward); each unit's gradient is reduce-scattered
// (mean) as soon as the backward pass has produced it, into this rank's
// shard. The optimizer updates the shard only: parameters are never whole
// on a rank outside a unit's stretch of use.
//
// A training Step with TrainOptions.Sync reduce-scatters its gradients
// (and those held since the accumulation window began) into the shard; one
// without Sync keeps them in a local gradient of the whole model and
// communicates nothing, unless Config.SyncMicroBatches (see there for the
// memory each costs). Every Step, evaluation included, gathers
// parameters collectively, so every rank must run the same number of
// steps: the distributed sampler pads evaluation data as it pads training
// data, and evaluation leaves the padded rows out of metrics (a batch is
// run on its real rows) and predictions (zeros, which the trainer's
// gathering adds to the rank that owns the row).
type FSDP struct {
	cfg  Config
	prof profiler.Profiler
	c    collective.Group // the job
	sc   collective.Group // the ranks sharing a sharding (c without hybrid sharding)
	rc   collective.Group // the ranks holding the same shard (nil without hybrid sharding)
	dev  device.Device

	job      *replica.Job // the job's group, the first failure, Launch and Teardown
	dtype    tensor.Dtype
	store    *module.Store // layout: buffers only
	eng      *engine.Engine
	rep      *replica.Graphs
	units    []engine.Unit
	chunks   []replica.Chunk // this rank's part of each unit
	shardLen int
	p32, g32 []float32 // this rank's parameters and gradients
	p64, g64 []float64
	tmp32    []float32 // reduce-scatter landing when accumulating (made on first use)
	tmp64    []float64
	opt      optim.Optimizer
	sched    optim.Scheduler
	scale    float64 // of the training run in progress
	reduced  bool    // a training Step ran since the last update
	norm     []float64

	// hold: the training run in progress keeps its gradients local (a
	// micro-batch without Sync); held32/held64 are the whole model's
	// gradient summed (scaled) over such micro-batches (made on first use),
	// held[u] whether unit u's part holds any not yet reduce-scattered.
	hold   bool
	held32 []float32
	held64 []float64
	held   []bool
	// scattered[u]: unit u's shard of the gradients holds a reduce-scatter
	// of this window, so the next lands beside it (tmp32/tmp64) and is
	// added; until then one lands in place. A window of micro-batches
	// without Sync reduce-scatters once, in place, and makes no tmp.
	scattered []bool
}

// New returns one rank of FSDP over cfg.Group, or an error naming every
// problem of cfg.
func New(cfg Config) (*FSDP, error) {
	return newFSDP(cfg, nil)
}

// newFSDP builds a rank over cfg.Group, or over the group joiner joins in
// Setup.
func newFSDP(cfg Config, joiner strategy.Strategy) (*FSDP, error) {
	var errs []error
	if cfg.Group == nil && joiner == nil {
		hybrid := ""
		if cfg.ShardGroup != nil || cfg.ReplicaGroup != nil {
			hybrid = " (hybrid sharding over ShardGroup and ReplicaGroup needs the whole job's group too)"
		}
		errs = append(errs, fmt.Errorf("Group is nil: pass this rank's collective (e.g. from inproc.NewGroup or tcp.New)%s, or build the strategy by name (\"fsdp\") to have it start and join the job's processes", hybrid))
	}
	if cfg.Wrap != WrapLayer && cfg.Wrap != WrapSize {
		errs = append(errs, fmt.Errorf("Wrap is %v: use WrapLayer or WrapSize", cfg.Wrap))
	}
	if cfg.MinUnitParams < 0 {
		errs = append(errs, fmt.Errorf("MinUnitParams is %d: use 0 for %d or a positive number of elements", cfg.MinUnitParams, DefaultMinUnitParams))
	}
	if cfg.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout is %v: use 0 for the default or a positive duration", cfg.Timeout))
	}
	switch {
	case (cfg.ShardGroup == nil) != (cfg.ReplicaGroup == nil):
		errs = append(errs, errors.New("only one of ShardGroup and ReplicaGroup is set: set both for hybrid sharding, or neither"))
	case cfg.ShardGroup != nil && cfg.Group == nil:
		// Said with Group's own problem above.
	case cfg.ShardGroup != nil && cfg.ShardGroup.Size()*cfg.ReplicaGroup.Size() != cfg.Group.Size():
		errs = append(errs, fmt.Errorf("ShardGroup has %d ranks and ReplicaGroup %d, but Group has %d: each rank must be in one shard group and one replica group, %d × %d = %d", cfg.ShardGroup.Size(), cfg.ReplicaGroup.Size(), cfg.Group.Size(), cfg.ShardGroup.Size(), cfg.ReplicaGroup.Size(), cfg.ShardGroup.Size()*cfg.ReplicaGroup.Size()))
	}
	job := replica.NewJob("fsdp", cfg.Group, joiner, cfg.Timeout)
	errs = append(errs, shardingProblems(cfg, job.World(), joiner != nil)...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("strategy fsdp: %w", errors.Join(errs...))
	}
	if cfg.Sharding == ShardGradOp {
		cfg.KeepAfterForward = true
	}
	if cfg.MinUnitParams == 0 {
		cfg.MinUnitParams = DefaultMinUnitParams
	}
	f := &FSDP{cfg: cfg, dev: cfg.Device, norm: make([]float64, 1), job: job}
	if f.dev == nil {
		f.dev = device.NewCPU(0)
	}
	return f, nil
}

func (f *FSDP) Info() strategy.Info { return f.job.Info() }

// Units are the spans of the flat parameters gathered whole, laid out by
// Setup from the wrapping policy.
func (f *FSDP) Units() []engine.Unit { return f.units }

func (f *FSDP) fail(what string, err error) error { return f.job.Fail(what, err) }

func (f *FSDP) check() error { return f.job.Check(f.eng != nil) }

// Units cuts specs' learnable parameters (in store order) into units by
// policy w.
func Units(specs []module.Spec, w Wrap, minParams int) []engine.Unit {
	var out []engine.Unit
	off, lo, prefix := 0, 0, ""
	for _, sp := range specs {
		if sp.Buffer {
			continue
		}
		n := sp.Size()
		p := sp.Name
		if i := strings.LastIndexByte(p, '.'); i >= 0 {
			p = p[:i]
		} else {
			p = ""
		}
		switch w {
		case WrapLayer:
			if off > lo && p != prefix {
				out = append(out, engine.Unit{Lo: lo, Hi: off})
				lo = off
			}
			prefix = p
			off += n
		default:
			off += n
			if off-lo >= minParams {
				out = append(out, engine.Unit{Lo: lo, Hi: off})
				lo = off
			}
		}
	}
	if off > lo {
		out = append(out, engine.Unit{Lo: lo, Hi: off})
	}
	return out
}

func (f *FSDP) Setup(ctx context.Context, su strategy.Setup) error {
	f.prof = replica.ProfilerOf(su.Profiler)
	var err error
	if f.c, f.dev, err = f.job.Join(ctx, f.cfg.Device); err != nil {
		return err
	}
	if f.cfg.CPUOffload && f.job.Rank() == 0 {
		f.cfg.Log.Info().Str("device", f.dev.String()).Msg("fsdp: CPU offload changes nothing in this build: the shards of parameters, gradients and optimizer state always live in host memory")
	}
	f.sc = f.c
	if f.cfg.ShardGroup != nil {
		f.sc, f.rc = collective.WithAsync(f.cfg.ShardGroup), collective.WithAsync(f.cfg.ReplicaGroup)
		f.job.Closes(f.sc, f.rc)
	}
	if err := f.splitForSharding(ctx); err != nil {
		return f.fail("setup", err)
	}
	// Every rank initialises its shard from rank 0's seed: the model is
	// rank 0's without ever being whole anywhere.
	seed := []float64{float64(su.Seed >> 32), float64(su.Seed & 0xffffffff)}
	if err := f.c.Broadcast(ctx, seed, 0); err != nil {
		return f.fail("broadcast rank 0's seed", err)
	}
	seed0 := uint64(seed[0])<<32 | uint64(seed[1])
	f.dtype = su.Dtype
	f.units = Units(su.Specs, f.cfg.Wrap, f.cfg.MinUnitParams)
	if len(f.units) == 0 {
		return f.fail("setup", errors.New("the module declares no learnable parameter: nothing to shard"))
	}
	// One unit-sized buffer serves as the layout store's scratch (graphs
	// are built over it) and then as one of the engine's gathered units.
	largest := 0
	for _, u := range f.units {
		largest = max(largest, u.Hi-u.Lo)
	}
	scratch := f.alloc(largest)
	st, err := module.NewLayoutStore(su.Specs, su.Dtype, seed0, scratch)
	if err != nil {
		return f.fail("setup", err)
	}
	f.store = st
	f.held = make([]bool, len(f.units))
	f.scattered = make([]bool, len(f.units))
	f.chunks, f.shardLen = replica.Chunks(f.units, f.sc.Size(), f.sc.Rank())
	if su.Dtype == tensor.Float32 {
		f.p32, f.g32 = make([]float32, f.shardLen), make([]float32, f.shardLen)
	} else {
		f.p64, f.g64 = make([]float64, f.shardLen), make([]float64, f.shardLen)
	}
	for _, c := range f.chunks {
		if err := st.InitParams(c.Lo, c.Hi, f.local(f.p32, f.p64, c)); err != nil {
			return f.fail("setup", err)
		}
	}
	sh := &engine.Sharding{Units: f.units, Scratch: scratch, KeepAfterForward: f.cfg.KeepAfterForward, NoPrefetch: f.cfg.NoPrefetch, Gather: f.gather, Reduce: f.reduce}
	opts := append([]engine.Option{engine.WithSharding(sh), engine.WithSettingName(su.SettingName)}, replica.StatSyncOption(replica.StatSync(f.c), f.job.World(), su.SyncBatchNorm)...)
	f.eng = engine.New(su.Module, st, su.Fields, replica.Seed(su.Seed, f.job.Rank()), opts...)
	f.rep = replica.NewGraphs(f.eng)
	if f.opt, f.sched, err = su.NewOptimizer(); err != nil {
		return f.fail("setup", err)
	}
	if err := f.opt.Bind(0, f.shardLen); err != nil {
		return f.fail("setup", err)
	}
	return nil
}

// local is chunk c's slice of a shard buffer ([]float32 or []float64,
// whichever is set).
func (f *FSDP) local(b32 []float32, b64 []float64, c replica.Chunk) any {
	lo, hi := c.Span()
	if b32 != nil {
		return b32[lo:hi]
	}
	return b64[lo:hi]
}

func (f *FSDP) gather(ctx context.Context, u int, dst any) engine.Wait {
	h := f.sc.AllGatherAsync(ctx, f.local(f.p32, f.p64, f.chunks[u]), dst)
	return f.traced(h, "all-gather unit", "wait all-gather")
}

// traced records, when profiling, h on the communication track (queued
// to done) and the wait for it on the training track.
func (f *FSDP) traced(h collective.Handle, comm, wait string) engine.Wait {
	return replica.Traced(f.prof, h, comm, wait)
}

func (f *FSDP) reduce(ctx context.Context, u int, grad any) engine.Wait {
	un := f.units[u]
	if f.hold {
		// A micro-batch without Sync: the unit's gradient joins what the
		// window's earlier micro-batches left, and nothing is sent.
		if f.held32 == nil && f.held64 == nil {
			if f.g32 != nil {
				f.held32 = make([]float32, f.store.NumParams())
			} else {
				f.held64 = make([]float64, f.store.NumParams())
			}
		}
		switch g := grad.(type) {
		case []float32:
			engine.Combine(f.held32[un.Lo:un.Hi], g, float32(f.scale), f.held[u])
		case []float64:
			engine.Combine(f.held64[un.Lo:un.Hi], g, f.scale, f.held[u])
		}
		f.held[u] = true
		return func() error { return nil }
	}
	scale := f.scale
	if f.held[u] {
		// The window's held gradient goes out with this micro-batch's, in
		// one reduce-scatter, already scaled.
		switch g := grad.(type) {
		case []float32:
			foldHeld(g, f.held32[un.Lo:un.Hi], float32(scale))
		case []float64:
			foldHeld(g, f.held64[un.Lo:un.Hi], scale)
		}
		f.held[u], scale = false, 1
	}
	return f.reduceScatter(ctx, u, grad, scale)
}

// reduceScatter starts reducing unit u's whole gradient grad into the
// shard (adding to it when the run accumulates), scaled by scale.
func (f *FSDP) reduceScatter(ctx context.Context, u int, grad any, scale float64) engine.Wait {
	c := f.chunks[u]
	// The first reduce-scatter of the unit in a window lands straight in
	// the shard's gradients; later ones land beside them and are added.
	recv := f.local(f.g32, f.g64, c)
	accumulate := f.scattered[u]
	f.scattered[u] = true
	if accumulate {
		if f.tmp32 == nil && f.tmp64 == nil {
			if f.g32 != nil {
				f.tmp32 = make([]float32, f.shardLen)
			} else {
				f.tmp64 = make([]float64, f.shardLen)
			}
		}
		recv = f.local(f.tmp32, f.tmp64, c)
	}
	wait := f.traced(f.sc.ReduceScatterAsync(ctx, grad, recv, collective.Mean), "reduce-scatter unit", "wait reduce-scatter")
	return func() error {
		if err := wait(); err != nil {
			return err
		}
		if f.rc != nil {
			// Replicas of the shard average theirs (every rank waits for its
			// units in the same order, so the all-reduces line up).
			if err := f.rc.AllReduce(ctx, recv, collective.Mean); err != nil {
				return err
			}
		}
		lo, hi := c.Span()
		switch {
		case f.g32 != nil && accumulate:
			engine.Combine(f.g32[lo:hi], f.tmp32[lo:hi], float32(scale), true)
		case f.g32 != nil && scale != 1:
			optim.ScaleGrads32(f.g32[lo:hi], scale)
		case f.g64 != nil && accumulate:
			engine.Combine(f.g64[lo:hi], f.tmp64[lo:hi], scale, true)
		case f.g64 != nil && scale != 1:
			optim.ScaleGrads64(f.g64[lo:hi], scale)
		}
		return nil
	}
}

// foldHeld turns grad into s·grad + held, the window's whole gradient.
func foldHeld[T float32 | float64](grad, held []T, s T) {
	for i, v := range held {
		grad[i] = grad[i]*s + v
	}
}

func (f *FSDP) Step(ctx context.Context, mode module.Mode, b *data.Batch, o strategy.TrainOptions) (strategy.StepResult, error) {
	if err := f.check(); err != nil {
		return strategy.StepResult{}, err
	}
	return replica.RunStep(ctx, replica.Steps{Train: f.trainStep, Eval: f.evalStep, Predict: f.predictStep}, mode, b, o)
}

func (f *FSDP) trainStep(ctx context.Context, b *data.Batch, o strategy.TrainOptions) (float64, []module.Metric, error) {
	f.scale = o.Scale
	if f.scale == 0 {
		f.scale = 1
	}
	f.hold = !o.Sync && !f.cfg.SyncMicroBatches
	if !o.Accumulate {
		// Units whose gradients this graph does not produce are zero, and a
		// new window drops what an unfinished one held.
		clear(f.g32)
		clear(f.g64)
		clear(f.held)
		clear(f.scattered)
	}
	f.eng.SetRunKey(o.Key)
	f.eng.SetBeforeBackward(o.BeforeBackward)
	r, err := f.rep.RunOn(ctx, f.dev, module.Train, b, o.Accumulate, f.scale)
	if err != nil {
		return 0, nil, f.fail("train step on "+f.dev.String(), err)
	}
	if !f.hold {
		// Units held by earlier micro-batches whose gradient this graph did
		// not produce go out on their own (every rank runs the same graphs,
		// so every rank sends the same units, in order).
		for u, h := range f.held {
			if !h {
				continue
			}
			un := f.units[u]
			var send any
			if f.held32 != nil {
				send = f.held32[un.Lo:un.Hi]
			} else {
				send = f.held64[un.Lo:un.Hi]
			}
			f.held[u] = false
			if err := f.reduceScatter(ctx, u, send, 1)(); err != nil {
				return 0, nil, f.fail(fmt.Sprintf("reduce-scatter the held gradient of unit %d", u), err)
			}
		}
	}
	f.reduced = true
	return r.Loss, r.Metrics, nil
}

func (f *FSDP) evalStep(ctx context.Context, mode module.Mode, b *data.Batch) ([]module.Metric, error) {
	// Every rank runs every padded batch (its gathers are collective), but
	// padded rows must not count: a batch with some is run on its real rows
	// only (the graph for that size gathers the same units in the same
	// order), and one with nothing else gives its metrics with weight 0
	// (the engine weighs by real rows), which count nothing but name the
	// metrics for the ranks' reduction, as a rank of a set smaller than the
	// job does under ddp.
	real := b.Size - b.NumPad()
	run := b
	if real > 0 && real < b.Size {
		run = withoutPad(b, real)
	}
	r, err := f.rep.RunOn(ctx, f.dev, mode, run, false, 1)
	if err != nil {
		return nil, f.fail(mode.String()+" step on "+f.dev.String(), err)
	}
	return r.Metrics, nil
}

// withoutPad is b's real rows.
func withoutPad(b *data.Batch, real int) *data.Batch {
	out := &data.Batch{Size: real, Fields: b.Fields, Data: make([][]float32, len(b.Data))}
	for f := range b.Data {
		w := len(b.Data[f]) / b.Size
		for i := 0; i < b.Size; i++ {
			if !b.Pad[i] {
				out.Data[f] = append(out.Data[f], b.Data[f][i*w:(i+1)*w]...)
			}
		}
	}
	for i, p := range b.Pad {
		if !p && b.Indices != nil {
			out.Indices = append(out.Indices, b.Indices[i])
		}
	}
	return out
}

// predictStep returns zeros in the rows of padding: the trainer sums every
// rank's rows into dataset order, so a padded row (a real row another rank
// predicts too) must add nothing.
func (f *FSDP) predictStep(ctx context.Context, b *data.Batch) (*tensor.Dense, error) {
	r, err := f.rep.RunOn(ctx, f.dev, module.Predict, b, false, 1)
	if err == nil && (r.Output == nil || r.Output.Dims() == 0) {
		err = strategy.ErrScalarPrediction
	}
	if err != nil {
		return nil, f.fail("predict step on "+f.dev.String(), err)
	}
	out := r.Output
	if b.NumPad() > 0 && out.Dims() > 0 && out.Shape()[0] == b.Size {
		w := out.Shape().TotalSize() / b.Size
		for i, p := range b.Pad {
			if !p {
				continue
			}
			switch d := denseData(out).(type) {
			case []float32:
				clear(d[i*w : (i+1)*w])
			case []float64:
				clear(d[i*w : (i+1)*w])
			}
		}
	}
	return out, nil
}

// OptimizerStep updates this rank's shard from its reduced gradients.
// The gradient norm (clipping, BeforeUpdate) sums every shard's squares
// across ranks.
func (f *FSDP) OptimizerStep(ctx context.Context, o strategy.OptimizerOptions) (float64, error) {
	if err := f.check(); err != nil {
		return math.NaN(), err
	}
	if !f.reduced {
		return math.NaN(), errors.New("OptimizerStep without a training Step: fsdp updates from the gradients a training Step reduced")
	}
	if slices.Contains(f.held, true) {
		return math.NaN(), errors.New("OptimizerStep after a training Step without Sync: fsdp holds that micro-batch's gradients unreduced until a training Step with Sync (the accumulation window's last micro-batch); run that Step first, or set SyncMicroBatches to reduce-scatter every micro-batch")
	}
	f.reduced = false
	norm := math.NaN()
	if o.BeforeUpdate != nil || o.ClipNorm > 0 {
		if f.g32 != nil {
			f.norm[0] = optim.SumSquares32(f.g32)
		} else {
			f.norm[0] = optim.SumSquares64(f.g64)
		}
		if err := f.sc.AllReduce(ctx, f.norm, collective.Sum); err != nil { // replicas hold the same shards
			return math.NaN(), f.fail("all-reduce the gradient norm", err)
		}
		norm = math.Sqrt(f.norm[0])
		if o.BeforeUpdate != nil {
			if err := o.BeforeUpdate(norm); err != nil {
				return math.NaN(), err
			}
		}
		if o.ClipNorm <= 0 {
			norm = math.NaN()
		}
	}
	f.opt.Begin()
	if f.g32 != nil {
		if o.ClipValue > 0 {
			optim.ClipGradValue32(f.g32, o.ClipValue)
		}
		if o.ClipNorm > 0 {
			if c := optim.ClipScale(norm, o.ClipNorm); c < 1 {
				optim.ScaleGrads32(f.g32, c)
			}
		}
		f.opt.Update32(f.p32, f.g32, 0)
	} else {
		if o.ClipValue > 0 {
			optim.ClipGradValue64(f.g64, o.ClipValue)
		}
		if o.ClipNorm > 0 {
			if c := optim.ClipScale(norm, o.ClipNorm); c < 1 {
				optim.ScaleGrads64(f.g64, c)
			}
		}
		f.opt.Update64(f.p64, f.g64, 0)
	}
	if err := f.syncBuffers(ctx); err != nil {
		return math.NaN(), f.fail("broadcast rank 0's buffers", err)
	}
	return norm, nil
}

// Rebind runs m over this rank's shards from now on (the trainer's
// evaluation after Fit with another value of the module), once m is
// checked to declare the same tensors; the group stays joined.
func (f *FSDP) Rebind(m module.Module) error {
	if err := f.check(); err != nil {
		return err
	}
	b := module.NewBuilder(f.dtype)
	if err := m.Configure(b); err != nil {
		return fmt.Errorf("fsdp: Rebind: module Configure: %w", err)
	}
	specs, err := b.Specs()
	if err != nil {
		return fmt.Errorf("fsdp: Rebind: module Configure: %w", err)
	}
	var errs []error
	if len(specs) != len(f.store.Entries()) {
		errs = append(errs, fmt.Errorf("the module value declares %d tensors, the trained model has %d", len(specs), len(f.store.Entries())))
	}
	for _, sp := range specs {
		e, ok := f.store.Lookup(sp.Name)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("tensor %q %v is declared by the module value but not held by the trained model", sp.Name, sp.Shape))
		case !slices.Equal(e.Shape, sp.Shape) || e.Buffer != sp.Buffer:
			errs = append(errs, fmt.Errorf("tensor %q is %v (buffer %v) in the trained model but the module value declares %v (buffer %v)", sp.Name, e.Shape, e.Buffer, sp.Shape, sp.Buffer))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("fsdp: the module value %T does not match the trained model: %w", m, errors.Join(errs...))
	}
	f.rep.Rebind(m)
	return nil
}

// syncBuffers gives every rank rank 0's buffers (BatchNorm statistics)
// at the end of a step, as DDP does.
func (f *FSDP) syncBuffers(ctx context.Context) error {
	for _, e := range f.store.Entries() {
		if !e.Buffer {
			continue
		}
		t, err := f.store.Tensor(e.Name)
		if err != nil {
			return err
		}
		if err := f.c.Broadcast(ctx, denseData(t), 0); err != nil {
			return err
		}
	}
	return nil
}

func (f *FSDP) Reduce(ctx context.Context, sums, weights []float64, ops []module.Reduce) error {
	return f.job.Reduce(ctx, sums, weights, ops)
}

// DistributedSampler shards data by rank, padded in training and in
// evaluation alike: every step gathers parameters collectively, so every
// rank must run the same number of them. Evaluation leaves the padded rows
// out of its metrics and predictions (evalStep, predictStep).
func (f *FSDP) DistributedSampler(shuffle bool, seed uint64, train bool) data.Sampler {
	if train {
		return data.DistributedSampler{Rank: f.job.Rank(), World: f.job.World(), Shuffle: shuffle, Seed: seed}
	}
	return data.DistributedSampler{Rank: f.job.Rank(), World: f.job.World()}
}

// Memory reports what this rank holds: its shards, the whole model's
// gradient once a micro-batch without Sync has held one, and a second
// gradient shard once SyncMicroBatches has reduce-scattered a window's
// later micro-batch; the unit buffers are not counted (they are at most a
// few units). Before Setup it is zero.
func (f *FSDP) Memory() strategy.Memory {
	if f.store == nil || f.opt == nil {
		return strategy.Memory{}
	}
	e := 4
	if f.p64 != nil {
		e = 8
	}
	bufs := (f.store.Len() - f.store.NumParams()) * e
	st := 0
	for _, b := range f.opt.State().Buffers {
		st += len(b) * e
	}
	// The whole model's gradient held across micro-batches without Sync,
	// once there have been any.
	held := (len(f.held32) + len(f.held64)) * e
	// The shard-sized landing of reduce-scatters that add to the shard's
	// gradients (micro-batches with SyncMicroBatches), once there have been
	// any.
	tmp := (len(f.tmp32) + len(f.tmp64)) * e
	return strategy.Memory{Params: f.shardLen*e + bufs, LocalGrads: f.shardLen*e + held + tmp, ReducedGrads: f.shardLen * e, OptimizerState: st}
}

// Launch starts the job's local ranks when FSDP was built by name and
// this process launched the job (through its ddp joiner); otherwise it
// does nothing.
func (f *FSDP) Launch(ctx context.Context) (bool, error) { return f.job.Launch(ctx) }

// Teardown waits for every rank (a last barrier), closes the groups and,
// built by name, waits for the local ranks this process started.
func (f *FSDP) Teardown(ctx context.Context) error { return f.job.Teardown(ctx) }

// StopAgreed tells the job's groups that the ranks agreed to stop
// (strategy.StopAgreer).
func (f *FSDP) StopAgreed() { f.job.StopAgreed() }
