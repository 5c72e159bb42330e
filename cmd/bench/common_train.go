package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/trainer"
)

// steadyAfter is the batch after which allocations count as steady state:
// the first runs of a graph allocate its op-held buffers.
const steadyAfter = 20

// childLog writes the child's logs to stderr, which the parent shows with -v
// or when the child fails.
func childLog() zerolog.Logger {
	return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true, TimeFormat: "15:04:05"}).With().Timestamp().Logger()
}

// chooseBLAS selects the matrix multiply as every fulgur program should at
// start (the parent passes FULGUR_BLAS and FULGUR_BLAS_THREADS) and
// returns its name.
func chooseBLAS(log zerolog.Logger) (string, error) {
	c, err := blas.Choose(log, blas.ChooseOptions{})
	if err != nil {
		return "", err
	}
	if os.Getenv("FULGUR_BENCH_GEMMSTATS") != "" {
		// Choose installed the library but nothing multiplied yet, so the
		// choice can still be wrapped.
		gs := newGemmStats(c.Impl)
		if err := blas.Use(gs); err != nil {
			return "", err
		}
		stats = gs
	}
	return c.Impl.Name(), nil
}

// stats is the multiply recorder when FULGUR_BENCH_GEMMSTATS is set.
var stats *gemmStats

// trainTimer times training batches and counts allocations through trainer
// callbacks. The first batch of every epoch is left out of the time (the
// first one compiles the graph), so samples/s covers batches 2..n of each
// epoch; allocations are counted over the steady batches of the first epoch.
type trainTimer struct {
	now        func() time.Time
	lastBatch  int // index of the last batch of an epoch
	epochStart time.Time
	epochTime  time.Duration
	epochSteps int
	total      time.Duration
	steps      int
	mallocs0   uint64
	allocSteps int
	allocs     float64
	// Counts over the same steady batches as allocs: what can make one
	// step of a rank slower than the others' (a collection, a page fault,
	// a preemption by another thread on the rank's core), as counts,
	// which other work on a shared machine does not blur as it does times.
	counts0, counts stepCounts
	accs            []float64 // val_acc after each epoch
	metric          string
	params          int // trainable parameters, whose gradients the ranks reduce
	// CPU time of the process over the same batches: on a machine shared
	// with other work, samples per CPU second varies far less than per
	// wall second.
	epochCPU0 time.Duration
	epochCPU  time.Duration
	cpu       time.Duration
	// prev is the last batch's end; stepTimes the timed batches' own
	// times, whose median a burst of other work on a shared machine (a
	// compile, another rank's preemption) moves far less than the mean.
	prev      time.Time
	stepTimes []time.Duration
}

func (t *trainTimer) Name() string { return "bench-timer" }

// StopsAtStepEnd is false: it only times, so the ranks' stop agreement
// rides with the gradients as it does in a run without it
// (trainer.StepEndStopper).
func (t *trainTimer) StopsAtStepEnd() bool { return false }

func (t *trainTimer) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	now := t.now()
	if t.params == 0 {
		t.params = s.Weights.NumParams()
	}
	if s.BatchIdx == 0 {
		t.epochStart, t.epochTime, t.epochSteps = now, 0, 0
		t.epochCPU0, t.epochCPU = processCPU(), 0
	} else {
		t.stepTimes = append(t.stepTimes, now.Sub(t.prev))
		t.epochTime = now.Sub(t.epochStart)
		t.epochSteps = s.BatchIdx
		if s.BatchIdx == t.lastBatch {
			t.epochCPU = processCPU() - t.epochCPU0
		}
	}
	if s.Epoch == 0 {
		first := min(steadyAfter, max(t.lastBatch-1, 0))
		switch s.BatchIdx {
		case first:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			t.mallocs0 = ms.Mallocs
			t.counts0 = readStepCounts(&ms)
		case t.lastBatch:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if n := t.lastBatch - first; n > 0 {
				t.allocs = float64(ms.Mallocs-t.mallocs0) / float64(n)
				t.allocSteps = n
				t.counts = readStepCounts(&ms).sub(t.counts0)
			}
		}
	}
	t.prev = now
	if s.BatchIdx == t.lastBatch {
		t.total += t.epochTime
		t.steps += t.epochSteps
		t.cpu += t.epochCPU
	}
	return nil
}

func (t *trainTimer) OnValidationEnd(ctx context.Context, s *trainer.State) error {
	if s.SanityChecking {
		return nil
	}
	if v, ok := s.Metrics.Get(t.metric); ok {
		t.accs = append(t.accs, v)
	}
	return nil
}

// trainJob trains mod through trainer.Fit as the workloads define it
// (Fashion-MNIST, shuffled, drop last) and measures samples/s, allocations
// per steady step and test accuracy. It returns nil figures on ranks other
// than 0.
type trainJob struct {
	Config
	Module   module.Module
	Strategy string // "single" or "ddp"
	// ValEachEpoch tests after every epoch (through validation), recording
	// test_acc_<epoch>.
	ValEachEpoch bool
	// NoTest leaves out the test pass after training (and test_acc).
	NoTest bool
}

func (j trainJob) run(ctx context.Context) (Figures, error) {
	log := childLog()
	blasName, err := chooseBLAS(log)
	if err != nil {
		return nil, err
	}
	train, test, source, err := data.OpenFashionMNIST(j.Data)
	if err != nil {
		return nil, err
	}
	trainL, err := data.NewLoader(train, data.LoaderConfig{BatchSize: j.Batch, Shuffle: true, DropLast: true, Seed: j.Seed})
	if err != nil {
		return nil, err
	}
	testL, err := data.NewLoader(test, data.LoaderConfig{BatchSize: 256})
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "fulgur-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	ranks := max(j.Ranks, 1)
	nb := train.Len() / ranks / j.Batch // per-rank batches per epoch, drop last
	if j.Steps > 0 && j.Steps < nb {
		nb = j.Steps
	}
	timer := &trainTimer{now: time.Now, lastBatch: nb - 1, metric: "val_acc"}
	cfg := trainer.Config{
		MaxEpochs: j.Epochs, LimitTrainBatches: j.Steps, Seed: j.Seed, DefaultRootDir: root,
		Strategy: j.Strategy, Devices: ranks / max(j.Nodes, 1), NumNodes: j.Nodes, EnableProgressBar: trainer.Bool(false),
		HandleSignals: trainer.Bool(false), Callbacks: []trainer.Callback{timer}, Out: io.Discard, Log: &log,
	}
	// FULGUR_BENCH_SPANS=1: where a step's time goes, from the
	// profiler's spans (forward+backward, the waits for each gradient
	// bucket, the optimizer), in ms a step on rank 0.
	var spans *profiler.Simple
	if os.Getenv("FULGUR_BENCH_SPANS") != "" {
		spans = profiler.NewSimple()
		cfg.Profiler = spans
	}
	// FULGUR_BENCH_TIMELINE=DIR: every span of every step on every rank,
	// as the profiler's timeline (DIR/timeline-rank<R>.json), to see
	// which rank's step was slow and where (cannot be combined with
	// FULGUR_BENCH_SPANS).
	if dir := os.Getenv("FULGUR_BENCH_TIMELINE"); dir != "" {
		dir = filepath.Join(dir, j.dirName())
		tl, err := profiler.NewTimeline(profiler.TimelineConfig{Dir: dir, Rank: childIndex()})
		if err != nil {
			return nil, err
		}
		cfg.Profiler = tl
	}
	tr, err := trainer.New(cfg)
	if err != nil {
		return nil, err
	}
	var val *data.Loader
	if j.ValEachEpoch {
		val = testL
	}
	log.Info().Str("data", source).Str("blas", blasName).Str("config", j.Label()).Msg(j.Workload)
	t0 := time.Now()
	if err := tr.Fit(ctx, j.Module, trainL, val); err != nil {
		return nil, err
	}
	fitSeconds := time.Since(t0).Seconds()
	var res map[string]float64
	if !j.NoTest {
		if res, err = tr.Test(ctx, j.Module, testL); err != nil {
			return nil, err
		}
	}
	defer tr.Teardown(ctx)
	if !tr.IsGlobalZero() {
		// The other ranks' counts, and spans, tell who waits for whom
		// (the parent adds them to rank 0's figures as "rank<N> ...").
		f := Figures{}
		timer.counts.add(f, timer.allocSteps)
		if spans != nil {
			addSpanFigures(f, spans.Rows(), float64(tr.Stats().GlobalStep))
		}
		return rankFigures(f, os.Getenv("RANK")), nil
	}
	if timer.steps == 0 {
		return nil, fmt.Errorf("no timed training batches (%d per epoch): raise -steps", nb)
	}
	f := Figures{
		"samples_per_s":     float64(timer.steps*j.Batch*ranks) / timer.total.Seconds(),
		"allocs_per_step":   timer.allocs,
		"samples_per_cpu_s": float64(timer.steps*j.Batch) / timer.cpu.Seconds(),
		"steps":             float64(tr.Stats().GlobalStep),
		"seconds":           fitSeconds,
		"params":            float64(timer.params),
		"step_ms_median":    medianMS(timer.stepTimes),
	}
	timer.counts.add(f, timer.allocSteps)
	if !j.NoTest {
		f["test_acc"] = res["test_acc"]
	}
	for i, a := range timer.accs {
		f[fmt.Sprintf("test_acc_%d", i+1)] = a
	}
	if spans != nil {
		addSpanFigures(f, spans.Rows(), f["steps"])
	}
	return f, nil
}

// stepCounts are a process's counters that tell why a step ran long.
type stepCounts struct {
	GC       uint32 // Go collections
	MinFlt   int64  // minor page faults
	MajFlt   int64  // major page faults
	VolCSw   int64  // voluntary context switches (the process waited)
	InvolCSw int64  // involuntary ones (another thread took the core)
	valid    bool
}

func (c stepCounts) sub(o stepCounts) stepCounts {
	if !c.valid || !o.valid {
		return stepCounts{}
	}
	return stepCounts{GC: c.GC - o.GC, MinFlt: c.MinFlt - o.MinFlt, MajFlt: c.MajFlt - o.MajFlt,
		VolCSw: c.VolCSw - o.VolCSw, InvolCSw: c.InvolCSw - o.InvolCSw, valid: true}
}

// add puts the counts of steps steps into f, per step ("gc_per_step",
// "minflt_per_step", "majflt_per_step", "csw_per_step",
// "involuntary_csw_per_step").
func (c stepCounts) add(f Figures, steps int) {
	if !c.valid || steps <= 0 {
		return
	}
	n := float64(steps)
	f["gc_per_step"] = float64(c.GC) / n
	f["minflt_per_step"] = float64(c.MinFlt) / n
	f["majflt_per_step"] = float64(c.MajFlt) / n
	f["csw_per_step"] = float64(c.VolCSw) / n
	f["involuntary_csw_per_step"] = float64(c.InvolCSw) / n
}

// dirName names the configuration's files: the workload, variant, ranks
// (or independent trainings), backend and batch.
func (c Config) dirName() string {
	parts := []string{c.Workload, c.Variant}
	if c.Coexist {
		parts = append(parts, "coexist")
	} else {
		parts = append(parts, fmt.Sprintf("ranks%d", max(c.Ranks, 1)))
	}
	parts = append(parts, c.Backend, fmt.Sprintf("batch%d", c.Batch))
	if c.BucketBytes > 0 {
		parts = append(parts, "bucket"+byteSize(c.BucketBytes))
	}
	return strings.Join(strings.Fields(strings.Join(parts, " ")), "-")
}

// medianMS is the median of d in milliseconds.
func medianMS(d []time.Duration) float64 {
	ms := make([]float64, len(d))
	for i, v := range d {
		ms[i] = float64(v) / 1e6
	}
	return stat(ms).Median
}

// addSpanFigures adds each profiler span's time a step, in ms, as the
// figure "ms/step <span>", and how many of the trainer's stop agreements
// (all-reduces of their own) a step ran, as "stop agreements/step": 1
// when the ranks agree after every batch, about 2 an epoch when the stop
// flags ride with the gradients (at the epoch's last batch and its end).
func addSpanFigures(f Figures, rows []profiler.Row, steps float64) {
	f["stop agreements/step"] = 0
	for _, r := range rows {
		f["ms/step "+r.Action] = float64(r.Total) / 1e6 / max(steps, 1)
		if r.Action == "stop agreement" {
			f["stop agreements/step"] = float64(r.Calls) / max(steps, 1)
		}
	}
}

// rankFigures names f's figures as rank's ("rank1 ms/step wait bucket 0").
func rankFigures(f Figures, rank string) Figures {
	out := make(Figures, len(f))
	for k, v := range f {
		out["rank"+rank+" "+k] = v
	}
	return out
}

// threadConfigs makes one configuration per -threads value.
func threadConfigs(o *Options, base Config) []Config {
	var cs []Config
	for _, b := range o.BLAS {
		for _, t := range o.Threads {
			c := base
			c.Impl, c.Threads, c.BLAS = "fulgur", t, b
			cs = append(cs, c)
		}
	}
	if o.Peer == "torch" {
		for _, t := range o.PeerThreads {
			c := base
			c.Impl, c.Threads = "torch", t
			cs = append(cs, c)
		}
	}
	return cs
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// peerRatios compares fulgur with the peer: samples/s of each one's fastest
// thread setting in the same run (the bar), and peak RSS of those same
// configurations, run by run.
func peerRatios(o *Options, rs []*Result) []Row {
	if o.Peer == "" {
		return nil
	}
	best := func(impl string, run int) (Figures, bool) {
		var b Figures
		for _, r := range rs {
			if r.Config.Impl != impl || run >= len(r.Runs) {
				continue
			}
			if b == nil || r.Runs[run]["samples_per_s"] > b["samples_per_s"] {
				b = r.Runs[run]
			}
		}
		return b, b != nil
	}
	var sps, rss []float64
	for run := 0; run < o.Runs; run++ {
		f, ok1 := best("fulgur", run)
		p, ok2 := best(o.Peer, run)
		if !ok1 || !ok2 {
			continue
		}
		sps = append(sps, f["samples_per_s"]/p["samples_per_s"])
		if p["peak_rss_mb"] > 0 {
			rss = append(rss, f["peak_rss_mb"]/p["peak_rss_mb"])
		}
	}
	if len(sps) == 0 {
		return nil
	}
	w := rs[0].Config.Workload
	rows := []Row{{Workload: w, Config: "fulgur/" + o.Peer + " samples_per_s (best threads each)", N: len(sps),
		Labels: map[string]any{"figure": "samples_per_s", "peer": o.Peer}, Figures: map[string]Stat{"ratio": stat(sps)}}}
	if len(rss) > 0 {
		rows = append(rows, Row{Workload: w, Config: "fulgur/" + o.Peer + " peak_rss_mb (same configs)", N: len(rss),
			Labels: map[string]any{"figure": "peak_rss_mb", "peer": o.Peer}, Figures: map[string]Stat{"ratio": stat(rss)}})
	}
	return rows
}
