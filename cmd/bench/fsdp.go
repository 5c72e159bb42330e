package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
)

// fsdp: a wide mlp (1024 wide, 8 hidden layers and a 10-way output: 8.4M
// parameters, 32 MB in float32; Adam) trained with ddp, ZeRO stage 1 and 2
// (sharded_stage1, sharded_stage2) and fsdp, the last three with one unit
// (gradient bucket) per layer, at 1, 2 and 4 ranks, each rank a process of its own (tcp), batch 16 per rank: the
// parameters dwarf the activations. Per rank, the runtime measures the
// Go heap (runtime/metrics, live objects) sampled every millisecond over
// the timed steps (heap_peak_mb, garbage included) and after a collection
// at the end (heap_live_mb: what the rank keeps), both less the heap before
// Setup (at 1 rank, heap_peak_mb also holds the in-process group's copies,
// garbage between collections), and the figure is the largest rank's; ms_per_step is the slowest
// rank's mean time of a training step and optimizer step. Derived rows give
// each of sharded_stage1, sharded_stage2 and fsdp over ddp at each size.
func init() {
	register(&workload{
		Name: "fsdp",
		Doc:  "wide mlp under ddp, sharded_stage1, sharded_stage2 and fsdp at 1, 2, 4 ranks: heap per rank and step time",
		Configs: func(o *Options) ([]Config, error) {
			var cs []Config
			for _, st := range fsdpStrategies {
				for _, ranks := range []int{1, 2, 4} {
					cs = append(cs, Config{Workload: "fsdp", Impl: "fulgur", Variant: "strategy=" + st, Ranks: ranks,
						Batch: orDefault(o.Batch, 16), Steps: orDefault(o.Steps, 20), Seed: o.Seed})
				}
			}
			return cs, nil
		},
		Run:    fsdpRun,
		Derive: fsdpDerive,
	})
}

// fsdp-accum: the fsdp workload's model and measures with gradient
// accumulation, 4 micro-batches of -batch rows per optimizer step, at 2
// and 4 ranks (or -ranks): micro=hold is the default (the micro-batches
// before the last hold the whole model's gradient and reduce-scatter
// nothing), micro=sync is fsdp.Config.SyncMicroBatches (every micro-batch
// reduce-scatters, gradients stay at 1/N). ms_per_step is per optimizer
// step; derived rows give hold over sync.
func init() {
	register(&workload{
		Name: "fsdp-accum",
		Doc:  "wide mlp under fsdp with 4 micro-batches a step, held or reduce-scattered: heap per rank and step time",
		Configs: func(o *Options) ([]Config, error) {
			ranks := o.Ranks
			if len(ranks) == 0 {
				ranks = []int{2, 4}
			}
			var cs []Config
			for _, micro := range []string{"hold", "sync"} {
				for _, n := range ranks {
					cs = append(cs, Config{Workload: "fsdp-accum", Impl: "fulgur", Variant: "strategy=fsdp accum=4 micro=" + micro, Ranks: n,
						Batch: orDefault(o.Batch, 16), Steps: orDefault(o.Steps, 10), Seed: o.Seed})
				}
			}
			return cs, nil
		},
		Run:    fsdpRun,
		Derive: fsdpAccumDerive,
	})
}

var fsdpSizes = []int{1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 10}

// fsdpStrategies are the workload's strategies, ddp (the reference of the
// derived rows) first.
var fsdpStrategies = []string{"ddp", "sharded_stage1", "sharded_stage2", "fsdp"}

// fsdpLayerBytes is one hidden layer (weight and bias): the sharded
// strategies' unit cap, so that their gradient buckets are fsdp's units.
const fsdpLayerBytes = (1024*1024 + 1024) * 4

const fsdpWarmup = 3

func fsdpRun(ctx context.Context, c Config) (Figures, error) {
	log := childLog()
	if _, err := chooseBLAS(log); err != nil {
		return nil, err
	}
	base := liveHeap()
	var g collective.Collective
	if c.Ranks > 1 {
		grp, err := openBackend(ctx, "tcp")
		if err != nil {
			return nil, err
		}
		g = grp
	} else {
		grps, _ := inproc.NewGroup(1)
		g = grps[0]
	}
	var s strategy.Strategy
	var err error
	switch v := variant(c.Variant)["strategy"]; v {
	case "ddp":
		s, err = ddp.NewDDP(ddp.DDPConfig{Group: g, Log: log})
	case "sharded_stage1", "sharded_stage2":
		s, err = sharded.New(sharded.Config{Group: g, Stage: int(v[len(v)-1] - '0'), BucketBytes: fsdpLayerBytes, Log: log})
	case "fsdp":
		s, err = fsdp.New(fsdp.Config{Group: g, Log: log, SyncMicroBatches: variant(c.Variant)["micro"] == "sync"})
	default:
		err = fmt.Errorf("fsdp workload: unknown strategy %q", v)
	}
	if err != nil {
		return nil, err
	}
	defer s.Teardown(ctx)
	m := &models.MLP{Sizes: fsdpSizes}
	b := module.NewBuilder(tensor.Float32)
	if err := m.Configure(b); err != nil {
		return nil, err
	}
	specs, err := b.Specs()
	if err != nil {
		return nil, err
	}
	fields := []data.Field{{Name: "x", Shape: []int{fsdpSizes[0]}}, {Name: "y", Shape: []int{}}}
	err = s.Setup(ctx, strategy.Setup{Module: m, Specs: specs, Dtype: tensor.Float32, Seed: c.Seed, Fields: fields,
		NewOptimizer: m.ConfigureOptimizers, Log: zerolog.Nop()})
	if err != nil {
		return nil, err
	}
	rank := s.Info().Rank
	rng := rand.New(rand.NewPCG(c.Seed, uint64(rank)))
	batch := &data.Batch{Size: c.Batch, Fields: fields, Data: [][]float32{make([]float32, c.Batch*fsdpSizes[0]), make([]float32, c.Batch)}}
	for i := range batch.Data[0] {
		batch.Data[0][i] = float32(rng.NormFloat64())
	}
	for i := range batch.Data[1] {
		batch.Data[1][i] = float32(rng.IntN(fsdpSizes[len(fsdpSizes)-1]))
	}
	accum := 1
	if a, ok := variant(c.Variant)["accum"]; ok {
		if accum, err = strconv.Atoi(a); err != nil || accum < 1 {
			return nil, fmt.Errorf("fsdp workload: accum=%q: use a positive number of micro-batches", a)
		}
	}
	step := func() error {
		for i := range accum {
			o := strategy.TrainOptions{Sync: i == accum-1, Accumulate: i > 0, Scale: 1 / float64(accum)}
			if _, err := s.Step(ctx, module.Train, batch, o); err != nil {
				return err
			}
		}
		_, err := s.OptimizerStep(ctx, strategy.OptimizerOptions{})
		return err
	}
	for range fsdpWarmup {
		if err := step(); err != nil {
			return nil, err
		}
	}
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t0 := time.Now()
	for range c.Steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	perStep := time.Since(t0).Seconds() / float64(c.Steps)
	close(stop)
	<-done
	live := liveHeap()
	mb := func(v uint64) float64 { return float64(int64(v)-int64(base)) / (1 << 20) }
	vals := []float64{perStep * 1000, mb(peak.Load()), mb(live)}
	ws := []float64{1, 1, 1}
	if err := s.Reduce(ctx, vals, ws, []module.Reduce{module.Max, module.Max, module.Max}); err != nil {
		return nil, err
	}
	if rank != 0 {
		return nil, nil
	}
	np := 0
	for _, sp := range specs {
		np += sp.Size()
	}
	return Figures{"ms_per_step": vals[0], "heap_peak_mb": vals[1], "heap_live_mb": vals[2], "params_mb": float64(np*4) / (1 << 20)}, nil
}

// liveHeap is the heap's live objects after a collection.
func liveHeap() uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

// fsdpDerive gives each strategy's figures over ddp's at each number of
// ranks, run by run.
func fsdpDerive(o *Options, rs []*Result) []Row {
	by := map[string]map[int]*Result{}
	for _, r := range rs {
		st := variant(r.Config.Variant)["strategy"]
		if by[st] == nil {
			by[st] = map[int]*Result{}
		}
		by[st][r.Config.Ranks] = r
	}
	var rows []Row
	for _, st := range fsdpStrategies[1:] {
		for _, n := range []int{1, 2, 4} {
			d, f := by["ddp"][n], by[st][n]
			if d == nil || f == nil {
				continue
			}
			row := ratioRow("fsdp", st+"/ddp", n, f, d, "_vs_ddp")
			row.Labels["strategy"] = st
			rows = append(rows, row)
		}
	}
	return rows
}

// ratioRow is num's heap and step-time figures over den's, run by run,
// each named with suffix.
func ratioRow(workload, name string, ranks int, num, den *Result, suffix string) Row {
	figs := map[string]Stat{}
	n := min(len(num.Runs), len(den.Runs))
	for _, fig := range []string{"heap_live_mb", "heap_peak_mb", "ms_per_step"} {
		var ratio []float64
		for run := 0; run < n; run++ {
			if v := den.Runs[run][fig]; v > 0 {
				ratio = append(ratio, num.Runs[run][fig]/v)
			}
		}
		figs[fig+suffix] = stat(ratio)
	}
	return Row{Workload: workload, Config: name + " ranks=" + strconv.Itoa(ranks), N: n, Labels: map[string]any{"ranks": ranks}, Figures: figs}
}

// fsdpAccumDerive gives held micro-batches' figures over reduce-scattered
// ones' at each number of ranks, run by run.
func fsdpAccumDerive(o *Options, rs []*Result) []Row {
	by := map[string]map[int]*Result{}
	var ranks []int
	for _, r := range rs {
		m := variant(r.Config.Variant)["micro"]
		if by[m] == nil {
			by[m] = map[int]*Result{}
		}
		by[m][r.Config.Ranks] = r
		if m == "hold" {
			ranks = append(ranks, r.Config.Ranks)
		}
	}
	var rows []Row
	for _, n := range ranks {
		if y := by["sync"][n]; y != nil {
			rows = append(rows, ratioRow("fsdp-accum", "hold/sync", n, by["hold"][n], y, "_hold_vs_sync"))
		}
	}
	return rows
}
