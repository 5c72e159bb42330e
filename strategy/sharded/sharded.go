package sharded

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
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
	_ strategy.Strategy       = (*Sharded)(nil)
	_ strategy.Sampler        = (*Sharded)(nil)
	_ strategy.Replica        = (*Sharded)(nil)
	_ strategy.Rebinder       = (*Sharded)(nil)
	_ strategy.Launcher       = (*Sharded)(nil)
	_ strategy.MemoryReporter = (*Sharded)(nil)
)

// DefaultBucketBytes is the unit (gradient bucket) cap when none is set:
// 25 MiB, ddp's bucket.
const DefaultBucketBytes = 25 << 20

// EnvBucketMB is the unit cap in MiB of the strategies built by name; ddp
// reads the same variable for its buckets.
const EnvBucketMB = "FULGUR_BUCKET_MB"

func init() {
	for name, stage := range map[string]int{"sharded": 2, "sharded_stage1": 1, "sharded_stage2": 2} {
		strategy.Register(name, func(o strategy.Options) (strategy.Strategy, error) { return fromOptions(o, name, stage) })
	}
}

// fromOptions builds Sharded over the processes a "ddp" strategy starts and
// joins, found by name so that this package does not import another
// strategy.
func fromOptions(o strategy.Options, name string, stage int) (strategy.Strategy, error) {
	cfg := Config{Stage: stage, Log: o.Log}
	if v, ok := o.Lookup(EnvBucketMB); ok && v != "" {
		mb, err := strconv.ParseFloat(v, 64)
		if err != nil || !(mb > 0) {
			return nil, fmt.Errorf("strategy %q: %s=%q: use a positive number of MiB, e.g. 25", name, EnvBucketMB, v)
		}
		cfg.BucketBytes = max(int(mb*(1<<20)), 8)
	}
	inner, err := replica.JoinerByName(o, name)
	if err != nil {
		return nil, err
	}
	return newSharded(cfg, name, inner)
}

// Config configures one rank of Sharded.
type Config struct {
	// Group is this rank's collective, already joined (tests pass the ranks
	// of inproc.NewGroup). Sharded takes it over and closes it at Teardown
	// or on the first failure. Built by name, Sharded has none: it starts
	// and joins the job's processes through a ddp strategy.
	Group collective.Collective
	// Stage is 1 (optimizer state sharded; each unit's gradient all-reduced
	// into a whole gradient buffer) or 2 (gradients reduce-scattered too, so
	// a rank keeps only its shard of them). 0: 2.
	Stage int
	// BucketBytes caps a unit, the span of whole tensors whose gradient is
	// reduced at once. A rank holds one or two units' worth of gradient
	// besides its shard under stage 2. 0: DefaultBucketBytes; a tensor
	// larger than the cap is a unit of its own.
	BucketBytes int
	// Device runs this rank's replica. nil: the CPU.
	Device device.Device
	// Timeout bounds Teardown's final barrier. 0: collective.DefaultTimeout.
	Timeout time.Duration
	Log     zerolog.Logger
}

// Sharded is ZeRO stage 1 and 2 data parallelism: every rank holds the
// whole model and runs forward and backward on its data, like DDP. The
// flat parameters are cut into units (Units); rank r of N owns block r of
// each unit (collective.Offset, BlockLen), its chunks, and its optimizer
// is bound to them only (1/N of the optimizer state). The engine hands
// each unit's gradient over as soon as backward has produced it: stage 2
// reduce-scatters it (mean) into this rank's shard of the gradients, on
// every micro-batch, adding to it while accumulating; stage 1 adds it to
// the replica's whole gradient buffer and, in the last micro-batch of a
// step (TrainOptions.Sync), all-reduces it there. OptimizerStep updates the
// rank's chunks and all-gathers every unit, so every rank ends the step
// with the same parameters, bit for bit. Gradient-norm clipping sums the
// squares of every shard across ranks.
type Sharded struct {
	cfg   Config
	name  string
	stage int
	prof  profiler.Profiler
	c     collective.Group
	dev   device.Device

	job      *replica.Job  // the group, the first failure, Launch and Teardown
	store    *module.Store // the whole model; gradients only under stage 1
	eng      *engine.Engine
	rep      *replica.Graphs
	units    []engine.Unit
	chunks   []replica.Chunk
	shardLen int
	buf      buffers // the float32 or float64 buffers
	opt      optim.Optimizer
	sched    optim.Scheduler

	// The training run in progress.
	scale            float64
	accumulate, sync bool
	reduced          bool // gradients were reduced since the last update
	handles          []collective.Handle
	norm             []float64
}

// New returns one rank of Sharded over cfg.Group, or an error naming
// every problem of cfg.
func New(cfg Config) (*Sharded, error) {
	return newSharded(cfg, "", nil)
}

// newSharded builds a rank over cfg.Group, or over the group joiner joins
// in Setup.
func newSharded(cfg Config, name string, joiner strategy.Strategy) (*Sharded, error) {
	var errs []error
	if cfg.Group == nil && joiner == nil {
		errs = append(errs, errors.New("Group is nil: pass this rank's collective (e.g. from inproc.NewGroup or tcp.New), or build the strategy by name (\"sharded\") to have it start and join the job's processes"))
	}
	if cfg.Stage == 0 {
		cfg.Stage = 2
	}
	if cfg.Stage != 1 && cfg.Stage != 2 {
		errs = append(errs, fmt.Errorf("Stage is %d: use 1 (shard optimizer state) or 2 (optimizer state and gradients)", cfg.Stage))
	}
	if cfg.BucketBytes < 0 {
		errs = append(errs, fmt.Errorf("BucketBytes is %d: use 0 for %d MiB or a positive size", cfg.BucketBytes, DefaultBucketBytes>>20))
	}
	if cfg.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout is %v: use 0 for the default or a positive duration", cfg.Timeout))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("strategy sharded: %w", errors.Join(errs...))
	}
	if cfg.BucketBytes == 0 {
		cfg.BucketBytes = DefaultBucketBytes
	}
	if name == "" {
		name = fmt.Sprintf("sharded_stage%d", cfg.Stage)
	}
	s := &Sharded{cfg: cfg, name: name, stage: cfg.Stage, dev: cfg.Device, norm: make([]float64, 1), job: replica.NewJob(name, cfg.Group, joiner, cfg.Timeout)}
	if s.dev == nil {
		s.dev = device.NewCPU(0)
	}
	return s, nil
}

func (s *Sharded) Info() strategy.Info { return s.job.Info() }

// Stage is 1 or 2.
func (s *Sharded) Stage() int { return s.stage }

// Units are the spans of the flat parameters whose gradients are reduced
// at once, laid out by Setup.
func (s *Sharded) Units() []engine.Unit { return s.units }

// Store is this rank's replica: the whole model (and, under stage 1 only,
// its whole gradient buffer).
func (s *Sharded) Store() *module.Store { return s.store }

// Units cuts the learnable parameters of entries (in store order) into
// units of consecutive whole tensors of at most capBytes each (a larger
// tensor is a unit of its own).
func Units(entries []module.Entry, elemBytes, capBytes int) []engine.Unit {
	var out []engine.Unit
	for _, e := range entries {
		if e.Buffer || e.Len == 0 {
			continue
		}
		if n := len(out); n > 0 && (out[n-1].Hi-out[n-1].Lo+e.Len)*elemBytes <= capBytes {
			out[n-1].Hi = e.Offset + e.Len
			continue
		}
		out = append(out, engine.Unit{Lo: e.Offset, Hi: e.Offset + e.Len})
	}
	return out
}

func (s *Sharded) fail(what string, err error) error { return s.job.Fail(what, err) }

func (s *Sharded) check() error { return s.job.Check(s.eng != nil) }

func (s *Sharded) Setup(ctx context.Context, su strategy.Setup) error {
	s.prof = replica.ProfilerOf(su.Profiler)
	var err error
	if s.c, s.dev, err = s.job.Join(ctx, s.cfg.Device); err != nil {
		return err
	}
	newStore := module.NewStoreWithoutGrad
	if s.stage == 1 {
		newStore = module.NewStore
	}
	st, err := newStore(su.Specs, su.Dtype, su.Seed)
	if err != nil {
		return s.fail("setup", err)
	}
	if err := s.c.Broadcast(ctx, st.Data(), 0); err != nil {
		return s.fail("broadcast rank 0's parameters and buffers", replica.ModelMismatch(err))
	}
	s.store = st
	elem := 4
	if su.Dtype == tensor.Float64 {
		elem = 8
	}
	s.units = Units(st.Entries(), elem, s.cfg.BucketBytes)
	if len(s.units) == 0 {
		return s.fail("setup", errors.New("the module declares no learnable parameter: nothing to shard"))
	}
	s.chunks, s.shardLen = replica.Chunks(s.units, s.job.World(), s.job.Rank())
	if s.opt, s.sched, err = su.NewOptimizer(); err != nil {
		return s.fail("setup", err)
	}
	if err := s.opt.Bind(0, s.shardLen); err != nil {
		return s.fail("setup", err)
	}
	if su.Dtype == tensor.Float32 {
		s.buf = newFlat(s, st.Data32(), st.Grad32(), s.opt.Update32)
	} else {
		s.buf = newFlat(s, st.Data64(), st.Grad64(), s.opt.Update64)
	}
	sh := &engine.Sharding{Units: s.units, Reduce: s.buf.reduce}
	opts := append([]engine.Option{engine.WithSharding(sh), engine.WithSettingName(su.SettingName)}, replica.StatSyncOption(replica.StatSync(s.c), s.job.World(), su.SyncBatchNorm)...)
	s.eng = engine.New(su.Module, st, su.Fields, replica.Seed(su.Seed, s.job.Rank()), opts...)
	s.rep = replica.NewGraphs(s.eng)
	return nil
}

func (s *Sharded) Step(ctx context.Context, mode module.Mode, b *data.Batch, o strategy.TrainOptions) (strategy.StepResult, error) {
	if err := s.check(); err != nil {
		return strategy.StepResult{}, err
	}
	return replica.RunStep(ctx, replica.Steps{Train: s.trainStep, Eval: s.evalStep, Predict: s.predictStep}, mode, b, o)
}

// run runs b through the replica's graph of mode on the device.
func (s *Sharded) run(ctx context.Context, mode module.Mode, b *data.Batch, accumulate bool, scale float64) (engine.Result, error) {
	r, err := s.rep.RunOn(ctx, s.dev, mode, b, accumulate, scale)
	if err != nil {
		return r, s.fail(mode.String()+" step on "+s.dev.String(), err)
	}
	return r, nil
}

func (s *Sharded) trainStep(ctx context.Context, b *data.Batch, o strategy.TrainOptions) (float64, []module.Metric, error) {
	s.scale = o.Scale
	if s.scale == 0 {
		s.scale = 1
	}
	s.accumulate, s.sync = o.Accumulate, o.Sync
	if !o.Accumulate {
		// Units whose gradients this graph does not produce are zero.
		s.buf.clearGrads()
	}
	s.eng.SetRunKey(o.Key)
	s.eng.SetBeforeBackward(o.BeforeBackward)
	sp := s.prof.Start("sharded/forward+backward")
	r, err := s.run(ctx, module.Train, b, o.Accumulate, s.scale)
	sp.End()
	if err != nil {
		return 0, nil, err
	}
	// Stage 2 reduces every micro-batch; stage 1 the last one of a step.
	s.reduced = s.reduced || s.stage == 2 || o.Sync
	return r.Loss, r.Metrics, nil
}

func (s *Sharded) evalStep(ctx context.Context, mode module.Mode, b *data.Batch) ([]module.Metric, error) {
	r, err := s.run(ctx, mode, b, false, 1)
	return r.Metrics, err
}

func (s *Sharded) predictStep(ctx context.Context, b *data.Batch) (*tensor.Dense, error) {
	r, err := s.run(ctx, module.Predict, b, false, 1)
	if err == nil && (r.Output == nil || r.Output.Dims() == 0) {
		err = strategy.ErrScalarPrediction
	}
	return r.Output, err
}

// OptimizerStep updates this rank's chunks from their reduced gradients
// and all-gathers every unit. The gradient norm (clipping, BeforeUpdate)
// sums every shard's squares across ranks.
func (s *Sharded) OptimizerStep(ctx context.Context, o strategy.OptimizerOptions) (float64, error) {
	if err := s.check(); err != nil {
		return math.NaN(), err
	}
	if !s.reduced {
		return math.NaN(), fmt.Errorf("OptimizerStep without a training Step with Sync: %s updates from reduced gradients only", s.name)
	}
	s.reduced = false
	norm := math.NaN()
	if o.BeforeUpdate != nil {
		n, err := s.globalNorm(ctx)
		if err != nil {
			return math.NaN(), err
		}
		if err := o.BeforeUpdate(n); err != nil {
			return math.NaN(), err
		}
		norm = n
	}
	if o.ClipValue > 0 {
		s.buf.clipValue(o.ClipValue)
	}
	clip := 1.0
	if o.ClipNorm > 0 {
		if o.ClipValue > 0 || math.IsNaN(norm) {
			n, err := s.globalNorm(ctx)
			if err != nil {
				return math.NaN(), err
			}
			norm = n
		}
		clip = optim.ClipScale(norm, o.ClipNorm)
	} else {
		norm = math.NaN()
	}
	s.opt.Begin()
	s.buf.update(clip)
	if s.job.World() > 1 {
		sp := s.prof.Start("all-gather parameters")
		err := s.buf.gather(ctx)
		sp.End()
		if err != nil {
			return math.NaN(), s.fail("all-gather parameters", err)
		}
	}
	if err := s.syncBuffers(ctx); err != nil {
		return math.NaN(), s.fail("broadcast rank 0's buffers", err)
	}
	return norm, nil
}

// globalNorm sums the shards' squared gradients across ranks and returns
// the global gradient norm.
func (s *Sharded) globalNorm(ctx context.Context) (float64, error) {
	s.norm[0] = s.buf.sumSquares()
	if err := s.c.AllReduce(ctx, s.norm, collective.Sum); err != nil {
		return math.NaN(), s.fail("all-reduce the gradient norm", err)
	}
	return math.Sqrt(s.norm[0]), nil
}

// syncBuffers gives every rank rank 0's buffers (BatchNorm statistics, the
// store past its parameters) at the end of a step, as ddp does, so that
// every rank validates, tests and checkpoints with them.
func (s *Sharded) syncBuffers(ctx context.Context) error {
	st := s.store
	if st.Len() == st.NumParams() {
		return nil
	}
	var buf any
	if st.Dtype() == tensor.Float32 {
		buf = st.Data32()[st.NumParams():]
	} else {
		buf = st.Data64()[st.NumParams():]
	}
	return s.c.Broadcast(ctx, buf, 0)
}

func (s *Sharded) Reduce(ctx context.Context, sums, weights []float64, ops []module.Reduce) error {
	return s.job.Reduce(ctx, sums, weights, ops)
}

// Rebind runs m over this rank's parameters from now on; the group stays
// joined, so evaluation after Fit runs on the ranks that trained.
func (s *Sharded) Rebind(m module.Module) error {
	if err := s.check(); err != nil {
		return err
	}
	s.rep.Rebind(m)
	return nil
}

// DistributedSampler shards training data by rank, padded so every rank
// runs the same number of steps, and evaluation data without padding:
// evaluation runs no collective (every rank holds the whole model).
func (s *Sharded) DistributedSampler(shuffle bool, seed uint64, train bool) data.Sampler {
	if train {
		return data.DistributedSampler{Rank: s.job.Rank(), World: s.job.World(), Shuffle: shuffle, Seed: seed}
	}
	return data.DistributedSampler{Rank: s.job.Rank(), World: s.job.World(), NoPad: true}
}

// Memory reports what this rank holds, from the lengths of the buffers it
// allocated: the whole model, the gradient buffer (whole under stage 1,
// the shard under stage 2, where LocalGrads counts the engine's unit
// buffers: at most two units) and the optimizer's shard. Before Setup, or
// after one that failed, it is zero.
func (s *Sharded) Memory() strategy.Memory {
	if s.store == nil || s.opt == nil {
		return strategy.Memory{}
	}
	e := 4
	if s.store.Dtype() == tensor.Float64 {
		e = 8
	}
	opt := 0
	for _, b := range s.opt.State().Buffers {
		opt += len(b) * e
	}
	m := strategy.Memory{Params: s.store.Len() * e, OptimizerState: opt}
	if s.stage == 1 {
		m.LocalGrads, m.ReducedGrads = s.store.NumParams()*e, s.store.NumParams()*e
	} else {
		largest := 0
		for _, u := range s.units {
			largest = max(largest, u.Hi-u.Lo)
		}
		m.LocalGrads, m.ReducedGrads = 2*largest*e, s.shardLen*e
	}
	return m
}

// Launch starts the job's local ranks when Sharded was built by name and
// this process launched the job (through its ddp joiner); otherwise it
// does nothing.
func (s *Sharded) Launch(ctx context.Context) (bool, error) { return s.job.Launch(ctx) }

// Teardown waits for every rank (a last barrier), closes the group and,
// built by name, waits for the local ranks this process started.
func (s *Sharded) Teardown(ctx context.Context) error { return s.job.Teardown(ctx) }

// StopAgreed tells the job's groups that the ranks agreed to stop
// (strategy.StopAgreer).
func (s *Sharded) StopAgreed() { s.job.StopAgreed() }
