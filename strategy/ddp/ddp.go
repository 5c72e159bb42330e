package ddp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
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
	_ strategy.Strategy    = (*DDP)(nil)
	_ strategy.Sampler     = (*DDP)(nil)
	_ strategy.GroupJoiner = (*DDP)(nil)

	_ strategy.PeerLossExplainer = (*DDP)(nil)
)

// DDPConfig configures one rank of DDP.
type DDPConfig struct {
	// Group is this rank's collective, already joined (tests pass the ranks
	// of inproc.NewGroup). DDP takes it over and closes it at Teardown or on
	// the first failure, so peers learn at once that this rank is gone: the
	// caller neither uses nor closes it afterwards. Until Teardown
	// (Trainer.Teardown) it stays open, with its communication goroutine,
	// so that Validate, Test and Predict after Fit run on the same ranks; a
	// program that trains again calls Teardown after each job.
	Group collective.Collective
	// Connect joins the job's group in Setup when Group is nil; the registry
	// builds it from the cluster environment and the chosen backend.
	Connect func(ctx context.Context) (collective.Collective, error)
	// Rank and WorldSize describe this process before Connect has run
	// (WorldSize 0: 1); they are ignored when Group is set.
	Rank, WorldSize int
	// Device runs this rank's replica. nil: the CPU.
	Device device.Device
	// BucketBytes caps a gradient bucket. 0: DefaultBucketBytes (25 MiB).
	BucketBytes int
	// BufferSyncOnce broadcasts buffers (BatchNorm running statistics) from
	// rank 0 only at Setup. By default every rank also receives rank 0's at
	// every optimizer step, before the step returns, so every rank starts
	// each step with rank 0's statistics (as PyTorch's DDP arranges by
	// broadcasting before each forward) and its callbacks, validation, tests
	// and checkpoints see them. They travel with the last gradient bucket
	// (see DDP), not in a round trip of their own.
	BufferSyncOnce bool
	// NoOverlap reduces the gradient buckets only after the whole backward
	// pass. By default a bucket's all-reduce starts during the backward
	// pass, as soon as the last gradient in it is ready, so communication
	// overlaps the rest of the backward pass; both give the same weights,
	// bit for bit (the same buckets are reduced in the same order).
	NoOverlap bool
	// Timeout bounds Teardown's final barrier. 0: collective.DefaultTimeout.
	Timeout time.Duration
	Log     zerolog.Logger
}

// DDP is distributed data parallelism, one process (rank) per device. Setup
// broadcasts rank 0's parameters and buffers. In the last micro-batch of a
// step, gradient buckets (contiguous spans of the flat gradient buffer, in
// reverse parameter order, at most BucketBytes each) are all-reduced
// asynchronously on the group's communication goroutine, in bucket order:
// bucket i is queued during the backward pass as soon as every gradient in
// it is ready and buckets 0..i-1 are queued (the engine reports each
// gradient as its step of the schedule runs), so the reduction overlaps the
// rest of the backward pass; a bucket holding a parameter the loss does not
// use, and every bucket after it, is queued when the backward pass ends.
// Queuing in bucket order keeps the collectives in the same order on every
// rank whatever order a rank's graph produces gradients in. OptimizerStep
// updates each bucket's slice as soon as its reduction lands, while the
// next is still on the wire. Gradient-norm clipping waits for every bucket
// first. Micro-batches before the last one of an accumulation window do not
// communicate. Rank 0's buffers ride with the last bucket (in its
// all-reduce when that bucket is at most 1 MiB, in one queued right behind
// it otherwise): a step runs no broadcast of its own. So do the values of
// TrainOptions.Ride (the trainer's stop flags, sampled as the last bucket
// is queued), with or without overlap: a step of a trainer whose callbacks
// cannot stop it after the backward pass runs no all-reduce besides the
// buckets (with a last bucket over 1 MiB, one queued right behind it).
type DDP struct {
	cfg  DDPConfig
	name string
	prof profiler.Profiler

	c       collective.Group
	dev     device.Device
	eng     *engine.Engine
	rep     *replica.Graphs
	opt     optim.Optimizer
	sched   optim.Scheduler
	buckets []Bucket
	pending []collective.Handle
	broken  error

	// What rides with the gradients (see rideBuffers): rank 0's buffers
	// (bufs) and the caller's TrainOptions.Ride values (nRide slots, ride
	// this step's). stage is a []float32 or []float64: the last bucket's
	// gradients when folded, then the buffers, then the ride's slots (nil:
	// nothing rides; the buffers are broadcast after the step). foldable:
	// the last bucket is small enough to fold. rideH is the stage's own
	// all-reduce of this step when not folded; rode: this step's stage is
	// on its way.
	stage    any
	folded   bool
	foldable bool
	bufs     bool
	nRide    int
	ride     *strategy.Ride
	rideH    collective.Handle
	rode     bool

	// The synced training run in progress, while its gradients are
	// reported (gradReady runs on the device's goroutine, inside the run).
	filling bool
	runCtx  context.Context
	left    []int       // per bucket: elements whose gradient is not ready yet
	spans   chan queued // queued buckets, to the profiler's comm track (nil: not profiling)
	// spansDone is closed once commSpans has ended the last run's spans.
	spansDone chan struct{}

	rank, world int
	reduceBuf   []float64
	localRanks  int       // processes of the job on this machine (0: unknown)
	launch      *launcher // self-launched local ranks (nil when joined)
	tornDown    bool
	// releaseCores ends this rank's share of the machine's cores
	// (replica.ShareCores), at Teardown; nil when it took none.
	releaseCores func()

	// What the job did last, for a peer that stops answering: every rank
	// runs the same collectives in the same order, so the last one this
	// rank finished is the last one the silent peer took part in.
	steps    int   // optimizer steps completed
	lastDone ddpOp // the last collective this rank finished
}

// ddpOp describes one collective of DDP, formatted only for an error (the
// step loop records it without allocating).
type ddpOp struct {
	kind       ddpOpKind
	i, n, step int // bucket i of n; the step; values reduced (n)
}

type ddpOpKind uint8

const (
	opNone ddpOpKind = iota
	opSetup
	opBucket
	opBuffers
	opRide
	opReduce
	opBarrier
)

func (o ddpOp) String() string {
	switch o.kind {
	case opSetup:
		return "the broadcast of rank 0's parameters at setup"
	case opBucket:
		return fmt.Sprintf("the all-reduce of gradient bucket %d of %d of step %d", o.i, o.n, o.step)
	case opBuffers:
		return fmt.Sprintf("the all-reduce or broadcast of rank 0's buffers at the end of step %d", o.step)
	case opRide:
		return fmt.Sprintf("the all-reduce of what rides with the last gradient bucket of step %d (rank 0's buffers, the trainer's stop flags)", o.step)
	case opReduce:
		return fmt.Sprintf("a reduce of %d values (logged metrics, the stop decision or predictions) after step %d", o.n, o.step)
	case opBarrier:
		return fmt.Sprintf("a barrier after step %d", o.step)
	}
	return "none: it never finished one with this rank"
}

// NewDDP returns one rank of DDP, or an error naming every problem of
// cfg.
func NewDDP(cfg DDPConfig) (*DDP, error) {
	var errs []error
	if cfg.Group == nil && cfg.Connect == nil {
		errs = append(errs, errors.New("neither Group nor Connect is set: pass this rank's collective (e.g. from inproc.NewGroup or tcp.New)"))
	}
	if cfg.BucketBytes < 0 {
		errs = append(errs, fmt.Errorf("BucketBytes is %d: use 0 for %d MiB or a positive size", cfg.BucketBytes, DefaultBucketBytes>>20))
	}
	if cfg.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout is %v: use 0 for the default or a positive duration", cfg.Timeout))
	}
	d := &DDP{cfg: cfg, name: "ddp", dev: cfg.Device, rank: cfg.Rank, world: max(cfg.WorldSize, 1)}
	switch {
	case cfg.Group != nil:
		d.rank, d.world = cfg.Group.Rank(), cfg.Group.Size()
	case cfg.WorldSize < 0:
		errs = append(errs, fmt.Errorf("WorldSize is %d: use the number of ranks of the job (0: 1)", cfg.WorldSize))
		if cfg.Rank < 0 {
			errs = append(errs, fmt.Errorf("Rank %d is outside 0..WorldSize-1: use this process's rank", cfg.Rank))
		}
	case cfg.Rank < 0 || cfg.Rank >= d.world:
		errs = append(errs, fmt.Errorf("Rank %d is outside 0..%d (WorldSize %d): use this process's rank, from 0 to WorldSize-1", cfg.Rank, d.world-1, d.world))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("strategy ddp: %w", errors.Join(errs...))
	}
	if d.cfg.BucketBytes == 0 {
		d.cfg.BucketBytes = DefaultBucketBytes
	}
	if d.cfg.Timeout == 0 {
		d.cfg.Timeout = collective.DefaultTimeout
	}
	if d.dev == nil {
		d.dev = device.NewCPU(0)
	}
	return d, nil
}

func (d *DDP) Info() strategy.Info {
	return strategy.Info{Name: d.name, Rank: d.rank, WorldSize: d.world, GlobalZero: d.rank == 0}
}

// Buckets returns the gradient buckets laid out by Setup.
func (d *DDP) Buckets() []Bucket { return d.buckets }

// fail records the first error, closes the group so that every peer fails
// fast naming this rank, and returns the error prefixed with this rank.
func (d *DDP) fail(what string, err error) error {
	err = d.ExplainPeerLoss(err)
	if peer, ok := collective.PeerOf(err); ok && (errors.Is(err, collective.ErrTimeout) || errors.Is(err, collective.ErrPeerLost)) {
		after := "it stopped after that"
		if errors.Is(err, collective.ErrTimeout) {
			after = "nothing came from it after that" // it may be alive; the network may have failed
		}
		err = fmt.Errorf("%w; the last collective rank %d finished was %s: %s", err, peer, d.lastDone, after)
		if errors.Is(err, collective.ErrTimeout) && d.launch != nil && d.launch.g != nil {
			// A rank silent past the timeout may be stopped (SIGSTOP) or
			// wedged: it would never see this process end and would
			// outlive the job. The job has failed; end it.
			d.launch.g.KillRank(peer)
		}
	}
	err = fmt.Errorf("rank %d: %s: %w", d.rank, what, err)
	if d.broken == nil {
		d.broken = err
		if d.c != nil { // fails the queued reductions too
			d.c.Close()
		}
		d.pending = d.pending[:0]
		d.rode, d.rideH, d.ride = false, nil, nil
	}
	return err
}

// StopAgreed tells the group that the ranks agreed to stop
// (strategy.StopAgreer).
func (d *DDP) StopAgreed() {
	if d.c != nil {
		collective.StopAgreed(d.c)
	}
}

// ExplainPeerLoss adds to an error that lost a peer what this process's
// launcher knows of the local rank that ended (strategy.PeerLossExplainer),
// waiting up to 2 s for it to be reaped.
func (d *DDP) ExplainPeerLoss(err error) error {
	if d.launch != nil && errors.Is(err, collective.ErrPeerLost) {
		if why := d.launch.explain(2 * time.Second); why != "" {
			return fmt.Errorf("%w (%s)", err, why)
		}
	}
	return err
}

func (d *DDP) check() error {
	if d.broken != nil {
		return fmt.Errorf("the job failed earlier: %w", d.broken)
	}
	return nil
}

func (d *DDP) Setup(ctx context.Context, su strategy.Setup) error {
	d.prof = replica.ProfilerOf(su.Profiler)
	store, err := d.setupReplica(ctx, su)
	if err != nil {
		return err
	}
	elem := 4
	if su.Dtype == tensor.Float64 {
		elem = 8
	}
	if d.buckets, err = Buckets(store.Entries(), elem, d.cfg.BucketBytes); err != nil {
		return d.fail("setup", err)
	}
	d.planRide(store, elem)
	if d.opt, d.sched, err = su.NewOptimizer(); err != nil {
		return d.fail("setup", err)
	}
	if err := d.opt.Bind(0, store.NumParams()); err != nil {
		return d.fail("setup", err)
	}
	return nil
}

// setupReplica joins the group, builds this rank's replica and makes it
// rank 0's.
func (d *DDP) setupReplica(ctx context.Context, su strategy.Setup) (*module.Store, error) {
	c, err := d.join(ctx)
	if err != nil {
		return nil, err
	}
	d.c = collective.WithAsync(c)
	d.rank, d.world = d.c.Rank(), d.c.Size()
	store, err := module.NewStore(su.Specs, su.Dtype, su.Seed)
	if err != nil {
		return nil, d.fail("setup", err)
	}
	if err := d.c.Broadcast(ctx, store.Data(), 0); err != nil {
		return nil, d.fail("broadcast rank 0's parameters and buffers", replica.ModelMismatch(err))
	}
	d.lastDone = ddpOp{kind: opSetup}
	// On one P, the engine yields between backward ops while this step's
	// buckets are being reduced, so their reduction overlaps the rest of
	// the pass.
	inFlight := func() bool { return len(d.pending) > 0 }
	opts := append(replica.StatSyncOption(ddpStatSync{d}, d.world, su.SyncBatchNorm), engine.WithGradReady(d.gradReady), engine.WithCommInFlight(inFlight), engine.WithSettingName(su.SettingName))
	d.eng = engine.New(su.Module, store, su.Fields, replica.Seed(su.Seed, d.rank), opts...)
	d.rep = replica.NewGraphs(d.eng)
	if d.localRanks > 1 {
		d.releaseCores = replica.ShareCores(d.cfg.Log, d.localRanks)
	}
	return store, nil
}

// join returns the group: the one given, or the job's, connected.
func (d *DDP) join(ctx context.Context) (collective.Collective, error) {
	if d.cfg.Group != nil {
		return d.cfg.Group, nil
	}
	cctx, cancel := d.launch.connectCtx(ctx)
	c, err := d.cfg.Connect(cctx)
	cancel()
	if err != nil {
		if why := d.launch.explain(0); why != "" {
			err = fmt.Errorf("%w (%s)", err, why)
		}
		return nil, fmt.Errorf("rank %d: join the group: %w", d.rank, err)
	}
	return c, nil
}

// JoinGroup joins the job's group (connecting, or the Group given) and
// hands it over with this rank's device, for a strategy built over DDP's
// processes (fsdp); d is then used only for Launch and Teardown, which
// waits for the local ranks it started.
func (d *DDP) JoinGroup(ctx context.Context) (collective.Collective, device.Device, error) {
	if d.eng != nil {
		return nil, nil, errors.New("ddp: JoinGroup after Setup: the group is DDP's")
	}
	c, err := d.join(ctx)
	if err != nil {
		return nil, nil, err
	}
	if d.localRanks > 1 {
		d.releaseCores = replica.ShareCores(d.cfg.Log, d.localRanks)
	}
	return c, d.dev, nil
}

// Rebind runs m over this rank's parameters from now on; the group stays
// joined, so evaluation after Fit runs on the ranks that trained.
func (d *DDP) Rebind(m module.Module) error {
	if d.rep == nil {
		return errors.New("ddp: Rebind before Setup")
	}
	if err := d.check(); err != nil {
		return err
	}
	d.rep.Rebind(m)
	return nil
}

func (d *DDP) Store() *module.Store { return d.eng.Store() }

func (d *DDP) Step(ctx context.Context, mode module.Mode, b *data.Batch, o strategy.TrainOptions) (strategy.StepResult, error) {
	if d.eng == nil {
		return strategy.StepResult{}, errors.New("ddp: Step before Setup")
	}
	return replica.RunStep(ctx, replica.Steps{Train: d.trainStep, Eval: d.evalStep, Predict: d.predictStep}, mode, b, o)
}

// syncBuffers broadcasts rank 0's buffers (the part of the store after the
// parameters), when the model has any.
func (d *DDP) syncBuffers(ctx context.Context) error {
	st := d.eng.Store()
	if st.Len() == st.NumParams() {
		return nil
	}
	var buf any
	if st.Dtype() == tensor.Float32 {
		buf = st.Data32()[st.NumParams():]
	} else {
		buf = st.Data64()[st.NumParams():]
	}
	return d.c.Broadcast(ctx, buf, 0)
}

func (d *DDP) trainStep(ctx context.Context, b *data.Batch, o strategy.TrainOptions) (float64, []module.Metric, error) {
	if err := d.check(); err != nil {
		return 0, nil, err
	}
	if len(d.pending) > 0 {
		return 0, nil, errors.New("a training Step called while the last step's gradients are still being reduced: call OptimizerStep after a training Step with Sync")
	}
	scale := o.Scale
	if scale == 0 {
		scale = 1
	}
	if o.Sync {
		d.takeRide(o.Ride)
		d.beginReduce(ctx, !d.cfg.NoOverlap)
		defer d.endReduce()
	}
	var r engine.Result
	sp := d.prof.Start("ddp/forward+backward")
	err := d.dev.Do(ctx, func() error {
		var err error
		d.eng.SetRunKey(o.Key)
		d.eng.SetBeforeBackward(o.BeforeBackward)
		r, err = d.rep.Run(ctx, module.Train, b, o.Accumulate, scale)
		return err
	})
	sp.End()
	if err != nil {
		return 0, nil, d.fail("train step on "+d.dev.String(), err)
	}
	if o.Sync {
		d.queueBuckets(len(d.buckets))
	}
	return r.Loss, r.Metrics, nil
}

// beginReduce prepares the buckets of a synced training run; with overlap,
// gradReady queues them during the run.
func (d *DDP) beginReduce(ctx context.Context, overlap bool) {
	d.filling, d.runCtx = overlap, ctx
	if len(d.left) != len(d.buckets) {
		d.left = make([]int, len(d.buckets))
	}
	for i, bk := range d.buckets {
		d.left[i] = bk.Len()
	}
	if replica.Profiling(d.prof) {
		d.spans = make(chan queued, len(d.buckets))
		d.spansDone = make(chan struct{})
		go commSpans(d.prof, d.spans, d.spansDone)
	}
}

// queued is a bucket's all-reduce and its comm span, opened when it was
// queued.
type queued struct {
	h  collective.Handle
	sp profiler.Span
	at time.Time
}

// commSpans records the buckets' spans on the comm track. The communication
// goroutine runs the buckets one after another, so bucket i is on the wire
// from its queuing or bucket i-1's landing, whichever is later, to its own
// landing. A span opened at queuing is the caller's clock, not this
// goroutine's wake-up; one queued while the last was still on the wire is
// reopened at that one's landing (a span records nothing until End).
func commSpans(p profiler.Profiler, spans <-chan queued, done chan<- struct{}) {
	defer close(done)
	var landed time.Time
	i := 0
	for q := range spans {
		if q.at.Before(landed) {
			q.sp = profiler.StartTrack(p, "comm", bucketNames[min(i, len(bucketNames)-1)])
		}
		q.h.Wait()
		q.sp.End()
		landed = time.Now()
		i++
	}
}

// spansEnded waits until the comm track's spans of the last run are ended
// (their reductions have landed), so that a step's spans are in the
// profile when the step returns.
func (d *DDP) spansEnded() {
	if d.spansDone != nil {
		<-d.spansDone
		d.spansDone = nil
	}
}

// endReduce ends the run's queuing (every bucket is queued, or the run
// failed).
func (d *DDP) endReduce() {
	d.filling, d.runCtx = false, nil
	if d.spans != nil {
		close(d.spans)
		d.spans = nil
	}
}

// gradReady is the engine's report that the gradient of [off, off+n) is
// final in the store: the bucket holding it may be complete.
func (d *DDP) gradReady(off, n int) {
	if !d.filling {
		return
	}
	// Buckets lie in decreasing offsets.
	b := sort.Search(len(d.buckets), func(i int) bool { return d.buckets[i].Lo <= off })
	if b == len(d.buckets) || off+n > d.buckets[b].Hi {
		return // not a parameter of a bucket: nothing to reduce
	}
	d.left[b] -= n
	next := len(d.pending)
	for next < len(d.buckets) && d.left[next] == 0 {
		next++
	}
	d.queueBuckets(next)
}

// queueBuckets queues the all-reduce (mean) of every bucket before end not
// queued yet, in bucket order: d.pending holds this step's queued buckets,
// bucket i at index i.
func (d *DDP) queueBuckets(end int) {
	st := d.eng.Store()
	for i := len(d.pending); i < end; i++ {
		bk := d.buckets[i]
		var buf any
		if st.Dtype() == tensor.Float32 {
			buf = st.Grad32()[bk.Lo:bk.Hi]
		} else {
			buf = st.Grad64()[bk.Lo:bk.Hi]
		}
		var q queued
		if d.spans != nil {
			q.sp, q.at = profiler.StartTrack(d.prof, "comm", bucketNames[min(i, len(bucketNames)-1)]), time.Now()
		}
		var h collective.Handle
		if i == len(d.buckets)-1 && d.stage != nil {
			h = d.rideBuffers(buf)
		} else {
			h = d.c.AllReduceAsync(d.runCtx, buf, collective.Mean)
		}
		d.pending = append(d.pending, h)
		if d.spans != nil {
			q.h = h
			d.spans <- q
		}
	}
}

// foldBytes bounds the last bucket whose gradients are copied out to
// carry the buffers in the same all-reduce; a larger one leaves them an
// all-reduce of their own, queued right behind it.
const foldBytes = 1 << 20

// planRide decides how the buffers (BatchNorm running statistics) reach
// every rank in a step, unless BufferSyncOnce: with the last bucket's
// all-reduce (see rideBuffers) when it is at most foldBytes, right behind
// it otherwise. Sharded does not call it: its steps broadcast the buffers
// after the update (afterStep).
func (d *DDP) planRide(st *module.Store, elem int) {
	if len(d.buckets) == 0 {
		return
	}
	d.bufs = !d.cfg.BufferSyncOnce && st.Len() > st.NumParams()
	d.foldable = d.buckets[len(d.buckets)-1].Len()*elem <= foldBytes
	d.planStage(st)
}

// planStage lays out the stage for what rides: the buffers and nRide
// slots, behind the last bucket's gradients when it is foldable.
func (d *DDP) planStage(st *module.Store) {
	n := d.nRide
	if d.bufs {
		n += st.Len() - st.NumParams()
	}
	d.stage, d.folded = nil, false
	if n == 0 {
		return
	}
	if d.folded = d.foldable; d.folded {
		n += d.buckets[len(d.buckets)-1].Len()
	}
	d.stage = collective.Alloc(dtypeOf(st), n)
}

// takeRide makes r (TrainOptions.Ride, nil for none) the values riding
// with this synced step's last bucket, laying the stage out again when
// the number of values changes (once in a run).
func (d *DDP) takeRide(r *strategy.Ride) {
	d.ride = nil
	if len(d.buckets) == 0 {
		return // no gradient reduction to ride on: the caller reduces them
	}
	n := 0
	if r != nil {
		n = len(r.Values)
	}
	if n != d.nRide {
		d.nRide = n
		d.planStage(d.eng.Store())
	}
	d.ride = r
}

func dtypeOf(st *module.Store) collective.DType {
	if st.Dtype() == tensor.Float32 {
		return collective.Float32
	}
	return collective.Float64
}

// rideBuffers queues the last bucket's all-reduce (buf, its gradients)
// with the buffers on board, and returns the handle the step waits for
// before updating that bucket (landFold and landBuffers finish it). The
// buffers go as a sum in which rank 0 gives its values and every other
// rank -0, the one number that leaves every float unchanged when added
// (+0, -0, NaN included): every rank receives rank 0's buffers bit for
// bit, as the broadcast gave them, without a round trip of their own.
// Folded, the gradients are summed too and divided by the world size on
// landing, which is what every backend's Mean does (a sum, then a
// division). The buffers are final once the forward pass is done: neither
// backward nor the update writes them.
//
// The ride's values (TrainOptions.Ride) go last, each rank's own, summed:
// Sample runs here, as the last bucket is queued, so they hold what the
// rank knew then.
func (d *DDP) rideBuffers(buf any) collective.Handle {
	st := d.eng.Store()
	g := 0
	if d.folded {
		g = collective.Copy(d.stage, buf)
	}
	if d.bufs {
		nb := st.Len() - st.NumParams()
		bufs := collective.Sub(d.stage, g, g+nb)
		if d.rank == 0 {
			if st.Dtype() == tensor.Float32 {
				collective.Copy(bufs, st.Data32()[st.NumParams():])
			} else {
				collective.Copy(bufs, st.Data64()[st.NumParams():])
			}
		} else {
			negZero(bufs)
		}
		g += nb
	}
	if d.nRide > 0 {
		var vals []float64
		if d.ride != nil {
			if d.ride.Sample != nil {
				d.ride.Sample(d.ride.Values)
			}
			vals = d.ride.Values
		}
		putValues(collective.Sub(d.stage, g, g+d.nRide), vals)
	}
	d.rode = true
	if d.folded {
		return d.c.AllReduceAsync(d.runCtx, d.stage, collective.Sum)
	}
	h := d.c.AllReduceAsync(d.runCtx, buf, collective.Mean)
	d.rideH = d.c.AllReduceAsync(d.runCtx, d.stage, collective.Sum)
	return h
}

// negZero fills buf with -0.
func negZero(buf any) {
	switch b := buf.(type) {
	case []float32:
		z := float32(math.Copysign(0, -1))
		for i := range b {
			b[i] = z
		}
	case []float64:
		z := math.Copysign(0, -1)
		for i := range b {
			b[i] = z
		}
	}
}

// landFold puts the mean of the folded gradients into the store once the
// last bucket's all-reduce has landed, before that bucket is updated.
func (d *DDP) landFold() {
	if !d.rode || !d.folded {
		return
	}
	st := d.eng.Store()
	bk := d.buckets[len(d.buckets)-1]
	grads := collective.Sub(d.stage, 0, bk.Len())
	collective.ScaleAny(grads, d.world)
	if st.Dtype() == tensor.Float32 {
		collective.Copy(st.Grad32()[bk.Lo:bk.Hi], grads)
	} else {
		collective.Copy(st.Grad64()[bk.Lo:bk.Hi], grads)
	}
}

// landBuffers waits for the stage's own all-reduce (not folded), puts
// rank 0's buffers into this rank's store and hands the ride's sums back.
func (d *DDP) landBuffers() error {
	h := d.rideH
	d.rode, d.rideH = false, nil
	if h != nil {
		if err := h.Wait(); err != nil {
			return err
		}
	}
	st := d.eng.Store()
	g := 0
	if d.folded {
		g = d.buckets[len(d.buckets)-1].Len()
	}
	if d.bufs {
		nb := st.Len() - st.NumParams()
		bufs := collective.Sub(d.stage, g, g+nb)
		// Rank 0's own buffers came back unchanged.
		if d.rank != 0 && st.Dtype() == tensor.Float32 {
			collective.Copy(st.Data32()[st.NumParams():], bufs)
		} else if d.rank != 0 {
			collective.Copy(st.Data64()[st.NumParams():], bufs)
		}
		g += nb
	}
	if r := d.ride; r != nil {
		d.ride = nil
		getValues(r.Values, collective.Sub(d.stage, g, g+d.nRide))
		r.Rode = true
	}
	return nil
}

// putValues writes vals into slots (a []float32 or []float64), zeros past
// its end.
func putValues(slots any, vals []float64) {
	switch s := slots.(type) {
	case []float32:
		for i := range s {
			s[i] = 0
			if i < len(vals) {
				s[i] = float32(vals[i])
			}
		}
	case []float64:
		clear(s)
		copy(s, vals)
	}
}

// getValues reads slots (a []float32 or []float64) into vals.
func getValues(vals []float64, slots any) {
	switch s := slots.(type) {
	case []float32:
		for i := range vals {
			vals[i] = float64(s[i])
		}
	case []float64:
		copy(vals, s)
	}
}

// bucketNames are the span names of gradient buckets (the last one covers
// every bucket past it), built once so profiling allocates no strings.
var bucketNames = func() []string {
	out := make([]string, 16)
	for i := range out {
		out[i] = fmt.Sprintf("all-reduce bucket %d", i)
	}
	out[15] = "all-reduce bucket 15+"
	return out
}()

var waitNames = func() []string {
	out := make([]string, 16)
	for i := range out {
		out[i] = fmt.Sprintf("wait bucket %d", i)
	}
	out[15] = "wait bucket 15+"
	return out
}()

func (d *DDP) OptimizerStep(ctx context.Context, o strategy.OptimizerOptions) (float64, error) {
	norm, err := d.optimizerStep(ctx, o)
	if err != nil {
		return norm, err
	}
	d.steps++
	return norm, d.afterStep(ctx)
}

// afterStep gives every rank rank 0's buffers at the end of a step: those
// that rode with the gradients, or a broadcast (a step without a synced
// micro-batch; Sharded). Evaluation runs no collective per batch (ranks may
// see different numbers of batches), and callbacks read the weights at the
// batch end, so without this each rank would validate, test and show the
// BatchNorm statistics of its own last micro-batch.
func (d *DDP) afterStep(ctx context.Context) error {
	if d.rode {
		if err := d.landBuffers(); err != nil {
			return d.fail(ddpOp{kind: opRide, step: d.steps}.String(), err)
		}
		d.lastDone = ddpOp{kind: opRide, step: d.steps}
		return nil
	}
	if d.cfg.BufferSyncOnce {
		return nil
	}
	if err := d.syncBuffers(ctx); err != nil {
		return d.fail(ddpOp{kind: opBuffers, step: d.steps}.String(), err)
	}
	if st := d.eng.Store(); st.Len() > st.NumParams() {
		d.lastDone = ddpOp{kind: opBuffers, step: d.steps}
	}
	return nil
}

func (d *DDP) optimizerStep(ctx context.Context, o strategy.OptimizerOptions) (float64, error) {
	if err := d.check(); err != nil {
		return math.NaN(), err
	}
	st := d.eng.Store()
	if len(d.pending) == 0 {
		// No reduction in flight: a step without a synced micro-batch
		// updates from local gradients, like Single.
		if err := replica.BeforeUpdate(o, st, 0, st.NumParams()); err != nil {
			return math.NaN(), err
		}
		return replica.ApplyStep(st, d.opt, o, 0, st.NumParams()), nil
	}
	defer func() {
		d.pending = d.pending[:0]
		d.spansEnded()
	}()
	if o.ClipNorm > 0 || o.BeforeUpdate != nil {
		// The norm needs every bucket.
		for i, h := range d.pending {
			sp := d.prof.Start(waitNames[min(i, len(waitNames)-1)])
			err := h.Wait()
			sp.End()
			if err != nil {
				return math.NaN(), d.fail(ddpOp{kind: opBucket, i: i + 1, n: len(d.pending), step: d.steps + 1}.String(), err)
			}
			d.lastDone = ddpOp{kind: opBucket, i: i + 1, n: len(d.pending), step: d.steps + 1}
		}
		d.landFold()
		if err := replica.BeforeUpdate(o, st, 0, st.NumParams()); err != nil {
			return math.NaN(), err
		}
		return replica.ApplyStep(st, d.opt, o, 0, st.NumParams()), nil
	}
	d.opt.Begin()
	for i, h := range d.pending {
		sp := d.prof.Start(waitNames[min(i, len(waitNames)-1)])
		err := h.Wait()
		sp.End()
		if err != nil {
			return math.NaN(), d.fail(ddpOp{kind: opBucket, i: i + 1, n: len(d.pending), step: d.steps + 1}.String(), err)
		}
		d.lastDone = ddpOp{kind: opBucket, i: i + 1, n: len(d.pending), step: d.steps + 1}
		if i == len(d.buckets)-1 {
			d.landFold()
		}
		bk := d.buckets[i]
		if st.Dtype() == tensor.Float32 {
			g := st.Grad32()[bk.Lo:bk.Hi]
			if o.ClipValue > 0 {
				optim.ClipGradValue32(g, o.ClipValue)
			}
			d.opt.Update32(st.Data32()[bk.Lo:bk.Hi], g, bk.Lo)
		} else {
			g := st.Grad64()[bk.Lo:bk.Hi]
			if o.ClipValue > 0 {
				optim.ClipGradValue64(g, o.ClipValue)
			}
			d.opt.Update64(st.Data64()[bk.Lo:bk.Hi], g, bk.Lo)
		}
	}
	return math.NaN(), nil
}

func (d *DDP) evalStep(ctx context.Context, mode module.Mode, b *data.Batch) ([]module.Metric, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	var r engine.Result
	err := d.dev.Do(ctx, func() error {
		var err error
		r, err = d.rep.Run(ctx, mode, b, false, 1)
		return err
	})
	if err != nil {
		return nil, d.failEval(ctx, mode.String()+" step on "+d.dev.String(), err)
	}
	return r.Metrics, nil
}

// failEval is fail for an evaluation or predict step, whose graph
// exchanges nothing with the other ranks: one that the caller's cancel
// ended leaves the group as it was, so that the rank can still meet the
// others (the trainer has them agree on how the loop ended) instead of
// breaking the job.
func (d *DDP) failEval(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return fmt.Errorf("rank %d: %s: %w", d.rank, what, err)
	}
	return d.fail(what, err)
}

func (d *DDP) predictStep(ctx context.Context, b *data.Batch) (*tensor.Dense, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	var out *tensor.Dense
	err := d.dev.Do(ctx, func() error {
		r, err := d.rep.Run(ctx, module.Predict, b, false, 1)
		if err == nil && (r.Output == nil || r.Output.Dims() == 0) {
			err = strategy.ErrScalarPrediction
		}
		out = r.Output
		return err
	})
	if err != nil {
		return nil, d.failEval(ctx, "predict step on "+d.dev.String(), err)
	}
	return out, nil
}

func (d *DDP) Reduce(ctx context.Context, sums, weights []float64, ops []module.Reduce) error {
	if len(sums) == 0 && len(weights) == 0 && len(ops) == 0 {
		return d.barrier(ctx)
	}
	if err := d.check(); err != nil {
		return err
	}
	if err := replica.ReduceMetrics(ctx, d.c, &d.reduceBuf, sums, weights, ops); err != nil {
		return d.fail(ddpOp{kind: opReduce, n: len(sums), step: d.steps}.String(), err)
	}
	d.lastDone = ddpOp{kind: opReduce, n: len(sums), step: d.steps}
	return nil
}

// barrier waits for every rank.
func (d *DDP) barrier(ctx context.Context) error {
	if err := d.check(); err != nil {
		return err
	}
	if err := d.c.Barrier(ctx); err != nil {
		return d.fail(ddpOp{kind: opBarrier, step: d.steps}.String(), err)
	}
	d.lastDone = ddpOp{kind: opBarrier, step: d.steps}
	return nil
}

// SaveState returns the whole model and optimizer state: every rank holds
// all of it.
func (d *DDP) SaveState(ctx context.Context, o strategy.SaveOptions) (*strategy.StateDict, error) {
	if d.eng == nil {
		return nil, errors.New("ddp: SaveState before Setup")
	}
	if err := d.check(); err != nil {
		return nil, err
	}
	return strategy.SaveReplicaState(d.eng.Store(), d.opt, d.sched)
}

func (d *DDP) LoadState(ctx context.Context, sd *strategy.StateDict) error {
	if d.eng == nil {
		return errors.New("ddp: LoadState before Setup")
	}
	if err := d.check(); err != nil {
		return err
	}
	return strategy.LoadReplicaState(sd, d.eng.Store(), d.opt, d.sched, 0, d.eng.Store().NumParams())
}

// DistributedSampler shards training data by rank, padded so every rank
// runs the same number of steps, and evaluation data without padding so
// duplicates do not skew metrics.
func (d *DDP) DistributedSampler(shuffle bool, seed uint64, train bool) data.Sampler {
	return distributedSampler(d.rank, d.world, shuffle, seed, train)
}

func distributedSampler(rank, world int, shuffle bool, seed uint64, train bool) data.Sampler {
	if train {
		return data.DistributedSampler{Rank: rank, World: world, Shuffle: shuffle, Seed: seed}
	}
	return data.DistributedSampler{Rank: rank, World: world, NoPad: true}
}

// Teardown waits for the ranks to finish (a last barrier, so no rank
// closes a connection a peer still reads), closes the group and waits for
// self-launched local ranks.
func (d *DDP) Teardown(ctx context.Context) error {
	var errs []error
	if d.tornDown {
		return nil
	}
	d.tornDown = true
	if d.c != nil && d.broken == nil {
		for _, h := range d.pending {
			h.Wait()
		}
		if d.rideH != nil {
			d.rideH.Wait()
		}
		d.spansEnded()
		d.pending = nil
		bctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
		if err := collective.FinalBarrier(bctx, d.c); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: final barrier: %w", d.rank, err))
		}
		cancel()
		d.c.Close()
	}
	if d.launch != nil {
		if err := d.launch.wait(ctx, d.cfg.Timeout); err != nil {
			errs = append(errs, err)
		}
	}
	if d.releaseCores != nil {
		d.releaseCores()
	}
	return errors.Join(errs...)
}
