package ddp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

var (
	_ strategy.Strategy       = (*Sharded)(nil)
	_ strategy.Sampler        = (*Sharded)(nil)
	_ strategy.MemoryReporter = (*Sharded)(nil)
	_ strategy.MemoryReporter = (*DDP)(nil)
)

func init() {
	for name, stage := range map[string]int{"sharded": 2, "sharded_stage1": 1, "sharded_stage2": 2} {
		strategy.Register(name, func(o strategy.Options) (strategy.Strategy, error) {
			return ddpFromOptions(o, name, func(d *DDP) (strategy.Strategy, error) { return newSharded(d, stage) })
		})
	}
}

func optimizerStateBytes(opt optim.Optimizer, elem int) int {
	n := 0
	for _, b := range opt.State().Buffers {
		n += len(b) * elem
	}
	return n
}

func elemBytes(st *module.Store) int {
	if st.Dtype() == tensor.Float64 {
		return 8
	}
	return 4
}

// Memory reports a DDP rank's memory: everything is replicated.
func (d *DDP) Memory() strategy.Memory {
	st, e := d.eng.Store(), elemBytes(d.eng.Store())
	return strategy.Memory{Params: st.Len() * e, LocalGrads: st.NumParams() * e, ReducedGrads: st.NumParams() * e, OptimizerState: optimizerStateBytes(d.opt, e)}
}

// ShardedConfig configures one rank of Sharded.
type ShardedConfig struct {
	DDPConfig
	// Stage is 1 (optimizer state sharded; gradients all-reduced in buckets
	// as under DDP) or 2 (gradients reduce-scattered too, so each rank keeps
	// only its shard of them). 0: 2.
	Stage int
}

// Sharded is ZeRO stage 1 and 2 data parallelism. Every rank holds the whole
// model and runs forward and backward on its data, like DDP; rank r owns the
// flat parameter span collective.Offset(n, N, r) .. +BlockLen(n, N, r):
// its optimizer is bound to that span only (1/N of the optimizer state),
// it updates only that span from the reduced gradients (reduce-scattered
// into a 1/N buffer under stage 2, all-reduced under stage 1), and the
// updated spans are all-gathered so every rank ends the step with the same
// parameters, bit for bit. Gradient-norm clipping sums the squares of every
// shard across ranks. Optimizer().State() covers this rank's span only.
//
// Stage 1 reduces DDP's buckets, each queued during the backward pass as
// soon as its gradients are ready (see DDP). Stage 2 reduce-scatters the
// whole gradient after the backward pass: rank r's shard is a contiguous
// 1/N of the whole flat buffer, so a bucket (a span of it in backward's
// order) straddles shards unevenly, and a reduce-scatter of one bucket
// would hand rank r block r of the bucket, not the part of its shard inside
// it. Overlapping stage 2 needs a reduce-scatter with per-rank counts (or
// bucket-aligned shards, which changes the shard layout checkpoints
// record); the collective package has neither.
type Sharded struct {
	*DDP
	stage  int
	lo, hi int // this rank's span of the flat parameters
	g32    []float32
	g64    []float64
	synced bool
	norm   []float64
}

// NewSharded returns one rank of Sharded.
func NewSharded(cfg ShardedConfig) (*Sharded, error) {
	d, err := NewDDP(cfg.DDPConfig)
	if err != nil {
		return nil, fmt.Errorf("strategy sharded: %w", errors.Unwrap(err))
	}
	return newSharded(d, cfg.Stage)
}

func newSharded(d *DDP, stage int) (*Sharded, error) {
	if stage == 0 {
		stage = 2
	}
	if stage != 1 && stage != 2 {
		return nil, fmt.Errorf("strategy sharded: Stage is %d: use 1 (shard optimizer state) or 2 (optimizer state and gradients)", stage)
	}
	s := &Sharded{DDP: d, stage: stage, norm: make([]float64, 1)}
	if stage == 2 {
		d.syncGrads = s.reduceScatter
	}
	return s, nil
}

func (s *Sharded) Info() strategy.Info {
	i := s.DDP.Info()
	if i.Name == "ddp" {
		i.Name = fmt.Sprintf("sharded_stage%d", s.stage)
	}
	return i
}

// Stage is 1 or 2.
func (s *Sharded) Stage() int { return s.stage }

// Shard is this rank's span [lo, hi) of the flat parameters.
func (s *Sharded) Shard() (lo, hi int) { return s.lo, s.hi }

func (s *Sharded) Setup(ctx context.Context, su strategy.Setup) error {
	s.prof = replica.ProfilerOf(su.Profiler)
	st, err := s.setupReplica(ctx, su)
	if err != nil {
		return err
	}
	np, n := st.NumParams(), s.world
	s.lo = collective.Offset(np, n, s.rank)
	s.hi = s.lo + collective.BlockLen(np, n, s.rank)
	if s.stage == 1 {
		if s.buckets, err = Buckets(st.Entries(), elemBytes(st), s.cfg.BucketBytes); err != nil {
			return s.fail("setup", err)
		}
	}
	// The shard buffer receives the reduced gradients (stage 2) and then
	// carries the updated parameters to the all-gather (both stages).
	if st.Dtype() == tensor.Float32 {
		s.g32 = make([]float32, s.hi-s.lo)
	} else {
		s.g64 = make([]float64, s.hi-s.lo)
	}
	if s.opt, s.sched, err = su.NewOptimizer(); err != nil {
		return s.fail("setup", err)
	}
	if err := s.opt.Bind(s.lo, s.hi); err != nil {
		return s.fail("setup", err)
	}
	return nil
}

func (s *Sharded) reduceScatter(ctx context.Context) error {
	st := s.Store()
	var err error
	sp := s.prof.Start("reduce-scatter gradients")
	if st.Dtype() == tensor.Float32 {
		err = s.c.ReduceScatter(ctx, st.Grad32(), s.g32, collective.Mean)
	} else {
		err = s.c.ReduceScatter(ctx, st.Grad64(), s.g64, collective.Mean)
	}
	sp.End()
	if err != nil {
		return s.fail("reduce-scatter gradients", err)
	}
	s.synced = true
	return nil
}

func (s *Sharded) OptimizerStep(ctx context.Context, o strategy.OptimizerOptions) (float64, error) {
	norm, err := s.shardStep(ctx, o)
	if err != nil {
		return norm, err
	}
	return norm, s.afterStep(ctx)
}

func (s *Sharded) shardStep(ctx context.Context, o strategy.OptimizerOptions) (float64, error) {
	if err := s.check(); err != nil {
		return math.NaN(), err
	}
	if s.stage == 1 {
		for i, h := range s.pending {
			if err := h.Wait(); err != nil {
				return math.NaN(), s.fail(fmt.Sprintf("all-reduce gradient bucket %d of %d", i+1, len(s.pending)), err)
			}
		}
		s.synced = len(s.pending) > 0
		s.pending = s.pending[:0]
	}
	if !s.synced {
		return math.NaN(), errors.New("OptimizerStep without a training Step with Sync: the sharded strategy updates from reduced gradients only")
	}
	s.synced = false
	st := s.Store()
	norm := math.NaN()
	if st.Dtype() == tensor.Float32 {
		g := s.g32
		if s.stage == 1 {
			g = st.Grad32()[s.lo:s.hi]
		}
		if o.BeforeUpdate != nil {
			if err := s.beforeUpdate(ctx, o, optim.SumSquares32(g)); err != nil {
				return math.NaN(), err
			}
		}
		if o.ClipValue > 0 {
			optim.ClipGradValue32(g, o.ClipValue)
		}
		if o.ClipNorm > 0 {
			s.norm[0] = optim.SumSquares32(g)
			n, err := s.globalNorm(ctx)
			if err != nil {
				return math.NaN(), err
			}
			if c := optim.ClipScale(n, o.ClipNorm); c < 1 {
				optim.ScaleGrads32(g, c)
			}
			norm = n
		}
		p := st.Data32()[s.lo:s.hi]
		s.opt.Begin()
		s.opt.Update32(p, g, s.lo)
		copy(s.g32, p)
		sp := s.prof.Start("all-gather parameters")
		err := s.c.AllGather(ctx, s.g32, st.Data32()[:st.NumParams()])
		sp.End()
		if err != nil {
			return math.NaN(), s.fail("all-gather parameters", err)
		}
	} else {
		g := s.g64
		if s.stage == 1 {
			g = st.Grad64()[s.lo:s.hi]
		}
		if o.BeforeUpdate != nil {
			if err := s.beforeUpdate(ctx, o, optim.SumSquares64(g)); err != nil {
				return math.NaN(), err
			}
		}
		if o.ClipValue > 0 {
			optim.ClipGradValue64(g, o.ClipValue)
		}
		if o.ClipNorm > 0 {
			s.norm[0] = optim.SumSquares64(g)
			n, err := s.globalNorm(ctx)
			if err != nil {
				return math.NaN(), err
			}
			if c := optim.ClipScale(n, o.ClipNorm); c < 1 {
				optim.ScaleGrads64(g, c)
			}
			norm = n
		}
		p := st.Data64()[s.lo:s.hi]
		s.opt.Begin()
		s.opt.Update64(p, g, s.lo)
		copy(s.g64, p)
		sp := s.prof.Start("all-gather parameters")
		err := s.c.AllGather(ctx, s.g64, st.Data64()[:st.NumParams()])
		sp.End()
		if err != nil {
			return math.NaN(), s.fail("all-gather parameters", err)
		}
	}
	return norm, nil
}

// globalNorm sums the shards' squared gradients across ranks and returns
// the global gradient norm.
func (s *Sharded) globalNorm(ctx context.Context) (float64, error) {
	if err := s.c.AllReduce(ctx, s.norm, collective.Sum); err != nil {
		return math.NaN(), s.fail("all-reduce the gradient norm", err)
	}
	return math.Sqrt(s.norm[0]), nil
}

// Memory reports what this rank holds: optimizer state and, under stage 2,
// reduced gradients for its shard only.
func (s *Sharded) Memory() strategy.Memory {
	st, e := s.Store(), elemBytes(s.Store())
	m := strategy.Memory{Params: st.Len() * e, LocalGrads: st.NumParams() * e, OptimizerState: optimizerStateBytes(s.opt, e)}
	if s.stage == 2 {
		m.ReducedGrads = (s.hi - s.lo) * e
	} else {
		m.ReducedGrads = st.NumParams() * e
	}
	return m
}

// SaveState returns the whole model (every rank holds it) and this rank's
// shard of the optimizer's buffers; with o.Full the shards are all-gathered,
// so every rank returns the buffers whole.
func (s *Sharded) SaveState(ctx context.Context, o strategy.SaveOptions) (*strategy.StateDict, error) {
	if s.eng == nil {
		return nil, errors.New("sharded: SaveState before Setup")
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	sd, err := strategy.SaveReplicaState(s.Store(), s.opt, s.sched)
	if err != nil || !o.Full || s.world == 1 {
		return sd, err
	}
	np := s.Store().NumParams()
	for i := range sd.Tensors {
		t := &sd.Tensors[i]
		if !strings.HasPrefix(t.Name, strategy.OptimizerPrefix) {
			continue
		}
		if t.Lo != s.lo || t.Hi != s.hi {
			return nil, fmt.Errorf("sharded: the optimizer's %s covers [%d, %d) but this rank's shard is [%d, %d)", t.Name, t.Lo, t.Hi, s.lo, s.hi)
		}
		full := make([]float64, np)
		if err := s.c.AllGather(ctx, t.Data64, full); err != nil {
			return nil, s.fail("all-gather the optimizer's "+t.Name, err)
		}
		t.Lo, t.Hi, t.Data64 = 0, np, full
	}
	if b, ok := sd.Blobs[strategy.BlobOptimizer]; ok {
		var meta strategy.OptimizerMeta
		if err := json.Unmarshal(b, &meta); err != nil {
			return nil, err
		}
		meta.Lo, meta.Hi = 0, np
		if sd.Blobs[strategy.BlobOptimizer], err = json.Marshal(meta); err != nil {
			return nil, err
		}
	}
	return sd, nil
}

// LoadState loads the whole model and this rank's span of the optimizer's
// buffers, from whole tensors or from shards of any layout that cover it.
func (s *Sharded) LoadState(ctx context.Context, sd *strategy.StateDict) error {
	if s.eng == nil {
		return errors.New("sharded: LoadState before Setup")
	}
	if err := s.check(); err != nil {
		return err
	}
	return strategy.LoadReplicaState(sd, s.Store(), s.opt, s.sched, s.lo, s.hi)
}
