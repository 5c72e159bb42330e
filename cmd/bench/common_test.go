package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/trainer"
)

// TestMain lets the test binary act as the measured child process, as the
// bench binary does, so the end-to-end test below runs real children.
func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(childEnv); ok {
		if err := childMain(context.Background(), spec); err != nil {
			os.Stderr.WriteString("bench child: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestStat(t *testing.T) {
	cases := []struct {
		in   []float64
		want Stat
	}{
		{[]float64{3, 1, 2}, Stat{2, 1, 3}},
		{[]float64{4, 1, 3, 2}, Stat{2.5, 1, 4}},
		{[]float64{7}, Stat{7, 7, 7}},
	}
	for _, c := range cases {
		if got := stat(c.in); got != c.want {
			t.Errorf("stat(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if s := stat(nil); !math.IsNaN(s.Median) {
		t.Errorf("stat(nil) = %+v, want NaNs", s)
	}
}

func TestParseOptionsReportsEveryProblem(t *testing.T) {
	_, err := parseOptions([]string{"-workload", "mlp,nope", "-runs", "0", "-threads", "1,x", "-blas", "mkl", "-peer", "jax", "-steps", "-1"})
	if err == nil {
		t.Fatal("bad options accepted")
	}
	for _, want := range []string{`-workload "nope" is unknown`, "-runs is 0", `-threads is "1,x"`, `-blas is "mkl"`, `-peer is "jax"`, "-steps is -1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	o, err := parseOptions([]string{"-workload", "mlp,overhead", "-threads", "2,1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Workloads) != 2 || o.Threads[0] != 2 || o.Threads[1] != 1 || o.Runs != 3 {
		t.Errorf("options %+v", o)
	}
}

func runs(sps ...float64) []Figures {
	var out []Figures
	for _, s := range sps {
		out = append(out, Figures{"samples_per_s": s, "peak_rss_mb": 100})
	}
	return out
}

// The peer ratio compares each implementation's fastest thread setting
// run by run, then takes the median over runs.
func TestPeerRatiosUseBestThreadsPerRun(t *testing.T) {
	o := &Options{Runs: 3, Peer: "torch"}
	rs := []*Result{
		{Config: Config{Workload: "mlp", Impl: "fulgur", Threads: 1}, Runs: runs(60, 50, 70)},
		{Config: Config{Workload: "mlp", Impl: "fulgur", Threads: 2}, Runs: runs(20, 55, 10)},
		{Config: Config{Workload: "mlp", Impl: "torch", Threads: 1}, Runs: runs(50, 50, 35)},
		{Config: Config{Workload: "mlp", Impl: "torch", Threads: 2}, Runs: runs(10, 10, 50)},
	}
	rows := peerRatios(o, rs)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want samples/s and RSS ratios", len(rows))
	}
	// Run ratios: 60/50, 55/50, 70/50 → median 1.2.
	if got := rows[0].Figures["ratio"]; math.Abs(got.Median-1.2) > 1e-12 || math.Abs(got.Min-1.1) > 1e-12 || math.Abs(got.Max-1.4) > 1e-12 {
		t.Errorf("samples/s ratio %+v, want median 1.2, min 1.1, max 1.4", got)
	}
	if got := rows[1].Figures["ratio"].Median; got != 1 {
		t.Errorf("RSS ratio %v, want 1", got)
	}
}

func TestScalingEfficiency(t *testing.T) {
	rs := []*Result{
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 1}, Runs: runs(100, 100)},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 2}, Runs: runs(180, 160)},
	}
	rows := workloads["scaling"].Derive(&Options{Runs: 2}, rs)
	if len(rows) != 1 || math.Abs(rows[0].Figures["efficiency"].Median-0.85) > 1e-12 {
		t.Fatalf("rows %+v, want one efficiency row of median 0.85", rows)
	}
}

// scalingConfigs is the scaling workload's configurations for the flags.
func scalingConfigs(t *testing.T, flags ...string) []Config {
	t.Helper()
	o, err := parseOptions(append([]string{"-workload", "scaling"}, flags...))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := workloads["scaling"].Configs(o)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// fulgur's one rank at the ranks' batch splits the efficiency into the
// smaller batch's speed and what two ranks cost; the peer runs no such
// configuration.
func TestScalingEfficiencySplitsIntoBatchAndDDP(t *testing.T) {
	cs := scalingConfigs(t, "-peer", "torch")
	halves := map[string]int{}
	for _, c := range cs {
		if c.Ranks == 1 && c.Batch == 32 {
			halves[c.Impl+" "+c.Variant]++
		}
	}
	if halves["fulgur mlp"] != 1 || halves["torch mlp"] != 0 {
		t.Errorf("one-rank batch-32 configurations %v, want one for fulgur's mlp, none for torch's", halves)
	}
	rs := []*Result{
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 1, Batch: 64}, Runs: runs(1000)},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 1, Batch: 32}, Runs: runs(1050)},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 2, Batch: 32}, Runs: runs(1890)},
	}
	rows := workloads["scaling"].Derive(&Options{Runs: 1}, rs)
	if len(rows) != 1 {
		t.Fatalf("rows %+v, want one", rows)
	}
	for name, want := range map[string]float64{"efficiency": 0.945, "half_batch_speed": 1.05, "ddp_efficiency": 0.9} {
		if got := rows[0].Figures[name].Median; math.Abs(got-want) > 1e-12 {
			t.Errorf("%s %v, want %v", name, got, want)
		}
	}
}

// The efficiency from each side's median step time, next to the one from
// samples/s: a run's mean carries every stall of a shared machine.
func TestScalingEfficiencyFromMedianSteps(t *testing.T) {
	one := Figures{"samples_per_s": 1000, "step_ms_median": 64} // 64 samples in 64 ms
	two := Figures{"samples_per_s": 1400, "step_ms_median": 40} // 2 x 32 samples in 40 ms
	peer := Figures{"samples_per_s": 1500}                      // no step times
	rs := []*Result{
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "resnet8", Ranks: 1, Batch: 64}, Runs: []Figures{one}},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "resnet8", Ranks: 2, Batch: 32}, Runs: []Figures{two}},
		{Config: Config{Workload: "scaling", Impl: "torch", Variant: "resnet8", Ranks: 1, Batch: 64}, Runs: []Figures{peer}},
		{Config: Config{Workload: "scaling", Impl: "torch", Variant: "resnet8", Ranks: 2, Batch: 32}, Runs: []Figures{peer}},
	}
	rows := workloads["scaling"].Derive(&Options{Runs: 1}, rs)
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want fulgur's and torch's", rows)
	}
	f := rows[0].Figures
	if math.Abs(f["efficiency"].Median-0.7) > 1e-12 || math.Abs(f["efficiency_median_step"].Median-0.8) > 1e-12 {
		t.Errorf("fulgur: %+v, want efficiency 0.7 and efficiency_median_step 0.8", f)
	}
	if _, ok := rows[1].Figures["efficiency_median_step"]; ok {
		t.Errorf("torch: %+v, want no median-step efficiency (it reports no step times)", rows[1].Figures)
	}
}

// The timer's step times: each timed batch's own time, not the first
// batch of an epoch (the graph's first run).
func TestTrainTimerStepTimes(t *testing.T) {
	var now time.Time
	tm := &trainTimer{now: func() time.Time { return now }, lastBatch: 3, params: 1}
	st := &trainer.State{}
	for epoch, ends := range [][]time.Duration{{500, 510, 530, 600}, {2000, 2011, 2023, 2035}} {
		for bi, at := range ends {
			now = time.Unix(0, 0).Add(at * time.Millisecond)
			st.Epoch, st.BatchIdx = epoch, bi
			if err := tm.OnTrainBatchEnd(context.Background(), st); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := []time.Duration{10, 20, 70, 11, 12, 12}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(tm.stepTimes, want) {
		t.Errorf("step times %v, want %v", tm.stepTimes, want)
	}
	if got := medianMS(tm.stepTimes); got != 12 {
		t.Errorf("median %v ms, want 12", got)
	}
}

// -backend tcp,shm measures the 2 ranks once per backend, each against
// the same one-rank baseline, in a row of its own.
func TestScalingEfficiencyPerBackend(t *testing.T) {
	cs := scalingConfigs(t, "-backend", "tcp,shm")
	var two []string
	for _, c := range cs {
		if c.Variant == "mlp" && c.Ranks == 2 && !c.Coexist {
			two = append(two, c.Backend)
		}
		if c.Ranks == 1 && c.Backend != "" {
			t.Errorf("the one-rank baseline %s has backend %q", c.Label(), c.Backend)
		}
	}
	if !slices.Equal(two, []string{"tcp", "shm"}) {
		t.Errorf("2-rank mlp configurations have backends %q, want tcp then shm", two)
	}
	rs := []*Result{
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 1}, Runs: runs(100, 100)},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 2, Backend: "tcp"}, Runs: runs(180, 160)},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 2, Backend: "shm"}, Runs: runs(190, 190)},
	}
	rows := workloads["scaling"].Derive(&Options{Runs: 2}, rs)
	if len(rows) != 2 || rows[0].Config != "fulgur mlp tcp efficiency" || math.Abs(rows[0].Figures["efficiency"].Median-0.85) > 1e-12 ||
		rows[1].Config != "fulgur mlp shm efficiency" || math.Abs(rows[1].Figures["efficiency"].Median-0.95) > 1e-12 {
		t.Fatalf("rows %+v, want tcp's efficiency 0.85 then shm's 0.95", rows)
	}
	if _, err := parseOptions([]string{"-backend", "udp"}); err == nil || !strings.Contains(err.Error(), `-backend has "udp"`) {
		t.Errorf("-backend udp: error %v, want one naming the value", err)
	}
}

func TestOverheadRatio(t *testing.T) {
	rs := []*Result{
		{Config: Config{Workload: "overhead", Impl: "fulgur", Variant: "plain"}, Runs: runs(100, 100, 100)},
		{Config: Config{Workload: "overhead", Impl: "fulgur", Variant: "trainer"}, Runs: runs(100, 50, 98)},
	}
	rows := workloads["overhead"].Derive(&Options{Runs: 3}, rs)
	if len(rows) != 1 || math.Abs(rows[0].Figures["ratio"].Median-100.0/98) > 1e-12 {
		t.Fatalf("rows %+v, want the trainer/plain wall-time ratio, median 100/98", rows)
	}
}

// End to end: the parent runs a short mlp training in a child process and
// prints one JSON object with the figures of BENCHMARKS.md.
func TestMLPEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for a few seconds")
	}
	var out bytes.Buffer
	o, err := parseOptions([]string{"-workload", "mlp", "-runs", "1", "-threads", "1", "-steps", "30", "-json"})
	if err != nil {
		t.Fatal(err)
	}
	r := &Result{Config: threadConfigs(o, Config{Workload: "mlp", Batch: 64, Epochs: 1, Steps: 30, Seed: 1})[0]}
	f, err := measure(context.Background(), o, r.Config)
	if err != nil {
		t.Fatal(err)
	}
	r.Runs = append(r.Runs, f)
	if err := printJSON(&out, []Row{rowOf(r)}, map[string]any{"command": o.command}); err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(out.Bytes(), &obj); err != nil {
		t.Fatalf("output %q is not one JSON object: %v", out.String(), err)
	}
	for _, k := range []string{"samples_per_s", "allocs_per_step", "peak_rss_mb", "test_acc"} {
		v, ok := obj[k].(float64)
		if !ok || v < 0 {
			t.Errorf("%s = %v in %s", k, obj[k], out.String())
		}
	}
	if obj["workload"] != "mlp" || obj["steps"].(float64) != 30 {
		t.Errorf("workload %v, steps %v: want mlp, 30", obj["workload"], obj["steps"])
	}
	// 30 steps of Adam already beat chance (0.1) by far.
	if acc := obj["test_acc"].(float64); acc < 0.4 || acc > 1 {
		t.Errorf("test_acc %v after 30 steps, want well above chance", acc)
	}
}

// The threads workload compares, per BLAS and run by run, the default plan
// with the fastest explicit setting.
func TestThreadRatios(t *testing.T) {
	cfg := func(b, v string) Config { return Config{Workload: "threads", Impl: "fulgur", BLAS: b, Variant: v} }
	rs := []*Result{
		{Config: cfg("blis", "default"), Runs: runs(90, 100)},
		{Config: cfg("blis", "1x1"), Runs: runs(60, 50)},
		{Config: cfg("blis", "2x1"), Runs: runs(100, 80)},
		{Config: cfg("blis", "1x2"), Runs: runs(50, 100)},
		{Config: cfg("gonum", "default"), Runs: runs(40, 40)},
		{Config: cfg("gonum", "1x1"), Runs: runs(50, 50)},
	}
	rows := workloads["threads"].Derive(&Options{Runs: 2}, rs)
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want one per BLAS", rows)
	}
	// blis: 90/100 and 100/100; gonum: 40/50 twice.
	if got := rows[0].Figures["ratio"]; rows[0].Labels["blas"] != "blis" || math.Abs(got.Median-0.95) > 1e-12 || got.Min != 0.9 || got.Max != 1 {
		t.Errorf("blis row %+v, want median 0.95 of 0.9 and 1", rows[0])
	}
	if got := rows[1].Figures["ratio"].Median; rows[1].Labels["blas"] != "gonum" || math.Abs(got-0.8) > 1e-12 || !strings.Contains(rows[1].Config, "below 0.95") {
		t.Errorf("gonum row %+v, want ratio 0.8 flagged below 0.95", rows[1])
	}
}

// TestRunOrderAlternates: configurations run as listed, then in reverse,
// so that over each pair of runs every configuration has the same mean
// place (a load drifting within a run favours no side of a ratio), and
// every configuration runs once a run.
func TestRunOrderAlternates(t *testing.T) {
	cases := []struct {
		run, n int
		want   []int
	}{
		{0, 3, []int{0, 1, 2}},
		{1, 3, []int{2, 1, 0}},
		{2, 3, []int{0, 1, 2}},
		{3, 4, []int{3, 2, 1, 0}},
		{1, 1, []int{0}},
		{1, 0, []int{}},
	}
	for _, c := range cases {
		if got := runOrder(c.run, c.n); !slices.Equal(got, c.want) {
			t.Errorf("runOrder(%d, %d) = %v, want %v", c.run, c.n, got, c.want)
		}
	}
	// The one-rank baseline (listed first) and the ranks (listed later)
	// share one mean place over two runs.
	const n = 5
	place := make([]int, n)
	for run := 0; run < 2; run++ {
		for p, i := range runOrder(run, n) {
			place[i] += p
		}
	}
	for i, p := range place {
		if p != n-1 {
			t.Errorf("configuration %d: places summed over two runs %d, want %d", i, p, n-1)
		}
	}
}

// fulgur's 2 independent trainings at the ranks' batch, each on a core of
// its own, give the machine's ceiling next to ddp's figure: their
// samples/s over twice one alone, and ddp's 2 ranks over them.
func TestScalingCoexistEfficiency(t *testing.T) {
	cs := scalingConfigs(t, "-peer", "torch")
	coexist := map[string]int{}
	for _, c := range cs {
		if c.Coexist {
			coexist[c.Impl+" "+c.Variant]++
			if c.Ranks != 2 || c.Batch != 32 || !c.Pinned {
				t.Errorf("coexisting trainings %s: want 2 pinned at batch 32", c.Label())
			}
		}
	}
	if coexist["fulgur mlp"] != 1 || coexist["fulgur resnet8"] != 1 || coexist["torch mlp"] != 0 {
		t.Errorf("coexisting configurations %v, want one for each of fulgur's models, none for torch's", coexist)
	}
	rs := []*Result{
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 1, Batch: 64}, Runs: runs(1000, 1000)},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 1, Batch: 32}, Runs: runs(1000, 800)},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 2, Batch: 32, Coexist: true}, Runs: runs(1900, 1440)},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Ranks: 2, Batch: 32}, Runs: runs(1710, 1440)},
	}
	rows := workloads["scaling"].Derive(&Options{Runs: 2}, rs)
	if len(rows) != 1 {
		t.Fatalf("rows %+v, want one: the coexisting trainings are no 2-rank row of their own", rows)
	}
	// Run 1: 1900/2000 and 1710/1900; run 2: 1440/1600 and 1440/1440.
	for name, want := range map[string]float64{"coexist_efficiency": (0.95 + 0.9) / 2, "ddp_of_coexist": (0.9 + 1) / 2,
		"ddp_efficiency": (0.855 + 0.9) / 2} {
		if got := rows[0].Figures[name].Median; math.Abs(got-want) > 1e-12 {
			t.Errorf("%s %v, want %v", name, got, want)
		}
	}
	// Other work on the machine, on the baseline's core and the ranks'.
	rs[0].Runs[0]["core_others_pct"], rs[0].Runs[1]["core_others_pct"] = 0.5, 1
	rs[3].Runs[0]["core_others_pct"], rs[3].Runs[0]["rank1 core_others_pct"] = 20, 30
	rs[3].Runs[1]["core_others_pct"], rs[3].Runs[1]["rank1 core_others_pct"] = 10, 2
	f := workloads["scaling"].Derive(&Options{Runs: 2}, rs)[0].Figures
	if f["core_others_pct_one"] != (Stat{0.75, 0.5, 1}) || f["core_others_pct_ranks"] != (Stat{20, 10, 30}) {
		t.Errorf("core_others_pct_one %v, core_others_pct_ranks %v: want the baseline's and each run's busiest rank's", f["core_others_pct_one"], f["core_others_pct_ranks"])
	}
	if c := (Config{Impl: "fulgur", Variant: "mlp", Ranks: 2, Batch: 32, Coexist: true}); !strings.Contains(c.Label(), "coexist=2") || strings.Contains(c.Label(), "ranks=") {
		t.Errorf("label %q, want coexist=2 and no ranks", c.Label())
	}
}

// The coexisting trainings run at once as separate processes: the figures
// add up both, and each writes its files under a name of its own.
func TestCoexistEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two processes for a few seconds")
	}
	dir := t.TempDir()
	t.Setenv("FULGUR_BENCH_TIMELINE", dir)
	o, err := parseOptions([]string{"-workload", "scaling", "-runs", "1"})
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Threads: 1, Batch: 32, Epochs: 1, Steps: 30, Ranks: 2, Coexist: true, Seed: 1}
	f, err := measure(context.Background(), o, c)
	if err != nil {
		t.Fatal(err)
	}
	p0, p1 := f["process0 samples_per_s"], f["process1 samples_per_s"]
	if p0 <= 0 || p1 <= 0 || math.Abs(f["samples_per_s"]-(p0+p1)) > 1e-9*(p0+p1) {
		t.Errorf("samples_per_s %v, processes %v and %v: want both trained and their sum", f["samples_per_s"], p0, p1)
	}
	if f["steps"] != 30 {
		t.Errorf("steps %v, want 30 (each training its own 30, not a ddp step)", f["steps"])
	}
	for _, k := range []string{"gc_per_step", "minflt_per_step", "involuntary_csw_per_step", "sync_wait_pct", "compute_ms_median", "process1 compute_ms_median"} {
		if v, ok := f[k]; !ok || v < 0 {
			t.Errorf("%s = %v, %v: want a count per step", k, v, ok)
		}
	}
	sub, err := filepath.Glob(filepath.Join(dir, "*", "timeline-rank*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range sub {
		names = append(names, filepath.Base(p))
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"timeline-rank0.json", "timeline-rank1.json"}) {
		t.Errorf("timelines %q, want one per process", sub)
	}
}

func TestStealPct(t *testing.T) {
	t0 := parseCPUTicks("cpu  100 0 50 800 10 0 5 35 0 0")
	t1 := parseCPUTicks("cpu  200 0 60 1500 10 0 5 60 7 0")
	if got := t1.stealPct(t0); math.Abs(got-100*25.0/(100+10+700+25)) > 1e-12 {
		t.Errorf("steal %v%%, want 25 ticks of 835", got)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 3 4 x 6 7 8"} {
		if got := parseCPUTicks(bad).stealPct(t0); got != -1 {
			t.Errorf("%q: steal %v, want -1 (unknown)", bad, got)
		}
	}
}

// What else ran on a pinned rank's core: the core's busy time over the
// run less the rank's own CPU time, as a share of the run.
func TestCoreOthersPct(t *testing.T) {
	stat0 := "cpu  300 0 30 900 0 0 0 0 0 0\ncpu0 100 0 10 500 7 1 2 0 0 0\ncpu1 200 0 20 400 0 0 0 9 0 0\nintr 5\n"
	stat1 := "cpu  900 0 60 1900 0 0 0 0 0 0\ncpu0 500 0 30 600 9 4 5 0 0 0\ncpu1 490 0 25 900 0 0 0 50 0 0\nintr 9\n"
	b0, b1 := parseCoreBusy(stat0), parseCoreBusy(stat1)
	if b0[0] != 113 || b0[1] != 220 || len(b0) != 2 {
		t.Fatalf("busy %v, want cpu0 113 and cpu1 220 ticks (user, nice, system, irq, softirq)", b0)
	}
	// cpu0: 426 ticks busy (4.26 s) in 5 s; the rank used 4 s of it.
	got, ok := coreOthersPct(b0, b1, 0, 4*time.Second, 5*time.Second)
	if !ok || math.Abs(got-5.2) > 1e-9 {
		t.Errorf("core 0: %v%% (%v), want 5.2%%: 0.26 s of 5 not the rank's", got, ok)
	}
	// cpu1: 295 ticks; a rank that used more than the core's busy time
	// (clock ticks are coarse) leaves nothing to others, not less.
	if got, ok := coreOthersPct(b0, b1, 1, 3*time.Second, 5*time.Second); !ok || got != 0 {
		t.Errorf("core 1: %v%% (%v), want 0", got, ok)
	}
	if _, ok := coreOthersPct(b0, b1, 2, time.Second, 5*time.Second); ok {
		t.Error("core 2, which /proc/stat does not list: want no figure")
	}
}

// ddp_of_coexist_median_step compares the ranks with the coexisting
// trainings by each one's median step time rather than samples/s: a burst
// of other work that stalls one core for part of a run moves both sides'
// means, and the ranks' more (every rank waits for the stalled one), but
// the medians little. The coexisting trainings' medians come from each
// process, not just the first.
func TestScalingDDPOfCoexistMedianStep(t *testing.T) {
	rs := []*Result{
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "resnet8", Ranks: 1, Batch: 64}, Runs: runs(700, 700)},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "resnet8", Ranks: 1, Batch: 32}, Runs: runs(700, 700)},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "resnet8", Ranks: 2, Batch: 32, Coexist: true}, Runs: runs(1400, 1400)},
		{Config: Config{Workload: "scaling", Impl: "fulgur", Variant: "resnet8", Ranks: 2, Batch: 32}, Runs: runs(1200, 1300)},
	}
	// Run 1: the ranks' median step 40 ms (64 samples: 1,600/s), the
	// trainings' 40 and 50 ms (32 samples each: 800 + 640 = 1,440/s).
	// Run 2: 50 ms (1,280/s) against 40 and 40 (1,600/s).
	rs[3].Runs[0]["step_ms_median"], rs[3].Runs[1]["step_ms_median"] = 40, 50
	rs[2].Runs[0]["step_ms_median"], rs[2].Runs[0]["process1 step_ms_median"] = 40, 50
	rs[2].Runs[1]["step_ms_median"], rs[2].Runs[1]["process1 step_ms_median"] = 40, 40
	f := workloads["scaling"].Derive(&Options{Runs: 2}, rs)[0].Figures
	want := Stat{(1600.0/1440 + 1280.0/1600) / 2, 1280.0 / 1600, 1600.0 / 1440}
	got := f["ddp_of_coexist_median_step"]
	if math.Abs(got.Median-want.Median) > 1e-12 || math.Abs(got.Min-want.Min) > 1e-12 || math.Abs(got.Max-want.Max) > 1e-12 {
		t.Errorf("ddp_of_coexist_median_step %+v, want %+v", got, want)
	}
	// A coexisting training that reported no median step gives no figure
	// rather than one from half the trainings.
	delete(rs[2].Runs[0], "process1 step_ms_median")
	delete(rs[2].Runs[1], "process1 step_ms_median")
	if f := workloads["scaling"].Derive(&Options{Runs: 2}, rs)[0].Figures; f["ddp_of_coexist_median_step"] != (Stat{}) {
		t.Errorf("ddp_of_coexist_median_step %+v without the second training's median, want none", f["ddp_of_coexist_median_step"])
	}
}

// The coexisting trainings' figures keep each one's median step, which
// ddp_of_coexist_median_step needs from every training.
func TestSumCoexistingKeepsEachMedianStep(t *testing.T) {
	f := Figures{"samples_per_s": 700, "step_ms_median": 45}
	others := []string{`{"samples_per_s": 650, "step_ms_median": 49}`}
	if err := sumCoexisting(f, others, func(s string) []byte { return []byte(s) }); err != nil {
		t.Fatal(err)
	}
	if f["samples_per_s"] != 1350 || f["process1 step_ms_median"] != 49 || f["step_ms_median"] != 45 {
		t.Errorf("figures %v, want samples_per_s 1350, step_ms_median 45 (the first) and process1 step_ms_median 49", f)
	}
}
