package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/deploy/netns"
	"github.com/fulgur-ml/fulgur/plot"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// scaleout: the comparison users make before buying machines. resnet8
// under ddp with N ranks on one host (scale-up, shared memory) against N
// ranks split over two "machines" (scale-out, tcp): two network namespaces
// joined by a link shaped to -link-rate with tc tbf and delayed by
// -link-delay each way by deploy/netns's relay (many kernels lack
// sch_netem, so the delay cannot be tc's). Every rank runs on one core
// (GOMAXPROCS=1, one BLAS thread, one worker, taskset) with a per-rank
// batch of 32 (weak scaling, as Horovod's study measured it); 1 rank is
// the baseline of both layouts. Across nodes fulgur has no hierarchical
// collective (shared memory inside a node, tcp between them, as NCCL and
// Horovod do): all ranks join one tcp ring, and the hops between the two
// ranks of a node stay inside that node's kernel. Beside the figures it
// records the machine's limits (issue 15 item 5): one core's sgemm peak
// and memory copy bandwidth, measured in the same run, the link as a
// probe saw it, and the share of each the training reached. To account
// for the gap between the layouts it also times one step's all-reduces
// alone on each (the gradients', with the buffers and the stop flags on
// board), and each
// scale-out run reports the relay's CPU time a step, which the ranks'
// cores pay.
func init() {
	register(&workload{
		Name:    "scaleout",
		Doc:     "resnet8 ddp, N ranks on one host (shm) vs split over two network namespaces joined by a shaped link (tcp), one core per rank; samples/s and the difference",
		Configs: scaleoutConfigs,
		Setup:   scaleoutSetup,
		Run:     scaleoutRun,
		Derive:  scaleoutDerive,
		After:   scaleoutPlot,
	})
}

// The scaleout workload's variants.
const (
	oneRank  = "single"
	scaleUp  = "scale-up"
	scaleOut = "scale-out"
	// scaleOutHier is scale-out over FULGUR_BACKEND=hier: shared memory
	// inside each node, tcp across (with 2 or more ranks a node).
	scaleOutHier = "scale-out hier"
	limits       = "limits"
	// One step's collectives alone, on each layout: the all-reduce of
	// resnet8's gradients.
	commUp  = "comm scale-up"
	commOut = "comm scale-out"
	// commOutHier is commOut over FULGUR_BACKEND=hier (4 or more ranks).
	commOutHier = "comm scale-out hier"
)

// resnet8Params is models.ResNet's default parameter count (the training
// runs' "params" figure): its gradients are what a step all-reduces.
const resnet8Params = 77754

// commSizes are the all-reduces a step of resnet8 ddp makes, in bytes:
// the gradients (one bucket). Rank 0's buffers (681 values) and the
// ranks' stop flags (5) ride in it, 2.7 KB more; the stop agreement's
// own all-reduce of 20 bytes is gone since the flags ride (the bench's
// timer callback says it never stops, trainer.StepEndStopper).
var commSizes = []int{4 * resnet8Params}

// commIters is how many all-reduces of each size a comm run times.
const commIters = 200

func scaleoutConfigs(o *Options) ([]Config, error) {
	if !strategy.Known("ddp") {
		return nil, errors.New(`strategy "ddp" is not registered (strategy/registry)`)
	}
	if o.Peer != "" {
		return nil, fmt.Errorf("-peer %s: the scaleout workload has no peer (PyTorch's DDP across namespaces is not wired up)", o.Peer)
	}
	defaultScaleoutRanks(o)
	var errs []error
	for _, r := range o.Ranks {
		if r > 1 && r%2 != 0 {
			errs = append(errs, fmt.Errorf("-ranks has %d: scale-out splits the ranks evenly over its two nodes, so use 1 or even numbers", r))
		}
	}
	if err := o.linkConfig().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("-link-rate %q, -link-delay %v, -link-mtu %d: %w", o.LinkRate, o.LinkDelay, o.LinkMTU, err))
	}
	if o.Plot != "" {
		if ext := filepath.Ext(o.Plot); ext != ".svg" && ext != ".png" {
			errs = append(errs, fmt.Errorf("-plot %q: end the name in .svg or .png", o.Plot))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	base := Config{Workload: "scaleout", Impl: "fulgur", Threads: 1, Workers: 1, BLAS: o.BLAS[0], Pinned: true, ShareCores: true,
		Batch: orDefault(o.Batch, 32), Epochs: 1, Steps: orDefault(o.Steps, 200), Seed: o.Seed, Data: o.Data}
	lim := base
	lim.Variant, lim.Ranks, lim.Steps, lim.Batch = limits, 1, 0, 0
	cs := []Config{lim}
	for _, r := range o.Ranks {
		c := base
		c.Ranks = r
		if r == 1 {
			c.Variant = oneRank
			cs = append(cs, c)
			continue
		}
		up, out := c, c
		up.Variant, up.Backend = scaleUp, "shm"
		out.Variant, out.Backend, out.Nodes = scaleOut, "tcp", 2
		for _, b := range bucketCaps(o) {
			up.BucketBytes, out.BucketBytes = b, b
			cs = append(cs, up, out)
		}
		up.BucketBytes, out.BucketBytes = 0, 0
		if r >= 4 && r%2 == 0 {
			h := out
			h.Variant, h.Backend = scaleOutHier, "hier"
			cs = append(cs, h)
		}
		cup, cout := up, out
		cup.Variant, cout.Variant = commUp, commOut
		cup.Steps, cout.Steps, cup.Batch, cout.Batch = commIters, commIters, 0, 0
		cs = append(cs, cup, cout)
		if r >= 4 && r%2 == 0 {
			ch := cout
			ch.Variant, ch.Backend = commOutHier, "hier"
			cs = append(cs, ch)
		}
		if n := runtime.NumCPU(); r > n {
			fmt.Fprintf(os.Stderr, "bench: WARNING: %d ranks on %d cores: ranks share cores (oversubscribed), so their figures measure contention as much as scaling\n", r, n)
		}
	}
	return cs, nil
}

// bucketCaps are the ddp bucket caps to measure (-bucket-bytes), the
// default alone when none are given.
func bucketCaps(o *Options) []int {
	if len(o.BucketBytes) == 0 {
		return []int{0}
	}
	return o.BucketBytes
}

// defaultScaleoutRanks fills -ranks, which the allreduce workload shares,
// with the scaleout workload's default when the user gave none.
func defaultScaleoutRanks(o *Options) {
	if len(o.Ranks) == 0 {
		o.Ranks = []int{1, 2, 4}
	}
}

// scaleoutSetup makes the two nodes once for every scale-out
// configuration and probes the link between them.
func scaleoutSetup(ctx context.Context, o *Options) (func() error, error) {
	defaultScaleoutRanks(o)
	if len(o.Ranks) == 1 && o.Ranks[0] == 1 {
		return func() error { return nil }, nil
	}
	if err := netns.Check(); err != nil {
		return nil, fmt.Errorf("the scale-out layout runs ranks in two network namespaces (-ranks 1 alone needs none): %w", err)
	}
	if gone, err := netns.Sweep(); err != nil {
		return nil, err
	} else if len(gone) > 0 {
		fmt.Fprintf(os.Stderr, "bench: removed network namespaces left by killed runs: %s\n", strings.Join(gone, ", "))
	}
	// The relay runs in processes of its own (this program
	// re-executed), so this process's runtime has nothing of it to wake.
	p, err := netns.Up(o.linkConfig())
	if err != nil {
		return nil, fmt.Errorf("the scale-out layout runs ranks in two network namespaces: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	closeNodes := p.Close
	pr, err := p.Probe(pctx, 200, 64<<20)
	if err != nil {
		return nil, errors.Join(err, closeNodes())
	}
	o.nodes, o.link = p, pr
	prio := "at a real-time priority"
	if !p.Relay.Realtime() {
		prio = "at an ordinary priority (SCHED_FIFO refused: without CAP_SYS_NICE the ranks delay its frames)"
	}
	cpus := o.linkConfig().NodeCPUs
	fmt.Fprintf(os.Stderr, "bench: scale-out nodes %s (%s, cores %v) and %s (%s, cores %v): tbf %s each way, MTU %d; %v added to every frame each way by the relay, %s, one process per direction on the receiving node's cores (not tc netem, which many kernels lack); probe: round trip %v (%v of it the delay the relay adds), bulk %.2f GB/s (%.2f Gbit/s)\n",
		p.NS[0], p.Addr[0], cpus[0], p.NS[1], p.Addr[1], cpus[1], o.LinkRate, o.LinkMTU, o.LinkDelay, prio, pr.RTT.Round(time.Microsecond), 2*o.LinkDelay, pr.Throughput/1e9, pr.Throughput*8/1e9)
	if bits, err := netns.ParseRate(o.LinkRate); err == nil && pr.Throughput*8 < 0.9*bits {
		fmt.Fprintf(os.Stderr, "bench: the relay carries %.2f Gbit/s, below the %s tbf rate: the relay, not tbf, limits the link\n", pr.Throughput*8/1e9, o.LinkRate)
	}
	return closeNodes, nil
}

func (o *Options) linkConfig() netns.Config {
	return netns.Config{Rate: o.LinkRate, Delay: o.LinkDelay, MTU: o.LinkMTU, NodeCPUs: scaleoutNodeCPUs(o.Ranks, allowedCPUs())}
}

// scaleoutNodeCPUs are the cores each node's ranks are pinned to, over
// every scale-out run of -ranks (placeRanks): the relay delivers each
// node's frames on that node's cores, which pay for its network receive
// as a real host's do, instead of on whichever core the scheduler picks
// (at times one rank's, which then lags and the other waits for it at
// every all-reduce). With -ranks 2 node 0 gets core 0 and node 1 core 1;
// with 4 ranks on 2 cores each node spans both. nil without a scale-out
// run.
func scaleoutNodeCPUs(ranks []int, cpus []int) [2][]int {
	var set [2]map[int]bool
	for _, r := range ranks {
		place, err := placeRanks(r, 2, cpus)
		if r < 2 || err != nil {
			continue
		}
		for _, p := range place {
			if set[p.Node] == nil {
				set[p.Node] = map[int]bool{}
			}
			set[p.Node][p.Core] = true
		}
	}
	if set[0] == nil {
		return [2][]int{}
	}
	return [2][]int{slices.Sorted(maps.Keys(set[0])), slices.Sorted(maps.Keys(set[1]))}
}

func scaleoutRun(ctx context.Context, c Config) (Figures, error) {
	switch c.Variant {
	case limits:
		return measureLimits(ctx)
	case commUp, commOut, commOutHier:
		return measureComm(ctx, c)
	}
	st := "single"
	if c.Ranks > 1 {
		st = "ddp"
	}
	return trainJob{Config: c, Module: newResNet8(), Strategy: st, NoTest: true}.run(ctx)
}

// measureLimits measures one core's limits with the BLAS the training
// uses: the sgemm peak (1024 x 1024 x 1024, where every library is at
// its best) and the memory copy bandwidth (64 MiB buffers, read + write),
// each the best of three 0.3 s windows.
func measureLimits(ctx context.Context) (Figures, error) {
	if _, err := chooseBLAS(childLog()); err != nil {
		return nil, err
	}
	const n = 1024
	a, b, cm := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = float32(i%7)*0.1, float32(i%5)*0.1
	}
	src, dst := make([]byte, 64<<20), make([]byte, 64<<20)
	for i := range src {
		src[i] = byte(i)
	}
	best := func(work func() float64) float64 {
		var top float64
		for range 3 {
			t0, done := time.Now(), 0.0
			for time.Since(t0) < 300*time.Millisecond && ctx.Err() == nil {
				done += work()
			}
			top = max(top, done/time.Since(t0).Seconds())
		}
		return top
	}
	gflops := best(func() float64 {
		blas.Sgemm(false, false, n, n, n, 1, a, n, b, n, 0, cm, n)
		return 2 * n * n * n / 1e9
	})
	gbs := best(func() float64 {
		copy(dst, src)
		return 2 * float64(len(src)) / 1e9
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return Figures{"sgemm_gflops_core": gflops, "memcpy_gbps_core": gbs}, nil
}

// measureComm times the all-reduces of one step (commSizes) on c's
// backend and ranks: the median of c.Steps each, from a barrier to the
// slowest rank's finish, in "comm_ms_<bytes>" figures.
func measureComm(ctx context.Context, c Config) (Figures, error) {
	g, err := openBackend(ctx, c.Backend)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	f := Figures{}
	for _, size := range commSizes {
		times, err := timeAllReduce(ctx, g, size, c.Steps)
		if err != nil {
			return nil, err
		}
		f[fmt.Sprintf("comm_ms_%d", size)] = stat(times).Median * 1e3
	}
	// What sharded and fsdp send instead of an all-reduce: a reduce-scatter
	// of the gradients and an all-gather of the updated parameters.
	times, err := timeScatterGather(ctx, g, commSizes[0], c.Steps)
	if err != nil {
		return nil, err
	}
	f[fmt.Sprintf("comm_rsag_ms_%d", commSizes[0])] = stat(times).Median * 1e3
	if g.Rank() != 0 {
		return nil, nil
	}
	return f, nil
}

// timeScatterGather times iters reduce-scatters of size bytes of float32,
// each followed by an all-gather of the block back, as timeAllReduce
// times all-reduces: the slowest rank's seconds for each pair.
func timeScatterGather(ctx context.Context, g collective.Group, size, iters int) ([]float64, error) {
	n := size / 4
	send, whole := make([]float32, n), make([]float32, n)
	for i := range send {
		send[i] = 1
	}
	block := make([]float32, collective.BlockLen(n, g.Size(), g.Rank()))
	return timeCollective(ctx, g, iters, func() error {
		if err := g.ReduceScatter(ctx, send, block, collective.Sum); err != nil {
			return err
		}
		return g.AllGather(ctx, block, whole)
	})
}

// resnetTrainFLOPs is the floating-point work of one training sample of
// the default ResNet on h x w images of in channels: the convolutions and
// the classifier forward (a multiply-add is 2), times 3 for the backward
// pass (input and weight gradients). Normalisation, activations and the
// optimizer are left out: they are memory-bound, not sgemm.
func resnetTrainFLOPs(h, w, in int, widths []int, classes int) float64 {
	conv := func(h, w, cin, cout, k int) float64 { return 2 * float64(h*w*cin*cout*k*k) }
	f := conv(h, w, in, widths[0], 3) // the stem
	cin := widths[0]
	for i, c := range widths {
		if i > 0 { // stride 2, "same" padding
			h, w = (h+1)/2, (w+1)/2
		}
		f += conv(h, w, cin, c, 3) + conv(h, w, c, c, 3)
		if cin != c {
			f += conv(h, w, cin, c, 1) // the shortcut
		}
		cin = c
	}
	f += 2 * float64(cin*classes)
	return 3 * f
}

// resnet8TrainFLOPs: Fashion-MNIST's 28 x 28 grey images.
var resnet8TrainFLOPs = resnetTrainFLOPs(28, 28, 1, []int{16, 32, 64}, 10)

// scaleoutDerive compares the layouts run by run and sets every
// configuration beside the limits measured in the same run.
func scaleoutDerive(o *Options, rs []*Result) []Row {
	var lim *Result
	by := map[string]map[int]*Result{}
	var ranks []int
	for _, r := range rs {
		switch v := r.Config.Variant; v {
		case limits:
			lim = r
		default:
			k := bucketKey(v, r.Config.BucketBytes)
			if by[k] == nil {
				by[k] = map[int]*Result{}
			}
			by[k][r.Config.Ranks] = r
			if (v == oneRank || v == scaleUp) && !slices.Contains(ranks, r.Config.Ranks) {
				ranks = append(ranks, r.Config.Ranks)
			}
		}
	}
	caps := bucketCaps(o)
	var rows []Row
	for _, n := range ranks {
		for i, b := range caps {
			up, out := by[bucketKey(scaleUp, b)][n], by[bucketKey(scaleOut, b)][n]
			if up == nil || out == nil {
				continue
			}
			var ratio, diff, upStep, outStep, gap, relayCPU []float64
			for run := 0; run < min(len(up.Runs), len(out.Runs)); run++ {
				u, s := up.Runs[run]["samples_per_s"], out.Runs[run]["samples_per_s"]
				if u > 0 && s > 0 {
					ratio = append(ratio, s/u)
					diff = append(diff, 100*(u-s)/u)
					upStep = append(upStep, stepMS(up.Config, n, u))
					outStep = append(outStep, stepMS(out.Config, n, s))
					gap = append(gap, stepMS(out.Config, n, s)-stepMS(up.Config, n, u))
					relayCPU = append(relayCPU, out.Runs[run]["relay_cpu_ms_per_step"])
				}
			}
			if len(ratio) == 0 {
				continue
			}
			verdict := "met"
			if stat(diff).Median > 5 {
				verdict = "NOT met"
			}
			if i == 0 {
				rows = append(rows, commRow(n, by[commUp][n], by[commOut][n], stat(gap).Median)...)
			}
			labels := map[string]any{"ranks": n, "figure": "samples_per_s"}
			if b > 0 {
				labels["bucket_bytes"] = b
			}
			rows = append(rows, Row{Workload: "scaleout", N: len(ratio),
				Config: fmt.Sprintf("scale-out/scale-up samples_per_s, %d ranks%s (goal: within 5%%, %s); ms a step on each layout, the gap, and the relay's CPU ms a step, which the ranks' cores pay%s", n, bucketNote(b, caps), verdict, oversubscribed(n)),
				Labels: labels,
				Figures: map[string]Stat{"ratio": stat(ratio), "diff_pct": stat(diff), "up_step_ms": stat(upStep), "out_step_ms": stat(outStep),
					"gap_ms": stat(gap), "relay_cpu_ms_per_step": stat(relayCPU)}})
		}
		for _, b := range caps[1:] {
			for _, v := range []string{scaleUp, scaleOut} {
				if row, ok := bucketABRow(n, v, by[bucketKey(v, caps[0])][n], by[bucketKey(v, b)][n]); ok {
					rows = append(rows, row)
				}
			}
		}
	}
	for _, n := range ranks {
		up, flat, h := by[scaleUp][n], by[scaleOut][n], by[scaleOutHier][n]
		if up == nil || flat == nil || h == nil {
			continue
		}
		var overFlat, overUp []float64
		for run := 0; run < min(len(up.Runs), len(flat.Runs), len(h.Runs)); run++ {
			u, f, x := up.Runs[run]["samples_per_s"], flat.Runs[run]["samples_per_s"], h.Runs[run]["samples_per_s"]
			if u > 0 && f > 0 && x > 0 {
				overFlat = append(overFlat, x/f)
				overUp = append(overUp, x/u)
			}
		}
		if len(overFlat) > 0 {
			rows = append(rows, Row{Workload: "scaleout", N: len(overFlat),
				Config:  fmt.Sprintf("scale-out with two-level collectives (shm in a node, tcp across) over the flat tcp ring, and over scale-up, samples_per_s, %d ranks%s", n, oversubscribed(n)),
				Labels:  map[string]any{"ranks": n, "figure": "samples_per_s", "backend": "hier"},
				Figures: map[string]Stat{"hier_over_flat": stat(overFlat), "hier_over_up": stat(overUp)}})
		}
	}
	for _, n := range slices.Sorted(maps.Keys(by[commOutHier])) {
		if row, ok := hierCommRow(n, by[commOut][n], by[commOutHier][n]); ok {
			rows = append(rows, row)
		}
	}
	if lim != nil {
		for _, v := range []string{oneRank, scaleUp, scaleOut, scaleOutHier} {
			for _, b := range caps {
				for _, n := range ranks {
					if r := by[bucketKey(v, b)][n]; r != nil {
						if row, ok := limitsRow(o, r, lim); ok {
							rows = append(rows, row)
						}
					}
				}
			}
		}
	}
	if o.nodes != nil {
		one := func(v float64) Stat { return stat([]float64{v}) }
		rows = append(rows, Row{Workload: "scaleout", N: 1,
			Config: fmt.Sprintf("link: tbf %s, MTU %d, %v each way by the relay; the probe's round trip and bulk GB/s", o.LinkRate, o.LinkMTU, o.LinkDelay),
			Labels: map[string]any{"figure": "link", "rate": o.LinkRate, "delay_us": o.LinkDelay.Microseconds(), "mtu": o.LinkMTU},
			Figures: map[string]Stat{"rtt_us": one(float64(o.link.RTT.Microseconds())),
				"probe_gbps": one(o.link.Throughput / 1e9)}})
	}
	return rows
}

// bucketKey names a variant measured with one bucket cap (0: ddp's
// default, the variant's own name).
func bucketKey(variant string, bucketBytes int) string {
	if bucketBytes == 0 {
		return variant
	}
	return fmt.Sprintf("%s bucket=%d", variant, bucketBytes)
}

// bucketNote names bucket cap b in a row's description when -bucket-bytes
// compares several.
func bucketNote(b int, caps []int) string {
	switch {
	case len(caps) < 2:
		return ""
	case b == 0:
		return ", ddp's default bucket cap"
	}
	return ", bucket cap " + byteSize(b)
}

// stepMS is the ms of one step (one batch on every rank) at sps samples/s.
func stepMS(c Config, ranks int, sps float64) float64 {
	return float64(c.Batch*ranks*1000) / sps
}

// bucketABRow sets one layout's training with a bucket cap (b) beside the
// same with the first cap of -bucket-bytes (a), run by run: both ran in
// every run, one after the other, so the machine's load changes both
// alike. Above 1: b is faster.
func bucketABRow(n int, variant string, a, b *Result) (Row, bool) {
	if a == nil || b == nil {
		return Row{}, false
	}
	var gain, aStep, bStep []float64
	for run := 0; run < min(len(a.Runs), len(b.Runs)); run++ {
		x, y := a.Runs[run]["samples_per_s"], b.Runs[run]["samples_per_s"]
		if x > 0 && y > 0 {
			gain = append(gain, y/x)
			aStep = append(aStep, stepMS(a.Config, n, x))
			bStep = append(bStep, stepMS(b.Config, n, y))
		}
	}
	if len(gain) == 0 {
		return Row{}, false
	}
	name := func(c Config) string {
		if c.BucketBytes == 0 {
			return "ddp's default"
		}
		return byteSize(c.BucketBytes)
	}
	row := Row{Workload: "scaleout", N: len(gain),
		Config: fmt.Sprintf("%s, %d ranks: bucket cap %s against %s, run by run: samples_per_s ratio (above 1: %s is faster) and ms a step of each; with FULGUR_BENCH_TIMELINE, the ms of communication each step waits for after the ranks' backward pass%s",
			variant, n, name(b.Config), name(a.Config), name(b.Config), oversubscribed(n)),
		Labels:  map[string]any{"ranks": n, "figure": "bucket_ab", "variant": variant, "bucket_bytes": b.Config.BucketBytes, "against_bucket_bytes": a.Config.BucketBytes},
		Figures: map[string]Stat{"ratio": stat(gain), "a_step_ms": stat(aStep), "b_step_ms": stat(bStep)}}
	if x, y := a.figure("comm_exposed_ms_median"), b.figure("comm_exposed_ms_median"); len(x) > 0 && len(y) > 0 {
		row.Figures["a_comm_exposed_ms"], row.Figures["b_comm_exposed_ms"] = stat(x), stat(y)
	}
	return row, true
}

// hierCommRow sets the collectives of a step on the two-level group beside
// the flat tcp ring's, run by run: the all-reduce of resnet8's gradients
// (ddp) and their reduce-scatter plus all-gather (sharded, fsdp), as the
// flat ring's time over the two-level group's (above 1: hier is faster).
func hierCommRow(n int, flat, h *Result) (Row, bool) {
	if flat == nil || h == nil {
		return Row{}, false
	}
	ar, rsag := fmt.Sprintf("comm_ms_%d", commSizes[0]), fmt.Sprintf("comm_rsag_ms_%d", commSizes[0])
	var arGain, rsagGain []float64
	for run := 0; run < min(len(flat.Runs), len(h.Runs)); run++ {
		f, x := flat.Runs[run], h.Runs[run]
		if f[ar] > 0 && x[ar] > 0 && f[rsag] > 0 && x[rsag] > 0 {
			arGain = append(arGain, f[ar]/x[ar])
			rsagGain = append(rsagGain, f[rsag]/x[rsag])
		}
	}
	if len(arGain) == 0 {
		return Row{}, false
	}
	return Row{Workload: "scaleout", N: len(arGain),
		Config: fmt.Sprintf("collectives of %d bytes (resnet8's gradients) on two nodes, %d ranks: ms on the flat tcp ring and on the two-level group (shm in a node, tcp across), and flat over two-level, for ddp's all-reduce and sharded's and fsdp's reduce-scatter + all-gather%s",
			commSizes[0], n, oversubscribed(n)),
		Labels: map[string]any{"ranks": n, "figure": "comm", "backend": "hier"},
		Figures: map[string]Stat{"flat_" + ar: stat(flat.figure(ar)), "hier_" + ar: stat(h.figure(ar)), "allreduce_flat_over_hier": stat(arGain),
			"flat_" + rsag: stat(flat.figure(rsag)), "hier_" + rsag: stat(h.figure(rsag)), "rsag_flat_over_hier": stat(rsagGain)}}, true
}

// commRow sets one step's all-reduces on one node beside the same on two,
// run by run: their difference is the share of the step-time gap (gap,
// ms) that the link's latency and bandwidth explain; the rest is the
// layouts' compute (the ranks' cores doing TCP and the relay's work).
func commRow(n int, up, out *Result, gap float64) []Row {
	if up == nil || out == nil {
		return nil
	}
	figs := map[string]Stat{}
	var diff []float64
	for run := 0; run < min(len(up.Runs), len(out.Runs)); run++ {
		d := 0.0
		for _, size := range commSizes {
			k := fmt.Sprintf("comm_ms_%d", size)
			d += out.Runs[run][k] - up.Runs[run][k]
		}
		diff = append(diff, d)
	}
	if len(diff) == 0 {
		return nil
	}
	for _, size := range commSizes {
		k := fmt.Sprintf("comm_ms_%d", size)
		figs["up_"+k], figs["out_"+k] = stat(up.figure(k)), stat(out.figure(k))
	}
	figs["comm_gap_ms"] = stat(diff)
	if gap > 0 {
		figs["comm_share_of_gap"] = stat([]float64{stat(diff).Median / gap})
	}
	return []Row{{Workload: "scaleout", N: len(diff),
		Config: fmt.Sprintf("one step's all-reduce alone, %d ranks (%d bytes: the gradients, the buffers and stop flags riding with them): ms on one node and on two, their difference a step and its share of the step-time gap%s",
			n, commSizes[0], oversubscribed(n)),
		Labels:  map[string]any{"ranks": n, "figure": "comm"},
		Figures: figs}}
}

// addRelayFigures adds the relay's work during one scale-out run to its
// figures: its CPU time a step (the cores it takes from the ranks), the
// frames a step, their mean time past due and the frames dropped; and
// the CPU time a step of this process, which starts the ranks and the
// relay (whose carriers, processes of their own, count in the relay's
// CPU with their Go runtimes): it runs on the ranks' cores as well.
func addRelayFigures(f Figures, d netns.RelayStats, process time.Duration) {
	steps := max(f["steps"], 1)
	f["relay_cpu_ms_per_step"] = float64(d.CPU) / 1e6 / steps
	f["bench_process_cpu_ms_per_step"] = float64(process) / 1e6 / steps
	// Each node's share, on its own cores (scaleoutNodeCPUs).
	for i, c := range d.NodeCPU {
		f[fmt.Sprintf("relay_cpu_ms_per_step_to_node%d", i)] = float64(c) / 1e6 / steps
	}
	f["relay_frames_per_step"] = float64(d.Frames) / steps
	f["relay_late_us"] = float64(d.MeanLate()) / 1e3
	f["relay_dropped"] = float64(d.Dropped)
}

func oversubscribed(ranks int) string {
	if n := runtime.NumCPU(); ranks > n {
		return fmt.Sprintf(" OVERSUBSCRIBED: %d ranks on %d cores", ranks, n)
	}
	return ""
}

// limitsRow sets r beside the limits of the same runs: the sgemm work
// reached as a share of the cores' peak, and the gradient traffic (bus
// bandwidth, bytes x 2(n-1)/n per rank and step) as a share of what
// carries it: one core's memory copy bandwidth for shm, the link's rate
// for tcp.
func limitsRow(o *Options, r, lim *Result) (Row, bool) {
	n := max(r.Config.Ranks, 1)
	cores := float64(min(n, runtime.NumCPU()))
	var gflops, roof, bus, busShare []float64
	for run := 0; run < min(len(r.Runs), len(lim.Runs)); run++ {
		f, l := r.Runs[run], lim.Runs[run]
		sps := f["samples_per_s"]
		g := sps * resnet8TrainFLOPs / 1e9
		gflops = append(gflops, g)
		roof = append(roof, g/(cores*l["sgemm_gflops_core"]))
		if n < 2 {
			continue
		}
		stepsPerS := sps / float64(r.Config.Batch*n)
		b := stepsPerS * f["params"] * 4 * 2 * float64(n-1) / float64(n) / 1e9
		bus = append(bus, b)
		limit := l["memcpy_gbps_core"]
		if r.Config.Nodes > 1 {
			bits, err := netns.ParseRate(o.LinkRate)
			if err != nil {
				return Row{}, false
			}
			limit = bits / 8 / 1e9
		}
		busShare = append(busShare, b/limit)
	}
	if len(gflops) == 0 {
		return Row{}, false
	}
	traffic := "; gradient GB/s and share of one core's memory copy"
	if r.Config.Nodes > 1 {
		traffic = "; gradient GB/s and share of the link's rate"
	}
	if n < 2 {
		traffic = " (no gradient traffic)"
	}
	row := Row{Workload: "scaleout", N: len(gflops),
		Config: fmt.Sprintf("%s %s against the limits: GFLOP/s and share of the sgemm peak of %s%s%s",
			r.Config.Variant, plural(n, "rank"), plural(int(cores), "core"), traffic, oversubscribed(n)),
		Labels:  map[string]any{"variant": r.Config.Variant, "ranks": n, "figure": "limits"},
		Figures: map[string]Stat{"gflops": stat(gflops), "roofline_share": stat(roof)}}
	if len(bus) > 0 {
		row.Figures["grad_busbw_gbps"] = stat(bus)
		row.Figures["grad_bw_share"] = stat(busShare)
	}
	return row, true
}

// scaleoutPlot draws samples/s against ranks, one line per layout (the
// 1-rank point starts both), into -plot.
func scaleoutPlot(o *Options, rs []*Result) error {
	if o.Plot == "" {
		return nil
	}
	// One line per layout: the first bucket cap of -bucket-bytes.
	first := bucketCaps(o)[0]
	rs = slices.DeleteFunc(slices.Clone(rs), func(r *Result) bool { return r.Config.BucketBytes != first })
	hs, err := scaleoutHistories(rs)
	if err != nil {
		return err
	}
	f, err := os.Create(o.Plot)
	if err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	batch := 0
	for _, r := range rs {
		batch = max(batch, r.Config.Batch)
	}
	title := fmt.Sprintf("resnet8 ddp, batch %d per rank, one core per rank (%d cores)", batch, runtime.NumCPU())
	for _, r := range rs {
		if r.Config.Ranks > runtime.NumCPU() {
			title = fmt.Sprintf("resnet8 ddp, batch %d per rank, one core per rank; above %d ranks they share cores", batch, runtime.NumCPU())
			break
		}
	}
	c := plot.Chart{Name: "scaleout", Title: title, X: plot.Steps, XLabel: "ranks", YLabel: "samples/s (median)",
		Keys: []string{"samples_per_s"}, LegendBottom: true}
	err = plot.Render(f, c, hs, strings.TrimPrefix(filepath.Ext(o.Plot), "."), plot.Options{Smoothing: -1})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("-plot %s: %w", o.Plot, err)
	}
	fmt.Fprintf(os.Stderr, "bench: plot written to %s\n", o.Plot)
	return nil
}

// scaleoutHistories makes one series per layout, samples/s median by
// ranks; the 1-rank run belongs to both.
func scaleoutHistories(rs []*Result) ([]*plot.History, error) {
	up := &plot.History{Label: "scale-up: one host, shm"}
	out := &plot.History{Label: "scale-out: two nodes, tcp"}
	hier := &plot.History{Label: "scale-out: two nodes, shm in a node, tcp across"}
	for _, r := range rs {
		v := r.figure("samples_per_s")
		if len(v) == 0 {
			continue
		}
		m := map[string]float64{"samples_per_s": stat(v).Median}
		switch r.Config.Variant {
		case oneRank:
			up.Log(r.Config.Ranks, m)
			out.Log(r.Config.Ranks, m)
		case scaleUp:
			up.Log(r.Config.Ranks, m)
		case scaleOut:
			out.Log(r.Config.Ranks, m)
		case scaleOutHier:
			hier.Log(r.Config.Ranks, m)
		}
	}
	if len(up.Rows) == 0 && len(out.Rows) == 0 {
		return nil, errors.New("no samples/s to plot: every configuration failed")
	}
	hs := []*plot.History{up, out}
	if len(hier.Rows) > 0 {
		hs = append(hs, hier)
	}
	return hs, nil
}

// defaultPlot is bench/scaleout.svg when the working directory is the
// repository's root, else nothing: the command never writes into a tree
// it was not pointed at.
func defaultPlot() string {
	b, err := os.ReadFile("go.mod")
	if err != nil || !strings.HasPrefix(string(b), "module github.com/fulgur-ml/fulgur\n") {
		return ""
	}
	if fi, err := os.Stat("bench"); err != nil || !fi.IsDir() {
		return ""
	}
	return filepath.Join("bench", "scaleout.svg")
}

// rankPlace is where one rank runs.
type rankPlace struct {
	Node, LocalRank, LocalRanks, Core int
}

// placeRanks splits ranks evenly over nodes in order (ranks 0..k-1 on
// node 0, ...) and gives rank r the CPU cpus[r mod len(cpus)], round robin
// over the CPUs the ranks may use (allowedCPUs): beyond them, ranks share
// them.
func placeRanks(ranks, nodes int, cpus []int) ([]rankPlace, error) {
	if ranks < 1 || nodes < 1 || len(cpus) < 1 || ranks%nodes != 0 {
		return nil, fmt.Errorf("%d ranks cannot be split evenly over %d nodes (%d cores): use a multiple of the nodes", ranks, nodes, len(cpus))
	}
	per := ranks / nodes
	out := make([]rankPlace, ranks)
	for r := range out {
		out[r] = rankPlace{Node: r / per, LocalRank: r % per, LocalRanks: per, Core: cpus[r%len(cpus)]}
	}
	return out, nil
}

// firstCPUs is CPUs 0 to n-1.
func firstCPUs(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
