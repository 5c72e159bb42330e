package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"

	"github.com/fulgur-ml/fulgur/deploy/netns"
	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// childEnv carries a Config to a child process: its presence makes the
// binary measure that one configuration and print its Figures.
const childEnv = "FULGUR_BENCH_CHILD"

// Options are the command-line options.
type Options struct {
	Workloads   []string
	Runs        int
	JSON        bool
	Threads     []int
	BLAS        []string
	Epochs      int
	Steps       int
	Batch       int
	Seed        uint64
	Data        string
	Peer        string
	PeerThreads []int
	Python      string
	PeerScript  string
	Verbose     bool
	Timeout     time.Duration
	Model       string
	// The scaleout workload's: ranks to measure, the link between its two
	// nodes, and where the plot goes.
	Ranks     []int
	LinkRate  string
	LinkDelay time.Duration
	LinkMTU   int
	Plot      string
	command   string
	// nodes are the two network namespaces of the scale-out layout, made
	// by the scaleout workload's Setup for the whole measurement.
	nodes *netns.Pair
	link  netns.Probe
	// Allreduce filters the allreduce workload: message sizes in bytes,
	// rank counts and backends (empty: all).
	AllreduceBytes    []int
	AllreduceBackends []string
	// Backends are the scaling workload's FULGUR_BACKEND values for its
	// ranks, each measured against the same one-rank baseline (empty: auto).
	Backends []string
	// Pin binds the allreduce workload's ranks, fulgur's and Open MPI's,
	// to a CPU each when they fit the CPUs (-pin, on by default).
	Pin bool
	// BucketBytes are the scaleout workload's ddp gradient bucket caps, in
	// bytes, each measured on both layouts in every run (an A/B against
	// the first); 0 is ddp's default. Empty: the default alone.
	BucketBytes []int
}

func parseOptions(args []string) (*Options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := &Options{}
	var wl, thr, pthr, bl, rk, arBytes, arBackends, backends, buckets string
	fs.StringVar(&wl, "workload", "mlp", "comma-separated workloads: "+strings.Join(workloadNames(), ", ")+", or all")
	fs.IntVar(&o.Runs, "runs", 3, "runs of each configuration (figures are medians)")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object per line instead of a table")
	fs.StringVar(&thr, "threads", "1,2", "BLAS threads of the single-process configurations, comma-separated")
	fs.StringVar(&bl, "blas", "auto", "matrix multiply, comma-separated to compare: auto (BLIS, else OpenBLAS, when installed), blis, openblas or gonum")
	fs.IntVar(&o.Epochs, "epochs", 0, "training epochs (0: the workload's, 1 for mlp and resnet8)")
	fs.IntVar(&o.Steps, "steps", 0, "training batches per epoch (0: all; 200 for scaling); for allreduce, timed operations a run (0: 20, after 5 untimed)")
	fs.IntVar(&o.Batch, "batch", 0, "batch size (0: the workload's, 64)")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed for initialisation and shuffling")
	fs.StringVar(&o.Data, "data", "", "Fashion-MNIST directory (default: the installed copy, else the embedded subset)")
	fs.StringVar(&o.Peer, "peer", "", `"torch" to measure the PyTorch peer side by side and print ratios`)
	fs.StringVar(&pthr, "peer-threads", "1,2", "PyTorch thread counts, comma-separated (the bar compares with the fastest)")
	// Debian's python3-torch installs into the system interpreter, which a
	// pyenv or virtualenv python3 earlier on PATH would not see.
	fs.StringVar(&o.Python, "python", "/usr/bin/python3", "Python interpreter with PyTorch")
	fs.StringVar(&o.PeerScript, "peer-script", "bench/torch_peer.py", "the PyTorch peer script")
	fs.StringVar(&o.Model, "model", "resnet8", "model of the threads workload: resnet8 or mlp")
	fs.BoolVar(&o.Verbose, "v", false, "show the child processes' logs")
	fs.StringVar(&arBytes, "bytes", "", "allreduce message sizes in bytes, comma-separated (default 262144,4194304,26214400)")
	fs.StringVar(&arBackends, "backends", "", "allreduce backends and peers, comma-separated, among tcp, shm, mpi, openmpi-sm, openmpi-tcp (default all)")
	fs.BoolVar(&o.Pin, "pin", true, "allreduce: bind every rank to a CPU of its own, round robin over the CPUs this process may use, on both sides (fulgur's by taskset, Open MPI's by mpirun --map-by core --bind-to core, as mpirun does by default for 2 ranks) when the ranks fit the CPUs; -pin=false binds no rank on either side (mpirun --bind-to none)")
	fs.StringVar(&backends, "backend", "", "scaling: the ranks' collective backends, comma-separated to compare: tcp, shm (default: auto, shm on one host)")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "limit for one measured process")
	fs.StringVar(&rk, "ranks", "", "rank counts, comma-separated: of the allreduce workload (default 2,4) and of the scaleout workload (default 1,2,4; above 1: even, split over its two nodes)")
	fs.StringVar(&o.LinkRate, "link-rate", "10gbit", "scaleout: the rate of the link between the two nodes (tc tbf syntax)")
	fs.DurationVar(&o.LinkDelay, "link-delay", 100*time.Microsecond, "scaleout: delay added to every frame on the link, each direction")
	fs.IntVar(&o.LinkMTU, "link-mtu", 9000, "scaleout: MTU of the link (jumbo frames, as cluster networks use)")
	fs.StringVar(&buckets, "bucket-bytes", "", "scaleout: ddp gradient bucket caps in bytes, comma-separated, each run on both layouts in every run and compared with the first (0: ddp's default; default: the default alone)")
	fs.StringVar(&o.Plot, "plot", defaultPlot(), "scaleout: where the samples/s-against-ranks plot goes (.svg or .png; empty: none); the default is under bench/ only when run from the repository root")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %v: every option is a flag (see -h)", fs.Args())
	}
	var errs []error
	if wl == "all" {
		o.Workloads = workloadNames()
	} else {
		for _, w := range strings.Split(wl, ",") {
			w = strings.TrimSpace(w)
			if _, ok := workloads[w]; !ok {
				errs = append(errs, fmt.Errorf("-workload %q is unknown: use %s or all", w, strings.Join(workloadNames(), ", ")))
				continue
			}
			o.Workloads = append(o.Workloads, w)
		}
	}
	var err error
	if o.Threads, err = intList("-threads", thr); err != nil {
		errs = append(errs, err)
	}
	if o.PeerThreads, err = intList("-peer-threads", pthr); err != nil {
		errs = append(errs, err)
	}
	if rk != "" {
		if o.Ranks, err = intList("-ranks", rk); err != nil {
			errs = append(errs, err)
		}
	}
	if buckets != "" {
		if o.BucketBytes, err = bucketList(buckets); err != nil {
			errs = append(errs, err)
		}
	}
	if arBytes != "" {
		if o.AllreduceBytes, err = intList("-bytes", arBytes); err != nil {
			errs = append(errs, err)
		}
	}
	if backends != "" {
		for _, b := range strings.Split(backends, ",") {
			switch b = strings.TrimSpace(b); b {
			case "tcp", "shm":
				o.Backends = append(o.Backends, b)
			default:
				errs = append(errs, fmt.Errorf("-backend has %q: use tcp or shm, comma-separated", b))
			}
		}
	}
	if arBackends != "" {
		for _, b := range strings.Split(arBackends, ",") {
			switch b = strings.TrimSpace(b); b {
			case "tcp", "shm", "mpi", "openmpi-sm", "openmpi-tcp":
				o.AllreduceBackends = append(o.AllreduceBackends, b)
			default:
				errs = append(errs, fmt.Errorf("-backends has %q: use tcp, shm, mpi, openmpi-sm or openmpi-tcp, comma-separated", b))
			}
		}
	}
	if o.Runs < 1 {
		errs = append(errs, fmt.Errorf("-runs is %d: use 1 or more (3 or more for figures worth reporting)", o.Runs))
	}
	for _, b := range strings.Split(bl, ",") {
		switch b = strings.TrimSpace(b); b {
		case "auto", "blis", "openblas", "gonum":
			o.BLAS = append(o.BLAS, b)
		default:
			errs = append(errs, fmt.Errorf("-blas is %q: use auto, blis, openblas or gonum, comma-separated", bl))
		}
	}
	if o.Peer != "" && o.Peer != "torch" {
		errs = append(errs, fmt.Errorf("-peer is %q: use torch, or leave it empty", o.Peer))
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"-epochs", o.Epochs}, {"-steps", o.Steps}, {"-batch", o.Batch}} {
		if c.v < 0 {
			errs = append(errs, fmt.Errorf("%s is %d: use 0 for the default or a positive number", c.name, c.v))
		}
	}
	o.command = "go run ./cmd/bench " + strings.Join(args, " ")
	return o, errors.Join(errs...)
}

func intList(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s is %q: use positive whole numbers separated by commas, e.g. 1,2", name, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// bucketList parses -bucket-bytes: sizes in bytes, 0 for ddp's default,
// each once.
func bucketList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || slices.Contains(out, n) {
			return nil, fmt.Errorf("-bucket-bytes is %q: use distinct sizes in bytes separated by commas, 0 for ddp's default, e.g. 0,131072,65536", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// byteSize writes n bytes in the largest binary unit that divides it
// ("25MiB", "128KiB", "1000B").
func byteSize(n int) string {
	switch {
	case n > 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n > 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// Config is one measured configuration; it travels to the child as JSON.
type Config struct {
	Workload string `json:"workload"`
	// Impl is "fulgur" or "torch" (the peer).
	Impl string `json:"impl"`
	// Variant distinguishes configurations of one workload ("trainer",
	// "plain", "ranks=2", ...).
	Variant string `json:"variant,omitempty"`
	Threads int    `json:"threads,omitempty"`
	// Workers is FULGUR_WORKERS (0: the plan's).
	Workers int    `json:"workers,omitempty"`
	BLAS    string `json:"blas,omitempty"`
	// Model is the threads workload's model.
	Model  string `json:"model,omitempty"`
	Batch  int    `json:"batch"`
	Epochs int    `json:"epochs,omitempty"`
	Steps  int    `json:"steps,omitempty"`
	Ranks  int    `json:"ranks,omitempty"`
	// Pinned gives each rank exactly one core: GOMAXPROCS=1, one BLAS
	// thread, one nn/ops worker, and an affinity mask of core rank (the
	// peer: torch.set_num_threads(1) and the same mask), so that 1 rank
	// and N ranks compare the same per-core work.
	Pinned bool `json:"pinned,omitempty"`
	// Coexist runs Ranks independent one-rank trainings at once (no
	// collectives, nothing shared but the machine), each pinned to its
	// own core like a rank: the most ddp can reach on this machine, as
	// the ranks' compute slows down beside each other (shared caches,
	// memory bandwidth, the host's other work). samples_per_s is their
	// sum; they start together, and the one that ends first leaves the
	// other alone for the rest of its steps (a few ms in a run of
	// seconds).
	Coexist bool `json:"coexist,omitempty"`
	// ShareCores lets pinned ranks outnumber the cores: rank r gets core
	// r mod cores, and the label says the ranks are oversubscribed.
	ShareCores bool `json:"share_cores,omitempty"`
	// CPUs is how many CPUs the launcher placed the ranks over, set for
	// the ranks (measure): a pinned rank itself sees one, its own. 0: the
	// CPUs this process may use.
	CPUs int `json:"cpus,omitempty"`
	// Nodes is 2 for ranks split over the two network namespaces of
	// Options.nodes (ranks/2 on each); 0 or 1: every rank on this host.
	Nodes int `json:"nodes,omitempty"`
	// Backend is FULGUR_BACKEND for the ranks (tcp, shm); empty: auto.
	Backend string `json:"backend,omitempty"`
	// BucketBytes is ddp's gradient bucket cap for the ranks
	// (FULGUR_BUCKET_MB); 0: ddp's default.
	BucketBytes int    `json:"bucket_bytes,omitempty"`
	Seed        uint64 `json:"seed"`
	Data        string `json:"data,omitempty"`
}

// Label names the configuration in tables.
func (c Config) Label() string {
	parts := []string{c.Impl}
	if c.Variant != "" {
		parts = append(parts, c.Variant)
	}
	switch {
	case c.Coexist && c.Ranks > 1:
		parts = append(parts, fmt.Sprintf("coexist=%d", c.Ranks))
	case c.Coexist:
		parts = append(parts, "coexist")
	case c.Ranks > 1:
		parts = append(parts, fmt.Sprintf("ranks=%d", c.Ranks))
	}
	if c.Backend != "" {
		parts = append(parts, c.Backend)
	}
	if c.BucketBytes > 0 {
		parts = append(parts, "bucket="+byteSize(c.BucketBytes))
	}
	if c.Pinned {
		parts = append(parts, "pinned")
	}
	if cpus := c.placedOver(); c.Pinned && c.Ranks > cpus {
		parts = append(parts, fmt.Sprintf("OVERSUBSCRIBED(%d ranks on %d cores)", c.Ranks, cpus))
	}
	if c.BLAS != "" && c.BLAS != "auto" {
		parts = append(parts, c.BLAS)
	}
	if c.Model != "" {
		parts = append(parts, c.Model)
	}
	switch {
	case c.Workers > 0:
		parts = append(parts, fmt.Sprintf("workers=%d threads=%d", c.Workers, c.Threads))
	case c.Threads == 0:
		parts = append(parts, "threads=default")
	default:
		parts = append(parts, fmt.Sprintf("threads=%d", c.Threads))
	}
	if c.Batch > 0 {
		parts = append(parts, fmt.Sprintf("batch=%d", c.Batch))
	}
	return strings.Join(parts, " ")
}

// placedOver is how many CPUs the ranks of c are placed over: the
// launcher's (Config.CPUs), or this process's when it is the launcher.
func (c Config) placedOver() int {
	if c.CPUs > 0 {
		return c.CPUs
	}
	return len(allowedCPUs())
}

// Figures are what one run measured, by the field names of BENCHMARKS.md
// (samples_per_s, allocs_per_step, peak_rss_mb, test_acc, ...).
type Figures map[string]float64

// Result is every run of one configuration.
type Result struct {
	Config Config
	Runs   []Figures
	Errs   []string
}

// Stat summarises one figure over runs.
type Stat struct{ Median, Min, Max float64 }

func stat(v []float64) Stat {
	if len(v) == 0 {
		return Stat{math.NaN(), math.NaN(), math.NaN()}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{m, s[0], s[len(s)-1]}
}

// figure collects one figure over the runs that have it.
func (r *Result) figure(name string) []float64 {
	var out []float64
	for _, f := range r.Runs {
		if v, ok := f[name]; ok && !math.IsNaN(v) {
			out = append(out, v)
		}
	}
	return out
}

// Row is one line of output: a configuration's figures or a derived ratio.
type Row struct {
	Workload string
	Config   string
	Labels   map[string]any
	Figures  map[string]Stat
	N        int
}

// figureOrder is the order figures appear in tables.
var figureOrder = []string{"samples_per_s", "samples_per_cpu_s", "ratio", "efficiency", "allocs_per_step", "peak_rss_mb", "test_acc", "test_acc_1", "test_acc_3", "busbw_gbps", "seconds", "steps", "heap_live_mb", "heap_peak_mb", "ms_per_step", "params_mb", "heap_live_mb_vs_ddp", "heap_peak_mb_vs_ddp", "ms_per_step_vs_ddp"}

func rowOf(r *Result) Row {
	row := Row{Workload: r.Config.Workload, Config: r.Config.Label(), Figures: map[string]Stat{}, N: len(r.Runs),
		Labels: map[string]any{"impl": r.Config.Impl, "threads": r.Config.Threads, "batch": r.Config.Batch}}
	if r.Config.Variant != "" {
		row.Labels["variant"] = r.Config.Variant
	}
	if r.Config.BLAS != "" {
		row.Labels["blas"] = r.Config.BLAS
	}
	if r.Config.Ranks > 0 {
		row.Labels["ranks"] = r.Config.Ranks
	}
	names := map[string]bool{}
	for _, f := range r.Runs {
		for k := range f {
			names[k] = true
		}
	}
	for k := range names {
		row.Figures[k] = stat(r.figure(k))
	}
	return row
}

// runOrder is the order in which run run (from 0) measures n
// configurations: as listed in even runs, reversed in odd ones (A B C, C B
// A, A B C, ...). Ratios are taken run by run (2 ranks over 1, fulgur over
// PyTorch), and a machine's load drifts within a run: in the same order
// every run, the configuration listed first (the one-rank baseline) always
// ran before the one it is compared with, and a drift counted against one
// side in every run, which a median over runs cannot remove. Reversed
// every other run, it counts against each side in half of them, and the
// configurations compared in a run stay as close in time, on average, as
// their places in the list.
func runOrder(run, n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
		if run%2 == 1 {
			order[i] = n - 1 - i
		}
	}
	return order
}

func parentMain(ctx context.Context, args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	var results []*Result
	byWorkload := map[string][]*Result{}
	for _, name := range o.Workloads {
		cs, err := workloads[name].Configs(o)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, c := range cs {
			r := &Result{Config: c}
			results = append(results, r)
			byWorkload[name] = append(byWorkload[name], r)
		}
	}
	for _, name := range o.Workloads {
		if setup := workloads[name].Setup; setup != nil {
			release, err := setup(ctx, o)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			// Deferred, so an interrupt (the context ends, the loop
			// returns) or a failed rank releases it too.
			defer func() {
				if err := release(); err != nil {
					fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
				}
			}()
		}
	}
	load0 := loadAvg()
	start := time.Now()
	for run := 0; run < o.Runs; run++ {
		for _, i := range runOrder(run, len(results)) {
			r := results[i]
			if err := ctx.Err(); err != nil {
				return err
			}
			if !o.JSON {
				fmt.Fprintf(os.Stderr, "run %d/%d: %s %s\n", run+1, o.Runs, r.Config.Workload, r.Config.Label())
			}
			f, err := measure(ctx, o, r.Config)
			if err != nil {
				r.Errs = append(r.Errs, err.Error())
				fmt.Fprintf(os.Stderr, "bench: %s %s: %v\n", r.Config.Workload, r.Config.Label(), err)
				continue
			}
			r.Runs = append(r.Runs, f)
		}
	}
	var rows []Row
	failed := 0
	for _, name := range o.Workloads {
		for _, r := range byWorkload[name] {
			if len(r.Runs) == 0 {
				failed++
				continue
			}
			rows = append(rows, rowOf(r))
		}
		if d := workloads[name].Derive; d != nil {
			rows = append(rows, d(o, byWorkload[name])...)
		}
	}
	meta := map[string]any{"command": o.command, "runs": o.Runs, "blas": strings.Join(o.BLAS, ","), "loadavg_start": load0,
		"loadavg_end": loadAvg(), "cpus": runtime.NumCPU(), "seconds": math.Round(time.Since(start).Seconds())}
	if o.JSON {
		err = printJSON(os.Stdout, rows, meta)
	} else {
		err = printTable(os.Stdout, rows, meta)
	}
	if err != nil {
		return err
	}
	for _, name := range o.Workloads {
		if after := workloads[name].After; after != nil {
			if err := after(o, byWorkload[name]); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted (%w): the figures above are partial", err)
	}
	if failed > 0 {
		return fmt.Errorf("%d configuration(s) produced no figures (errors above)", failed)
	}
	return nil
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func printJSON(w io.Writer, rows []Row, meta map[string]any) error {
	enc := json.NewEncoder(w)
	for _, r := range rows {
		obj := map[string]any{"workload": r.Workload, "config": r.Config, "runs": r.N, "command": meta["command"], "loadavg_start": meta["loadavg_start"]}
		for k, v := range r.Labels {
			obj[k] = v
		}
		for k, s := range r.Figures {
			obj[k] = round(s.Median)
			obj[k+"_min"] = round(s.Min)
			obj[k+"_max"] = round(s.Max)
		}
		if err := enc.Encode(obj); err != nil {
			return err
		}
	}
	return nil
}

func round(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	a := math.Abs(v)
	switch {
	case a >= 1000:
		return math.Round(v)
	case a >= 10:
		return math.Round(v*10) / 10
	default:
		return math.Round(v*10000) / 10000
	}
}

func printTable(w io.Writer, rows []Row, meta map[string]any) error {
	fmt.Fprintf(w, "command: %s\n", meta["command"])
	fmt.Fprintf(w, "runs per configuration: %v (interleaved, every other run in reverse order); load average at start %v, at end %v; %v CPUs; %vs\n",
		meta["runs"], meta["loadavg_start"], meta["loadavg_end"], meta["cpus"], meta["seconds"])
	t := tablewriter.NewWriter(w)
	t.SetHeader([]string{"workload", "configuration", "figure", "median", "min", "max", "runs"})
	t.SetAutoWrapText(false)
	t.SetAlignment(tablewriter.ALIGN_RIGHT)
	for _, r := range rows {
		for _, name := range orderedFigures(r.Figures) {
			s := r.Figures[name]
			t.Append([]string{r.Workload, r.Config, name, fmtNum(s.Median), fmtNum(s.Min), fmtNum(s.Max), strconv.Itoa(r.N)})
		}
	}
	t.Render()
	return nil
}

func orderedFigures(m map[string]Stat) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range figureOrder {
		if _, ok := m[n]; ok {
			out = append(out, n)
			seen[n] = true
		}
	}
	var rest []string
	for n := range m {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

func fmtNum(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprint(round(v))
}

// measure runs one configuration in fresh processes and returns rank 0's
// figures.
func measure(ctx context.Context, o *Options, c Config) (Figures, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if c.Impl == "torch" {
		return measureTorch(ctx, o, c)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// The ranks' labels (in their logs) judge oversubscription by the
	// CPUs placed over here: a pinned rank sees only its own.
	c.CPUs = len(allowedCPUs())
	spec, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	// A listener descriptor named in this process's own environment is
	// not the ranks' to use: only the one handed to rank 0 below is.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, launch.EnvListenerFD+"=") })
	env = append(env, childEnv+"="+string(spec), "FULGUR_BLAS="+c.BLAS)
	// The parent's own settings must not leak into a configuration that
	// leaves them to the plan.
	env = append(env, "FULGUR_BLAS_THREADS=", "FULGUR_WORKERS=")
	if c.Threads > 0 {
		env = append(env, fmt.Sprintf("FULGUR_BLAS_THREADS=%d", c.Threads))
	}
	if c.Workers > 0 {
		env = append(env, fmt.Sprintf("FULGUR_WORKERS=%d", c.Workers))
	}
	ranks := max(c.Ranks, 1)
	if c.Pinned {
		if err := canPin(ranks, c.ShareCores); err != nil {
			return nil, err
		}
		env = append(env, "GOMAXPROCS=1", "FULGUR_BLAS_THREADS=1", "FULGUR_WORKERS=1")
	}
	if c.Backend != "" {
		env = append(env, "FULGUR_BACKEND="+c.Backend)
	}
	if c.BucketBytes > 0 {
		env = append(env, "FULGUR_BUCKET_MB="+strconv.FormatFloat(float64(c.BucketBytes)/(1<<20), 'g', -1, 64))
	}
	cpus := allowedCPUs()
	place, err := placeRanks(ranks, max(c.Nodes, 1), cpus)
	if err != nil {
		return nil, err
	}
	masterAddr := "127.0.0.1"
	if c.Nodes > 1 {
		if o.nodes == nil {
			return nil, fmt.Errorf("%s: %d nodes, but no network namespaces were made for them", c.Label(), c.Nodes)
		}
		masterAddr = o.nodes.Addr[0]
	}
	// held is rank 0's rendezvous listener, bound here and handed over
	// (launch.EnvListenerFD), so that no other program can take the port
	// between its choice and rank 0's use of it.
	var held *os.File
	if ranks > 1 && !c.Coexist {
		port := namespacePort
		if c.Nodes <= 1 {
			if held, port, err = holdPort(); err != nil {
				return nil, err
			}
			defer held.Close()
		}
		if portChosen != nil {
			portChosen(port)
		}
		token := make([]byte, 16)
		if _, err := rand.Read(token); err != nil {
			return nil, err
		}
		// torchrun's variables, which strategy/cluster reads, and the job's
		// shared secret.
		env = append(env, "FULGUR_TOKEN="+hex.EncodeToString(token), "MASTER_ADDR="+masterAddr, fmt.Sprintf("MASTER_PORT=%d", port),
			fmt.Sprintf("WORLD_SIZE=%d", ranks))
	}
	// A rank that fails ends the others at once, rather than after their
	// wait for a silent peer.
	ctx, stopRanks := context.WithCancel(ctx)
	defer stopRanks()
	steal0, cores0, start := readCPUTicks(), readCoreBusy(), time.Now()
	var relay0 netns.RelayStats
	var process0 time.Duration
	if c.Nodes > 1 {
		relay0, process0 = o.nodes.Relay.Stats(), processCPU()
	}
	type out struct {
		stdout, stderr bytes.Buffer
		err            error
		cpu            time.Duration // user and system time of the process
	}
	outs := make([]*out, ranks)
	done := make(chan int, ranks)
	for rank := 0; rank < ranks; rank++ {
		p := place[rank]
		var argv []string
		if c.Nodes > 1 {
			argv = o.nodes.Exec(p.Node)
		}
		if c.Pinned {
			// taskset sets the mask before exec, so every thread the Go
			// runtime starts inherits it.
			argv = append(argv, "taskset", "-c", strconv.Itoa(p.Core))
		}
		argv = append(argv, exe)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = env
		if c.Coexist {
			cmd.Env = append(append([]string(nil), env...), fmt.Sprintf("%s=%d", processEnv, rank))
		}
		if ranks > 1 && !c.Coexist {
			cmd.Env = append(append([]string(nil), env...), fmt.Sprintf("RANK=%d", rank), fmt.Sprintf("LOCAL_RANK=%d", p.LocalRank),
				fmt.Sprintf("LOCAL_WORLD_SIZE=%d", p.LocalRanks), fmt.Sprintf("NODE_RANK=%d", p.Node), fmt.Sprintf("GROUP_RANK=%d", p.Node))
			if c.Nodes > 1 {
				cmd.Env = append(cmd.Env, "FULGUR_SOCKET_IFNAME="+o.nodes.Dev[p.Node], bindAddrEnv+"="+o.nodes.Addr[p.Node])
			}
		}
		if rank == 0 && held != nil {
			// ExtraFiles[0] is descriptor 3 in the child.
			cmd.ExtraFiles = []*os.File{held}
			cmd.Env = append(cmd.Env, launch.EnvListenerFD+"=3")
		}
		ot := &out{}
		outs[rank] = ot
		cmd.Stdout = &ot.stdout
		cmd.Stderr = &ot.stderr
		if o.Verbose {
			cmd.Stderr = io.MultiWriter(&ot.stderr, prefixed(os.Stderr, fmt.Sprintf("[rank %d] ", rank)))
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		if rank == 0 && held != nil {
			// Rank 0 has its own copy now.
			held.Close()
		}
		go func(rank int) {
			ot.err = cmd.Wait()
			if ps := cmd.ProcessState; ps != nil {
				ot.cpu = ps.UserTime() + ps.SystemTime()
			}
			done <- rank
		}(rank)
	}
	first := -1 // the first rank to fail
	for range ranks {
		if r := <-done; outs[r].err != nil && first < 0 {
			first = r
			stopRanks()
		}
	}
	if first >= 0 {
		ot := outs[first]
		return nil, fmt.Errorf("rank %d: %v\n%s", first, ot.err, tail(ot.stderr.String(), 2000))
	}
	steal := readCPUTicks().stealPct(steal0)
	wall, cores1 := time.Since(start), readCoreBusy()
	f, err := lastJSON(outs[0].stdout.Bytes(), outs[0].stderr.String())
	if err == nil && c.Coexist {
		err = sumCoexisting(f, outs[1:], func(o *out) []byte { return o.stdout.Bytes() })
	}
	if err == nil {
		mergeRankFigures(f, outs[1:], func(o *out) []byte { return o.stdout.Bytes() })
		if c.Pinned && steal >= 0 {
			// A pinned rank's core lent to another guest by the host.
			f["steal_pct"] = steal
		}
		if c.Pinned {
			cpu := map[int]time.Duration{}
			for r, ot := range outs {
				cpu[place[r].Core] += ot.cpu
			}
			prefix := processPrefix(c)
			for r := range outs {
				pct, ok := coreOthersPct(cores0, cores1, place[r].Core, cpu[place[r].Core], wall)
				if !ok {
					continue
				}
				if r == 0 {
					f["core_others_pct"] = pct
				} else {
					f[fmt.Sprintf("%s%d core_others_pct", prefix, r)] = pct
				}
			}
		}
	}
	if dir := os.Getenv("FULGUR_BENCH_TIMELINE"); dir != "" && err == nil && ranks > 1 {
		if _, train := f["steps"]; train {
			if err := addJitterFigures(f, filepath.Join(dir, c.dirName()), ranks, processPrefix(c)); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %s: no jitter figures: %v\n", c.Label(), err)
			}
			if err := addExposedComm(f, filepath.Join(dir, c.dirName()), ranks); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %s: no exposed communication figures: %v\n", c.Label(), err)
			}
		}
	}
	if _, train := f["steps"]; err == nil && c.Nodes > 1 && train {
		addRelayFigures(f, o.nodes.Relay.Stats().Since(relay0), processCPU()-process0)
	}
	return f, err
}

func measureTorch(ctx context.Context, o *Options, c Config) (Figures, error) {
	w := c.Workload
	if w == "scaling" { // the peer trains the model under DDP when --ranks > 1
		w = c.Variant
	}
	args := []string{o.PeerScript, "--workload", w, "--threads", strconv.Itoa(c.Threads),
		"--batch", strconv.Itoa(c.Batch), "--seed", strconv.FormatUint(c.Seed, 10), "--json"}
	if c.Epochs > 0 {
		args = append(args, "--epochs", strconv.Itoa(c.Epochs))
	}
	if c.Steps > 0 {
		args = append(args, "--steps", strconv.Itoa(c.Steps))
	}
	if c.Ranks > 1 {
		args = append(args, "--ranks", strconv.Itoa(c.Ranks))
	}
	if c.Data != "" {
		args = append(args, "--data", c.Data)
	}
	if c.Pinned {
		if err := canPin(max(c.Ranks, 1), false); err != nil {
			return nil, err
		}
		args = append(args, "--pin")
	}
	cmd := exec.CommandContext(ctx, o.Python, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if o.Verbose {
		cmd.Stderr = io.MultiWriter(&stderr, prefixed(os.Stderr, "[torch] "))
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v\n%s", o.Python, strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	return lastJSON(stdout.Bytes(), stderr.String())
}

// processEnv numbers the independent trainings of a Config.Coexist run
// (they have no RANK), so that the files each writes have names of their
// own.
const processEnv = "FULGUR_BENCH_PROCESS"

// processPrefix names the figures of c's processes other than the first:
// "rank1 ...", or "process1 ..." for independent trainings.
func processPrefix(c Config) string {
	if c.Coexist {
		return "process"
	}
	return "rank"
}

// childIndex is this measured process's rank, or its number among
// independent trainings run at once (processEnv): what tells its files
// apart from the others'.
func childIndex() int {
	for _, v := range []string{"RANK", processEnv} {
		if r, err := strconv.Atoi(os.Getenv(v)); err == nil {
			return r
		}
	}
	return 0
}

// sumCoexisting makes f, the first of independent trainings run at once
// (Config.Coexist), their total: samples_per_s summed, and each one's as
// "process<N> samples_per_s".
func sumCoexisting[T any](f Figures, others []T, stdout func(T) []byte) error {
	f["process0 samples_per_s"] = f["samples_per_s"]
	for i, o := range others {
		g, err := lastJSON(stdout(o), "")
		if err != nil {
			return fmt.Errorf("coexisting training %d: %w", i+1, err)
		}
		f[fmt.Sprintf("process%d samples_per_s", i+1)] = g["samples_per_s"]
		f["samples_per_s"] += g["samples_per_s"]
		if m, ok := g["step_ms_median"]; ok {
			f[fmt.Sprintf("process%d step_ms_median", i+1)] = m
		}
	}
	return nil
}

// cpuTicks are the machine's CPU time counters (the "cpu" line of
// /proc/stat), in clock ticks.
type cpuTicks struct{ total, steal uint64 }

func readCPUTicks() cpuTicks {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseCPUTicks(line)
}

// parseCPUTicks reads /proc/stat's first line: "cpu user nice system idle
// iowait irq softirq steal guest guest_nice" (guest time is inside user).
func parseCPUTicks(line string) cpuTicks {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTicks{}
	}
	var t cpuTicks
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTicks{}
		}
		t.total += v
		if i == 7 {
			t.steal = v
		}
	}
	return t
}

// readCoreBusy reads the busy time of every CPU from /proc/stat's "cpuN"
// lines (user, nice, system, irq and softirq; not idle, iowait or steal),
// in clock ticks, by CPU number.
func readCoreBusy() map[int]uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	return parseCoreBusy(string(b))
}

func parseCoreBusy(stat string) map[int]uint64 {
	out := map[int]uint64{}
	for _, line := range strings.Split(stat, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			continue
		}
		var busy uint64
		ok := true
		for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
			v, err := strconv.ParseUint(f[i], 10, 64)
			ok = ok && err == nil
			busy += v
		}
		if ok {
			out[n] = busy
		}
	}
	return out
}

// clockTick is /proc/stat's unit, USER_HZ, which Linux fixes at 100 for
// user space on every architecture.
const clockTick = 10 * time.Millisecond

// coreOthersPct is the share of wall, in percent, that core spent running
// anything but the measured processes pinned to it, which used own CPU
// time: the other ranks' neighbours there (the scale-out relay, the
// network's soft interrupts, the bench itself, other work on the
// machine). A rank whose core was taken more is the slower one, which
// the others wait for. ok is false when a reading is missing.
func coreOthersPct(busy0, busy1 map[int]uint64, core int, own, wall time.Duration) (float64, bool) {
	b0, ok0 := busy0[core]
	b1, ok1 := busy1[core]
	if !ok0 || !ok1 || b1 < b0 || wall <= 0 {
		return 0, false
	}
	others := time.Duration(b1-b0)*clockTick - own
	return 100 * max(others, 0).Seconds() / wall.Seconds(), true
}

// stealPct is the share of the machine's CPU time since t0 that the
// hypervisor gave to other guests, in percent; -1 when unknown.
func (t cpuTicks) stealPct(t0 cpuTicks) float64 {
	if t.total <= t0.total || t0.total == 0 {
		return -1
	}
	return 100 * float64(t.steal-t0.steal) / float64(t.total-t0.total)
}

// mergeRankFigures adds to rank 0's figures f those the other ranks
// printed (FULGUR_BENCH_SPANS: their spans, named "rank<N> ..."); a rank
// that printed none adds nothing.
func mergeRankFigures[T any](f Figures, ranks []T, stdout func(T) []byte) {
	for _, r := range ranks {
		b := bytes.TrimSpace(stdout(r))
		if len(b) == 0 {
			continue
		}
		if g, err := lastJSON(b, ""); err == nil {
			for k, v := range g {
				if strings.HasPrefix(k, "rank") {
					f[k] = v
				}
			}
		}
	}
}

func lastJSON(stdout []byte, stderr string) (Figures, error) {
	lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
	last := lines[len(lines)-1]
	var f Figures
	if err := json.Unmarshal([]byte(last), &f); err != nil {
		return nil, fmt.Errorf("the measured process printed no figures (%v); its output ends:\n%s\n%s", err, tail(string(stdout), 500), tail(stderr, 2000))
	}
	return f, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

type prefixWriter struct {
	w      io.Writer
	prefix string
}

func prefixed(w io.Writer, p string) io.Writer { return &prefixWriter{w, p} }

func (p *prefixWriter) Write(b []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, sc.Text())
	}
	return len(b), nil
}

// portChosen, when set (by tests), runs between the choice of the ranks'
// rendezvous port and the ranks' start: where another program could take
// the port.
var portChosen func(port int)

// holdPort binds a free loopback port for rank 0's rendezvous and returns
// the listener as a file to hand to rank 0 (a port chosen by listening and
// closing can be taken by another program, or by a rank's own data
// listener, before rank 0 binds it: once in 200 runs here).
func holdPort() (*os.File, int, error) {
	ln, port, err := launch.Loopback(0)
	if err != nil {
		return nil, 0, fmt.Errorf("reserve a port for the ranks' rendezvous: %w", err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return nil, 0, fmt.Errorf("hand the rendezvous port to rank 0: %w", err)
	}
	return f, port, nil
}

// namespacePort is rank 0's rendezvous port on the scale-out layout's
// node 0, a network namespace of this run's own where only its ranks
// bind: below the namespace's ephemeral range (32768-60999), so no rank's
// data listener (port 0) can take it, and no other program runs there. (A
// listener cannot be handed over from this process, which is outside the
// namespace.)
const namespacePort = 29500

// childMain measures the configuration in spec and prints its figures as
// the last line on stdout, with peak RSS added.
func childMain(ctx context.Context, spec string) error {
	var c Config
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		return fmt.Errorf("%s is not a configuration: %w", childEnv, err)
	}
	w, ok := workloads[c.Workload]
	if !ok {
		return fmt.Errorf("%s names workload %q, which this binary does not have", childEnv, c.Workload)
	}
	if path := os.Getenv("FULGUR_BENCH_CPUPROFILE"); path != "" {
		// Profile the measured process itself (go tool pprof BINARY PATH);
		// with several configurations each overwrites it: pick one with
		// -workload and -threads. Ranks other than 0 write PATH.rank<N>.
		if r := childIndex(); r > 0 {
			path += fmt.Sprintf(".rank%d", r)
		}
		pf, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pf.Close()
		defer pprof.StopCPUProfile()
	}
	if path := os.Getenv("FULGUR_BENCH_MEMPROFILE"); path != "" {
		// Every allocation is sampled (slow): for finding what allocates
		// per step, not for timing. Ranks other than 0 write
		// PATH.rank<N>, as with the CPU profile.
		if r := childIndex(); r > 0 {
			path += fmt.Sprintf(".rank%d", r)
		}
		runtime.MemProfileRate = 1
		defer func() {
			// The profile holds what the last collection published: one
			// now brings in the steps since (a training may run none).
			runtime.GC()
			if pf, err := os.Create(path); err == nil {
				pprof.Lookup("allocs").WriteTo(pf, 0)
				pf.Close()
			}
		}()
	}
	f, err := w.Run(ctx, c)
	if stats != nil {
		stats.report(os.Stderr)
	}
	if err != nil {
		return err
	}
	if f == nil { // a rank other than 0
		return nil
	}
	if rss, err := peakRSSMB(); err == nil {
		f["peak_rss_mb"] = rss
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", b)
	return err
}

// peakRSSMB reads this process's peak resident set (VmHWM) in MiB.
func peakRSSMB() (float64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			kb, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return 0, err
			}
			return kb / 1024, nil
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}

// canPin reports whether ranks processes can each get a core of their own:
// taskset (util-linux) sets the masks, and the cores must exist unless the
// ranks may share them.
func canPin(ranks int, share bool) error {
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("pinned ranks need taskset (Debian: apt-get install util-linux): %v", err)
	}
	if n := runtime.NumCPU(); ranks > n && !share {
		return fmt.Errorf("pinned ranks: %d ranks need %d cores, but this process may use %d: lower the ranks", ranks, ranks, n)
	}
	return nil
}
