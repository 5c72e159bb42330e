package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/deploy/netns"
	"github.com/fulgur-ml/fulgur/profiler"
)

func TestPlaceRanks(t *testing.T) {
	cases := []struct {
		ranks, nodes int
		cpus         []int
		want         []rankPlace
	}{
		{1, 1, firstCPUs(2), []rankPlace{{0, 0, 1, 0}}},
		{2, 1, firstCPUs(2), []rankPlace{{0, 0, 2, 0}, {0, 1, 2, 1}}},
		{2, 2, firstCPUs(2), []rankPlace{{0, 0, 1, 0}, {1, 0, 1, 1}}},
		// Oversubscribed: four ranks on two cores share them in turn.
		{4, 2, firstCPUs(2), []rankPlace{{0, 0, 2, 0}, {0, 1, 2, 1}, {1, 0, 2, 0}, {1, 1, 2, 1}}},
		{4, 1, firstCPUs(8), []rankPlace{{0, 0, 4, 0}, {0, 1, 4, 1}, {0, 2, 4, 2}, {0, 3, 4, 3}}},
		// A launcher allowed CPUs 2 and 5 (taskset -c 2,5) places its
		// ranks there, round robin, as mpirun binds.
		{3, 1, []int{2, 5}, []rankPlace{{0, 0, 3, 2}, {0, 1, 3, 5}, {0, 2, 3, 2}}},
	}
	for _, c := range cases {
		got, err := placeRanks(c.ranks, c.nodes, c.cpus)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("placeRanks(%d, %d, %v) = %v, %v; want %v", c.ranks, c.nodes, c.cpus, got, err, c.want)
		}
	}
	if _, err := placeRanks(3, 2, firstCPUs(2)); err == nil || !strings.Contains(err.Error(), "3 ranks cannot be split evenly over 2 nodes") {
		t.Errorf("3 ranks on 2 nodes: %v", err)
	}
}

// The relay delivers each node's frames on the cores its ranks are
// pinned to, over every scale-out run.
func TestScaleoutNodeCPUs(t *testing.T) {
	cases := []struct {
		ranks []int
		cpus  []int
		want  [2][]int
	}{
		{[]int{1, 2}, firstCPUs(2), [2][]int{{0}, {1}}},
		{[]int{2}, firstCPUs(8), [2][]int{{0}, {1}}},
		// 4 ranks on 2 cores: each node's ranks take both.
		{[]int{1, 2, 4}, firstCPUs(2), [2][]int{{0, 1}, {0, 1}}},
		{[]int{4}, firstCPUs(8), [2][]int{{0, 1}, {2, 3}}},
		{[]int{1}, firstCPUs(2), [2][]int{}},
		{[]int{2}, []int{4, 6}, [2][]int{{4}, {6}}},
	}
	for _, c := range cases {
		if got := scaleoutNodeCPUs(c.ranks, c.cpus); !reflect.DeepEqual(got, c.want) {
			t.Errorf("scaleoutNodeCPUs(%v, %v) = %v, want %v", c.ranks, c.cpus, got, c.want)
		}
	}
}

// scaleoutConfigsOf is the scaleout workload's configurations for args.
func scaleoutConfigsOf(t *testing.T, args ...string) []Config {
	t.Helper()
	o, err := parseOptions(append([]string{"-workload", "scaleout"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := workloads["scaleout"].Configs(o)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestScaleoutConfigs(t *testing.T) {
	cs := scaleoutConfigsOf(t, "-ranks", "1,2,4", "-steps", "50")
	type key struct {
		variant, backend string
		ranks, nodes     int
	}
	var got []key
	for _, c := range cs {
		got = append(got, key{c.Variant, c.Backend, c.Ranks, c.Nodes})
		train := c.Variant != limits && c.Variant != commUp && c.Variant != commOut && c.Variant != commOutHier
		if train && (!c.Pinned || !c.ShareCores || c.Threads != 1 || c.Batch != 32 || c.Steps != 50) {
			t.Errorf("%s: want pinned one-thread ranks sharing cores, batch 32 each, 50 steps", c.Label())
		}
		if !train && c.Variant != limits && (!c.Pinned || c.Steps != commIters) {
			t.Errorf("%s: want pinned ranks and %d all-reduces of each size", c.Label(), commIters)
		}
	}
	want := []key{{limits, "", 1, 0}, {oneRank, "", 1, 0}, {scaleUp, "shm", 2, 0}, {scaleOut, "tcp", 2, 2}, {commUp, "shm", 2, 0}, {commOut, "tcp", 2, 2},
		{scaleUp, "shm", 4, 0}, {scaleOut, "tcp", 4, 2}, {scaleOutHier, "hier", 4, 2}, {commUp, "shm", 4, 0}, {commOut, "tcp", 4, 2}, {commOutHier, "hier", 4, 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("configurations %v, want %v", got, want)
	}
	for _, c := range cs {
		if c.Ranks > runtime.NumCPU() && !strings.Contains(c.Label(), "OVERSUBSCRIBED") {
			t.Errorf("label %q hides that %d ranks share %d cores", c.Label(), c.Ranks, runtime.NumCPU())
		}
	}
}

func TestScaleoutOptionsReportEveryProblem(t *testing.T) {
	o, err := parseOptions([]string{"-workload", "scaleout", "-ranks", "1,3", "-link-rate", "10gbps", "-link-delay", "-1ms", "-plot", "out.pdf"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = workloads["scaleout"].Configs(o)
	if err == nil {
		t.Fatal("bad options accepted")
	}
	for _, want := range []string{"-ranks has 3", `-link-rate "10gbps"`, "Delay is -1ms", `-plot "out.pdf"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not mention %q", err, want)
		}
	}
	if _, err := parseOptions([]string{"-ranks", "2,x"}); err == nil || !strings.Contains(err.Error(), `-ranks is "2,x"`) {
		t.Errorf("-ranks 2,x: %v", err)
	}
}

// Hand count for 28 x 28 x 1 and widths 16, 32, 64 (a multiply-add is
// 2): stem 225,792; stage 1 2 x 3,612,672; stage 2 (14 x 14) 1,806,336 +
// 3,612,672 + shortcut 200,704; stage 3 (7 x 7) the same; classifier
// 1,280: 18,691,840 forward, three times that to train.
func TestResNet8TrainFLOPs(t *testing.T) {
	if got, want := resnet8TrainFLOPs, 3*18691840.0; got != want {
		t.Errorf("resnet8TrainFLOPs = %v, want %v", got, want)
	}
}

func TestScaleoutDerive(t *testing.T) {
	cfg := func(v string, ranks, nodes int) Config {
		return Config{Workload: "scaleout", Impl: "fulgur", Variant: v, Ranks: ranks, Nodes: nodes, Batch: 32}
	}
	fig := func(sps ...float64) []Figures {
		var out []Figures
		for i, s := range sps {
			out = append(out, Figures{"samples_per_s": s, "params": 1e6, "relay_cpu_ms_per_step": float64(i + 1)})
		}
		return out
	}
	rs := []*Result{
		{Config: cfg(limits, 1, 0), Runs: []Figures{{"sgemm_gflops_core": 100, "memcpy_gbps_core": 10}, {"sgemm_gflops_core": 100, "memcpy_gbps_core": 10}}},
		{Config: cfg(oneRank, 1, 0), Runs: fig(100, 100)},
		{Config: cfg(scaleUp, 2, 0), Runs: fig(200, 180)},
		{Config: cfg(scaleOut, 2, 2), Runs: fig(196, 162)},
		{Config: cfg(commUp, 2, 0), Runs: []Figures{{"comm_ms_311016": 0.2}, {"comm_ms_311016": 0.3}}},
		{Config: cfg(commOut, 2, 2), Runs: []Figures{{"comm_ms_311016": 1.2}, {"comm_ms_311016": 1.1}}},
		// 4 ranks: the flat ring against the two-level group.
		{Config: cfg(commOut, 4, 2), Runs: []Figures{{"comm_ms_311016": 2.0, "comm_rsag_ms_311016": 3.0}, {"comm_ms_311016": 2.4, "comm_rsag_ms_311016": 3.3}}},
		{Config: cfg(commOutHier, 4, 2), Runs: []Figures{{"comm_ms_311016": 1.6, "comm_rsag_ms_311016": 2.0}, {"comm_ms_311016": 2.0, "comm_rsag_ms_311016": 3.0}}},
	}
	o := &Options{Runs: 2, LinkRate: "8gbit"}
	rows := workloads["scaleout"].Derive(o, rs)
	byFigure := map[string]Stat{}
	var cmp string
	for _, r := range rows {
		for k, s := range r.Figures {
			if r.Labels["figure"] == "samples_per_s" {
				cmp = r.Config
			}
			if v, ok := r.Labels["variant"]; ok {
				k = v.(string) + " " + k
			}
			byFigure[k] = s
		}
	}
	near := func(name string, want float64) {
		t.Helper()
		if got := byFigure[name].Median; math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Run by run: 196/200 = 0.98 and 162/180 = 0.9; the differences 2% and 10%.
	near("ratio", 0.94)
	near("diff_pct", 6)
	// A step is 64 samples: 320 ms and 355.6 on one node, 326.5 and
	// 395.1 on two; the relay's 1 and 2 ms a step on two.
	near("up_step_ms", (64000.0/200+64000.0/180)/2)
	near("out_step_ms", (64000.0/196+64000.0/162)/2)
	near("gap_ms", (64000.0/196-64000.0/200+64000.0/162-64000.0/180)/2)
	near("relay_cpu_ms_per_step", 1.5)
	// The all-reduce: 1.0 and 0.8 ms more a step on two nodes, 0.9 of
	// the 23.0 ms gap.
	near("comm_gap_ms", 0.9)
	near("comm_share_of_gap", 0.9/((64000.0/196-64000.0/200+64000.0/162-64000.0/180)/2))
	near("out_comm_ms_311016", 1.15)
	if !strings.Contains(cmp, "2 ranks") || !strings.Contains(cmp, "NOT met") {
		t.Errorf("comparison row %q: want 2 ranks, goal not met at a 6%% difference", cmp)
	}
	// 100 samples/s of resnet8 on one core of 100 GFLOP/s.
	near("single roofline_share", 100*resnet8TrainFLOPs/1e9/100)
	// Scale-up, 2 ranks: (200/64 + 180/64)/2 steps/s; each moves 1e6
	// params x 4 bytes x 2(n-1)/n = 4 MB per rank and step.
	near("scale-up grad_busbw_gbps", 190.0/64*4e6/1e9)
	near("scale-up grad_bw_share", 190.0/64*4e6/1e9/10)
	// Scale-out shares the 8 Gbit/s link, 1 GB/s.
	near("scale-out grad_bw_share", 179.0/64*4e6/1e9/1)
	// Run by run: 2.0/1.6 and 2.4/2.0 for the all-reduce, 3.0/2.0 and
	// 3.3/3.0 for reduce-scatter + all-gather.
	near("allreduce_flat_over_hier", (2.0/1.6+2.4/2.0)/2)
	near("rsag_flat_over_hier", (3.0/2.0+3.3/3.0)/2)
	near("hier_comm_rsag_ms_311016", 2.5)
	if _, ok := byFigure["single grad_busbw_gbps"]; ok {
		t.Error("one rank reports gradient traffic")
	}
}

// The 1-rank figure starts both lines of the plot.
func TestScaleoutPlot(t *testing.T) {
	rs := []*Result{
		{Config: Config{Variant: limits, Ranks: 1}, Runs: []Figures{{"sgemm_gflops_core": 100}}},
		{Config: Config{Variant: oneRank, Ranks: 1, Batch: 32}, Runs: runs(100, 110, 90)},
		{Config: Config{Variant: scaleUp, Ranks: 2, Batch: 32}, Runs: runs(190, 180, 200)},
		{Config: Config{Variant: scaleOut, Ranks: 2, Batch: 32}, Runs: runs(170)},
	}
	hs, err := scaleoutHistories(rs)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float64{}
	for _, h := range hs {
		for _, p := range h.Series("samples_per_s") {
			got[h.Label] = append(got[h.Label], float64(p.Step), p.Value)
		}
	}
	want := map[string][]float64{"scale-up: one host, shm": {1, 100, 2, 190}, "scale-out: two nodes, tcp": {1, 100, 2, 170}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("series (ranks, samples/s) %v, want %v", got, want)
	}
	path := filepath.Join(t.TempDir(), "s.svg")
	if err := scaleoutPlot(&Options{Plot: path}, rs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), "ranks") || !strings.Contains(string(b), "scale-out: two nodes, tcp") {
		t.Errorf("plot %s (%v) lacks the ranks axis or the scale-out line", path, err)
	}
	if _, err := scaleoutHistories(rs[:1]); err == nil {
		t.Error("a plot of nothing")
	}
}

// Run from a package directory, the command plots nowhere by default:
// tests and strangers' trees get no file.
func TestDefaultPlotOnlyAtTheRoot(t *testing.T) {
	if p := defaultPlot(); p != "" {
		t.Errorf("default plot from %s is %q, want none", must(os.Getwd()), p)
	}
	t.Chdir(filepath.Join("..", ".."))
	if p := defaultPlot(); p != filepath.Join("bench", "scaleout.svg") {
		t.Errorf("default plot from the repository root is %q", p)
	}
}

func must[T any](v T, _ error) T { return v }

// FULGUR_BENCH_SPANS's figures: each span's time a step, in ms, and the
// stop agreements a step.
func TestAddSpanFigures(t *testing.T) {
	f := Figures{}
	addSpanFigures(f, []profiler.Row{{Action: "wait bucket 0", Calls: 200, Total: 300 * time.Millisecond},
		{Action: "optimizer step", Calls: 200, Total: 2 * time.Second}}, 200)
	want := Figures{"ms/step wait bucket 0": 1.5, "ms/step optimizer step": 10, "stop agreements/step": 0}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("figures %v, want %v", f, want)
	}
	f = Figures{}
	addSpanFigures(f, []profiler.Row{{Action: "stop agreement", Calls: 4, Total: 2 * time.Millisecond}}, 200)
	want = Figures{"ms/step stop agreement": 0.01, "stop agreements/step": 0.02}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("figures %v, want %v", f, want)
	}
}

// The relay's work in one scale-out run, per training step.
func TestAddRelayFigures(t *testing.T) {
	f := Figures{"steps": 200}
	addRelayFigures(f, netns.RelayStats{Frames: 5000, Dropped: 2, Late: 4998 * 3 * time.Microsecond, CPU: 300 * time.Millisecond,
		NodeCPU: [2]time.Duration{100 * time.Millisecond, 200 * time.Millisecond}}, 500*time.Millisecond)
	want := Figures{"steps": 200, "relay_cpu_ms_per_step": 1.5, "relay_frames_per_step": 25, "relay_late_us": 3, "relay_dropped": 2,
		"relay_cpu_ms_per_step_to_node0": 0.5, "relay_cpu_ms_per_step_to_node1": 1, "bench_process_cpu_ms_per_step": 2.5}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("figures %v, want %v", f, want)
	}
}

// Without ip (iproute2) the scale-out layout says what it needs, and no
// configuration runs.
func TestScaleoutSetupSaysWhatItNeeds(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	o, err := parseOptions([]string{"-workload", "scaleout", "-ranks", "1,2"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = workloads["scaleout"].Setup(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "the ip command") || !strings.Contains(err.Error(), "iproute2") {
		t.Errorf("Setup without ip: %v", err)
	}
	// 1 rank needs no namespaces.
	o.Ranks = []int{1}
	release, err := workloads["scaleout"].Setup(context.Background(), o)
	if err != nil || release() != nil {
		t.Errorf("Setup of 1 rank: %v", err)
	}
}

// While the nodes are up the relay's carriers run as processes of their
// own, children of this one, and none of this process's threads carries
// frames: its Go runtime has nothing of the relay to wake on the ranks'
// cores. The release ends them.
func TestScaleoutRelayRunsOutsideTheBenchProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("makes network namespaces, which needs root")
	}
	o, err := parseOptions([]string{"-workload", "scaleout", "-ranks", "2"})
	if err != nil {
		t.Fatal(err)
	}
	release, err := workloads["scaleout"].Setup(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	named := func(glob string) []string {
		dirs, _ := filepath.Glob(glob)
		var out []string
		for _, d := range dirs {
			comm, err := os.ReadFile(filepath.Join(d, "comm"))
			status, err2 := os.ReadFile(filepath.Join(d, "status"))
			if err == nil && err2 == nil && strings.HasPrefix(string(comm), "fulgur-relay") &&
				strings.Contains(string(status), fmt.Sprintf("\nPPid:\t%d\n", os.Getpid())) {
				out = append(out, strings.TrimSpace(string(comm)))
			}
		}
		return out
	}
	var own []string
	tasks, _ := filepath.Glob("/proc/self/task/*")
	for _, task := range tasks {
		if comm, err := os.ReadFile(filepath.Join(task, "comm")); err == nil && strings.HasPrefix(string(comm), "fulgur-relay") {
			own = append(own, strings.TrimSpace(string(comm)))
		}
	}
	children := named("/proc/[0-9]*")
	slices.Sort(children)
	if len(own) != 0 {
		t.Errorf("this process's threads %v carry frames, want none: the relay in processes of its own", own)
	}
	if want := []string{"fulgur-relay0>1", "fulgur-relay1>0"}; !slices.Equal(children, want) {
		t.Errorf("child processes carrying frames %v, want %v", children, want)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if left := named("/proc/[0-9]*"); len(left) != 0 {
		t.Errorf("carriers %v outlived the release", left)
	}
}

// A fake workload whose Setup records its release, for the tests below.
var releases int

func init() {
	register(&workload{
		Name: "test-setup",
		Doc:  "a test's: Setup and release around a configuration that fails",
		Configs: func(o *Options) ([]Config, error) {
			return []Config{{Workload: "test-setup", Impl: "fulgur", Variant: o.Model}}, nil
		},
		Setup: func(ctx context.Context, o *Options) (func() error, error) {
			if o.Model == "interrupt" {
				interrupt() // as Ctrl-C would, once the namespaces exist
			}
			return func() error { releases++; return nil }, nil
		},
		Run: func(ctx context.Context, c Config) (Figures, error) { return nil, errors.New("rank failed on purpose") },
	})
}

var interrupt = func() {}

// Setup's release runs when a rank fails and when the run is
// interrupted: the scale-out namespaces never outlive the command.
func TestSetupIsReleased(t *testing.T) {
	for _, c := range []struct{ name, model, want string }{
		{"a rank fails", "fail", "1 configuration(s) produced no figures"},
		{"interrupted", "interrupt", "context canceled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			interrupt = cancel
			defer func() { interrupt = func() {} }()
			releases = 0
			err := parentMain(ctx, []string{"-workload", "test-setup", "-runs", "1", "-model", c.model, "-json"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
			if releases != 1 {
				t.Errorf("released %d times, want 1", releases)
			}
		})
	}
}

// When one rank fails, measure stops the others and blames the rank that
// failed first; before, rank 0 waited for the dead peer until its timeout
// and the error named rank 0. Rank 1 fails at once here: its CPU profile
// path is a directory.
func TestMeasureStopsTheJobWhenARankFails(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two ranks")
	}
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.pprof")
	if err := os.Mkdir(prof+".rank1", 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FULGUR_BENCH_CPUPROFILE", prof)
	t.Setenv("FULGUR_TIMEOUT", "30s")
	o, err := parseOptions([]string{"-workload", "scaling", "-runs", "1"})
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Threads: 1, Batch: 32, Epochs: 1, Steps: 5, Ranks: 2, Seed: 1}
	_, err = measure(context.Background(), o, c)
	if err == nil || !strings.HasPrefix(err.Error(), "rank 1:") || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("error %v, want rank 1's own failure", err)
	}
}

// FULGUR_BENCH_SPANS with several ranks: the other ranks' spans join rank
// 0's figures under their rank's name; their other figures (peak RSS) and
// a rank that printed nothing add nothing.
func TestMergeRankFigures(t *testing.T) {
	f := Figures{"ms/step wait bucket 0": 3}
	outs := []string{
		"log line\n" + `{"rank1 ms/step wait bucket 0":0.5,"peak_rss_mb":300}` + "\n",
		"",
	}
	mergeRankFigures(f, outs, func(s string) []byte { return []byte(s) })
	want := Figures{"ms/step wait bucket 0": 3, "rank1 ms/step wait bucket 0": 0.5}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("figures %v, want %v", f, want)
	}
	if got := rankFigures(Figures{"ms/step fit": 38}, "1"); !reflect.DeepEqual(got, Figures{"rank1 ms/step fit": 38}) {
		t.Errorf("rankFigures: %v", got)
	}
}

// -bucket-bytes measures each cap on both layouts in every run; the
// default cap keeps the plain configurations.
func TestScaleoutBucketConfigs(t *testing.T) {
	cs := scaleoutConfigsOf(t, "-ranks", "2", "-bucket-bytes", "0,131072,65536")
	type key struct {
		variant string
		bucket  int
	}
	var got []key
	for _, c := range cs {
		got = append(got, key{c.Variant, c.BucketBytes})
	}
	want := []key{{limits, 0}, {scaleUp, 0}, {scaleOut, 0}, {scaleUp, 131072}, {scaleOut, 131072}, {scaleUp, 65536}, {scaleOut, 65536}, {commUp, 0}, {commOut, 0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("configurations %v, want %v", got, want)
	}
	labels := map[string]bool{}
	for _, c := range cs {
		if labels[c.Label()] || labels[c.dirName()] {
			t.Errorf("%q / %q: two configurations share a label or a timeline directory", c.Label(), c.dirName())
		}
		labels[c.Label()], labels[c.dirName()] = true, true
	}
	for _, bad := range []string{"-1", "x", "65536,65536"} {
		if _, err := parseOptions([]string{"-bucket-bytes", bad}); err == nil || !strings.Contains(err.Error(), "-bucket-bytes is \""+bad+"\"") {
			t.Errorf("-bucket-bytes %s: %v", bad, err)
		}
	}
}

// The A/B rows: each cap against the first, run by run, on each layout.
func TestScaleoutDeriveBuckets(t *testing.T) {
	cfg := func(v string, nodes, bucket int) Config {
		return Config{Workload: "scaleout", Impl: "fulgur", Variant: v, Ranks: 2, Nodes: nodes, Batch: 32, BucketBytes: bucket}
	}
	fig := func(sps ...float64) []Figures {
		var out []Figures
		for _, s := range sps {
			out = append(out, Figures{"samples_per_s": s})
		}
		return out
	}
	rs := []*Result{
		{Config: cfg(scaleUp, 0, 0), Runs: fig(200, 100)},
		{Config: cfg(scaleOut, 2, 0), Runs: fig(160, 80)},
		{Config: cfg(scaleUp, 0, 65536), Runs: fig(220, 90)},
		{Config: cfg(scaleOut, 2, 65536), Runs: fig(200, 100)},
	}
	// Timelines on one node's runs: the communication left after backward.
	rs[0].Runs[0]["comm_exposed_ms_median"], rs[0].Runs[1]["comm_exposed_ms_median"] = 0.3, 0.1
	rs[2].Runs[0]["comm_exposed_ms_median"], rs[2].Runs[1]["comm_exposed_ms_median"] = 0.05, 0.07
	o := &Options{Runs: 2, BucketBytes: []int{0, 65536}}
	got := map[string]Stat{}
	for _, r := range workloads["scaleout"].Derive(o, rs) {
		for k, s := range r.Figures {
			switch r.Labels["figure"] {
			case "bucket_ab":
				got[r.Labels["variant"].(string)+" "+k] = s
			case "samples_per_s":
				got[fmt.Sprint(r.Labels["bucket_bytes"])+" "+k] = s
			}
		}
	}
	want := map[string]float64{
		// Run by run: 220/200 and 90/100 on one node; 200/160 and 100/80 on two.
		"scale-up ratio": 1.0, "scale-out ratio": 1.25,
		// A step is 64 samples: 320 and 640 ms with the default cap on one node.
		"scale-up a_step_ms": 480, "scale-out b_step_ms": 480,
		// Each cap's own layouts: 160/200, 80/100 and 200/220, 100/90.
		"<nil> ratio": 0.8, "65536 ratio": (200.0/220 + 100.0/90) / 2,
		"scale-up a_comm_exposed_ms": 0.2, "scale-up b_comm_exposed_ms": 0.06,
	}
	if _, ok := got["scale-out a_comm_exposed_ms"]; ok {
		t.Error("scale-out has exposed communication figures without timelines")
	}
	for k, w := range want {
		if s, ok := got[k]; !ok || math.Abs(s.Median-w) > 1e-9 {
			t.Errorf("%s = %v (%v), want %v", k, s.Median, ok, w)
		}
	}
}

// A Config's bucket cap reaches its ranks: with 64 KiB, the mlp's 0.9
// MiB of gradients are reduced in several buckets, each waited for by the
// optimizer (the "wait bucket N" spans); with 25 MiB, in one.
func TestBucketBytesReachTheRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two ranks for a few seconds")
	}
	t.Setenv("FULGUR_BENCH_SPANS", "1")
	o, err := parseOptions([]string{"-workload", "scaling", "-runs", "1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, bucket := range []int{25 << 20, 64 << 10} {
		c := Config{Workload: "scaling", Impl: "fulgur", Variant: "mlp", Threads: 1, Batch: 32, Epochs: 1, Steps: 5, Ranks: 2, Backend: "tcp", Seed: 1, BucketBytes: bucket}
		f, err := measure(context.Background(), o, c)
		if err != nil {
			t.Fatal(err)
		}
		_, several := f["ms/step wait bucket 1"]
		if _, one := f["ms/step wait bucket 0"]; !one || several != (bucket < 1<<20) {
			t.Errorf("bucket cap %d: wait bucket 0 %v, wait bucket 1 %v; want bucket 1 only with the 64 KiB cap", bucket, one, several)
		}
	}
}
