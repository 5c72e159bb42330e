package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/shm"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// allreduce: float32 sum over 256 KB, 4 MB and 25 MB (-bytes) at 2 and 4
// ranks (-ranks), each rank a separate process; bus bandwidth = bytes *
// 2(n-1)/n / time, median of the timed iterations (20, or -steps, after a
// warm-up of 5 and at least 100 ms; each timed from a barrier to the slowest
// rank's finish, as Open MPI's figure below is). With mpirun
// on PATH the same is measured through Open MPI (a small C program built with
// mpicc), over shared memory (--mca btl vader,self) and TCP (--mca btl
// tcp,self), and ratios are added; built with -tags mpi, fulgur's mpi backend
// runs under mpirun with vader,self too and is set against plain Open MPI
// shared memory. The physical limit beside each figure: a memcpy row per
// size (one core copying a buffer of that size, in the same run) and each
// backend's of_memcpy, its bus bandwidth over that copy bandwidth.
//
// Placement, the same on both sides ("bind=" in each configuration): when
// the ranks fit the CPUs this process may use, each rank is bound to one
// of them, round robin (fulgur's by taskset, Open MPI's by mpirun --map-by
// core --bind-to core, which is what mpirun does by default for 2 ranks);
// with more ranks than CPUs, or -pin=false, no rank is bound on either
// side (mpirun --bind-to none). mpirun's --report-bindings is checked
// against it.
func init() {
	register(&workload{
		Name:    "allreduce",
		Doc:     "collective bus bandwidth per backend vs Open MPI",
		Configs: allreduceConfigs,
		Setup:   allreduceSetup,
		Run:     allreduceRun,
		Derive:  allreduceDerive,
	})
}

const (
	allreduceWarmup = 5
	allreduceIters  = 20
)

// allreduceWarmTime is the shortest warm-up of a collective's timings,
// on both sides: a Go process's runtime monitor (sysmon), starting work
// after an idle wait (the rendezvous), wakes every 20 µs for its first
// milliseconds and backs off only after 50 wake-ups with nothing to do; on
// a rank bound to one core each wake-up takes the core from the rank
// (12-17 µs a time on this project's 2-core VM, every 0.1 ms for the
// first 5-7 ms, quiet). A training's thousands of all-reduces see the
// steady state; the 25 operations of 256 KiB the old warm-up and timing
// took (about 4 ms) measured the start-up instead (bench/RESULTS.md).
const allreduceWarmTime = 100 * time.Millisecond

var allreduceSizes = []int{256 << 10, 4 << 20, 25 << 20}

// allreduceBackends is extended by allreduce_mpi.go under the mpi tag.
var allreduceBackends = []string{"tcp", "shm"}

// Open MPI transports, named as peers of our backends.
var openMPIPeers = map[string]string{"openmpi-sm": "vader,self", "openmpi-tcp": "tcp,self"}

var peerOf = map[string]string{"shm": "openmpi-sm", "tcp": "openmpi-tcp", "mpi": "openmpi-sm"}

func allreduceConfigs(o *Options) ([]Config, error) {
	_, mpiErr := exec.LookPath("mpirun")
	sizes, rankCounts := allreduceSizes, []int{2, 4}
	if len(o.AllreduceBytes) > 0 {
		sizes = o.AllreduceBytes
	}
	if len(o.Ranks) > 0 {
		rankCounts = o.Ranks
	}
	want := func(b string) bool { return len(o.AllreduceBackends) == 0 || slices.Contains(o.AllreduceBackends, b) }
	if want("mpi") && !mpiBuilt && len(o.AllreduceBackends) > 0 {
		return nil, fmt.Errorf("-backends names mpi, but this bench was built without the mpi tag: go run -tags mpi ./cmd/bench")
	}
	cpus := len(allowedCPUs())
	iters := allreduceIters
	if o.Steps > 0 {
		// -steps: timed operations a run (a training run's thousands
		// against the default's 20 after 5 untimed), on both sides.
		iters = o.Steps
	}
	var cs []Config
	for _, size := range sizes {
		if size < 4 || size%4 != 0 {
			return nil, fmt.Errorf("-bytes has %d: use a positive multiple of 4 (float32 elements)", size)
		}
		// The memory bandwidth the collectives are set against: one
		// process copying a buffer of the same size.
		cs = append(cs, Config{Workload: "allreduce", Impl: "memcpy", Variant: fmt.Sprintf("backend=memcpy bytes=%d", size), Steps: iters, Seed: o.Seed})
		for _, ranks := range rankCounts {
			bind := allreduceBind(o, ranks, cpus)
			for _, b := range allreduceBackends {
				if want(b) {
					cs = append(cs, Config{Workload: "allreduce", Impl: "fulgur", Variant: fmt.Sprintf("backend=%s bytes=%d bind=%s", b, size, bind), Ranks: ranks,
						Pinned: bind == "core", Steps: iters, Seed: o.Seed})
				}
			}
			if mpiErr != nil {
				continue
			}
			if mpiBuilt && want("mpi") {
				// Our mpi backend runs under mpirun, started by one measuring process.
				cs = append(cs, Config{Workload: "allreduce", Impl: "fulgur-mpi", Variant: fmt.Sprintf("backend=mpi bytes=%d ranks=%d bind=%s", size, ranks, bind), Steps: iters, Seed: o.Seed})
			}
			for _, p := range []string{"openmpi-sm", "openmpi-tcp"} {
				if want(p) {
					// One measuring process that runs mpirun itself.
					cs = append(cs, Config{Workload: "allreduce", Impl: "openmpi", Variant: fmt.Sprintf("backend=%s bytes=%d ranks=%d bind=%s", p, size, ranks, bind), Steps: iters, Seed: o.Seed})
				}
			}
		}
	}
	return cs, nil
}

// allreduceBind is the placement of ranks on both sides: "core" (a CPU
// each, round robin) when they fit the cpus and -pin is on, else "none".
func allreduceBind(o *Options, ranks, cpus int) string {
	if o.Pin && ranks <= cpus {
		return "core"
	}
	return "none"
}

// allreduceSetup says, before the runs, where each side's ranks run.
func allreduceSetup(_ context.Context, o *Options) (func() error, error) {
	cpus := allowedCPUs()
	ranks := o.Ranks
	if len(ranks) == 0 {
		ranks = []int{2, 4}
	}
	for _, r := range ranks {
		var how string
		switch {
		case allreduceBind(o, r, len(cpus)) == "core":
			how = fmt.Sprintf("each rank bound to a CPU of its own, round robin over CPUs %v, on both sides (fulgur: taskset; Open MPI: mpirun --map-by core --bind-to core, checked against its --report-bindings)", cpus)
		case !o.Pin:
			how = "no rank bound on either side (-pin=false; Open MPI: mpirun --bind-to none)"
		default:
			how = fmt.Sprintf("more ranks than the %d CPUs: no rank bound on either side (Open MPI: mpirun --bind-to none)", len(cpus))
		}
		fmt.Fprintf(os.Stderr, "bench: allreduce, %d ranks: %s\n", r, how)
	}
	return func() error { return nil }, nil
}

// mpirunBindArgs are mpirun's options for the placement bind ("core" or
// "none"), with the report checkBindings reads.
func mpirunBindArgs(bind string) []string {
	if bind == "core" {
		return []string{"--report-bindings", "--map-by", "core", "--bind-to", "core"}
	}
	return []string{"--report-bindings", "--bind-to", "none"}
}

// checkBindings reads mpirun's --report-bindings (on its stderr) and says
// where it differs from the placement bind asked for ranks ranks: with
// "core" each rank on one core, ranks on different cores while they fit;
// with "none" no rank confined to fewer than all cores.
func checkBindings(report string, ranks int, bind string) error {
	cores := map[int][]int{} // by rank; nil: not bound
	total := 0
	for _, line := range strings.Split(report, "\n") {
		_, rest, ok := strings.Cut(line, "MCW rank ")
		if !ok {
			continue
		}
		numStr, rest, _ := strings.Cut(rest, " ")
		rank, err := strconv.Atoi(numStr)
		if err != nil {
			continue
		}
		cores[rank] = nil
		if strings.HasPrefix(rest, "is not bound") {
			continue
		}
		i := strings.LastIndex(rest, ": ")
		if i < 0 {
			continue
		}
		// The map, one bracket a socket: "[B/.][./.]", one field a core,
		// one character a hardware thread, B where the rank may run.
		core := 0
		for _, socket := range strings.Split(strings.Trim(strings.TrimSpace(rest[i+2:]), "[]"), "][") {
			for _, c := range strings.Split(socket, "/") {
				if strings.Contains(c, "B") {
					cores[rank] = append(cores[rank], core)
				}
				core++
			}
		}
		total = max(total, core)
	}
	var errs []string
	if len(cores) != ranks {
		errs = append(errs, fmt.Sprintf("mpirun --report-bindings reported %d of %d ranks", len(cores), ranks))
	}
	owner := map[int]int{}
	for rank := 0; rank < ranks; rank++ {
		c, ok := cores[rank]
		if !ok {
			continue
		}
		unbound := c == nil || len(c) == total
		switch {
		case bind == "core" && unbound:
			errs = append(errs, fmt.Sprintf("rank %d is not bound", rank))
		case bind == "core" && len(c) != 1:
			errs = append(errs, fmt.Sprintf("rank %d is bound to cores %v, not one", rank, c))
		case bind == "core":
			if o, shared := owner[c[0]]; shared && ranks <= total {
				errs = append(errs, fmt.Sprintf("ranks %d and %d share core %d", o, rank, c[0]))
			}
			owner[c[0]] = rank
		case !unbound:
			errs = append(errs, fmt.Sprintf("rank %d is bound to core(s) %v", rank, c))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("mpirun placed Open MPI's ranks otherwise than bind=%s asks, so the comparison would not be like for like: %s; its report:\n%s", bind, strings.Join(errs, "; "), tail(report, 1000))
	}
	return nil
}

// variant parses "k=v k=v".
func variant(v string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(v) {
		if k, val, ok := strings.Cut(f, "="); ok {
			m[k] = val
		}
	}
	return m
}

func busBW(bytes, ranks int, seconds float64) float64 {
	return float64(bytes) * 2 * float64(ranks-1) / float64(ranks) / seconds / 1e9
}

func iterFigures(bytes, ranks int, times []float64) Figures {
	sort.Float64s(times)
	med := times[len(times)/2]
	return Figures{
		"busbw_gbps":      busBW(bytes, ranks, med),
		"busbw_gbps_best": busBW(bytes, ranks, times[0]),
		"busbw_gbps_wrst": busBW(bytes, ranks, times[len(times)-1]),
		"bytes":           float64(bytes),
		"ms":              med * 1e3,
	}
}

func allreduceRun(ctx context.Context, c Config) (Figures, error) {
	v := variant(c.Variant)
	size, err := strconv.Atoi(v["bytes"])
	if err != nil {
		return nil, fmt.Errorf("allreduce: variant %q has no bytes=N", c.Variant)
	}
	iters := max(c.Steps, 1)
	switch c.Impl {
	case "openmpi":
		ranks, _ := strconv.Atoi(v["ranks"])
		return openMPIAllreduce(ctx, openMPIPeers[v["backend"]], ranks, size, iters, v["bind"])
	case "fulgur-mpi":
		ranks, _ := strconv.Atoi(v["ranks"])
		return mpirunSelf(ctx, c, ranks)
	case "memcpy":
		return memcpyBandwidth(size, iters), nil
	}
	g, err := openBackend(ctx, v["backend"])
	if err != nil {
		return nil, err
	}
	defer func() {
		g.Close()
		if fin := extraFinalize[v["backend"]]; fin != nil {
			fin()
		}
	}()
	times, err := timeAllReduce(ctx, g, size, iters)
	if err != nil || g.Rank() != 0 {
		return nil, err
	}
	return iterFigures(size, g.Size(), times), nil
}

// timeAllReduce times iters all-reduces of size bytes on g, after a
// warm-up, each from a barrier to the slowest rank's finish, in seconds.
func timeAllReduce(ctx context.Context, g collective.Group, size, iters int) ([]float64, error) {
	buf := make([]float32, size/4)
	for i := range buf {
		buf[i] = 1
	}
	return timeCollective(ctx, g, iters, func() error { return g.AllReduce(ctx, buf, collective.Sum) })
}

// timeCollective times op iters times after a warm-up (allreduceWarmup
// operations and allreduceWarmTime, as Open MPI's program does), each
// started together after a barrier: the slowest rank's seconds for each.
func timeCollective(ctx context.Context, g collective.Group, iters int, op func() error) ([]float64, error) {
	// This rank's time for the operation and since the warm-up began; their
	// maxima over the ranks decide the warm-up's end on every rank alike.
	t := []float64{0, 0}
	var times []float64
	warm, warmed := time.Now(), false
	for i := 1; len(times) < iters; i++ {
		if err := g.Barrier(ctx); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := op(); err != nil {
			return nil, err
		}
		t[0], t[1] = time.Since(start).Seconds(), time.Since(warm).Seconds()
		if err := g.AllReduce(ctx, t, collective.Max); err != nil {
			return nil, err
		}
		if warmed {
			times = append(times, t[0])
		}
		warmed = warmed || i >= allreduceWarmup && t[1] >= allreduceWarmTime.Seconds()
	}
	return times, nil
}

// memcpyBandwidth times copy() of size bytes between two buffers, the
// same number of iterations as a collective; its "busbw_gbps" is bytes
// copied per second, the bandwidth one core gets from the memory system
// for a buffer of that size (cache-resident at 256 KB, memory at 25 MB).
func memcpyBandwidth(size, iters int) Figures {
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	var times []float64
	for i := 0; i < allreduceWarmup+iters; i++ {
		start := time.Now()
		copy(dst, src)
		if t := time.Since(start).Seconds(); i >= allreduceWarmup {
			times = append(times, t)
		}
	}
	sort.Float64s(times)
	gbps := func(t float64) float64 { return float64(size) / t / 1e9 }
	return Figures{"busbw_gbps": gbps(times[len(times)/2]), "busbw_gbps_best": gbps(times[0]), "busbw_gbps_wrst": gbps(times[len(times)-1]),
		"bytes": float64(size), "ms": times[len(times)/2] * 1e3}
}

// openBackend builds this rank's group from the launcher's environment.
func openBackend(ctx context.Context, backend string) (collective.Group, error) {
	if open, ok := extraBackends[backend]; ok {
		return open(ctx)
	}
	env, found, err := cluster.Detect(cluster.OSLookup)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("allreduce: no launcher environment (RANK, WORLD_SIZE, ...) found")
	}
	token := os.Getenv(rendezvous.TokenEnv)
	if token == "" {
		// The bench's ranks share only the environment measure() gives
		// them and listen on loopback; a per-run token still keeps other
		// runs' stragglers out.
		token = fmt.Sprintf("bench-%s-%d", env.MasterAddr, env.MasterPort)
	}
	// FULGUR_TLS_CERT, _KEY and _CA turn TLS on, to measure its cost.
	tlsCfg, err := rendezvous.TLSFromEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	cfg := rendezvous.Config{Rank: env.Rank, Size: env.WorldSize, MasterAddr: env.MasterAddr, MasterPort: env.MasterPort,
		Token: token, BindAddr: "127.0.0.1", Timeout: 2 * time.Minute, TLS: tlsCfg}
	if env.Rank == 0 {
		if cfg.Listener, err = launch.InheritedListener(os.LookupEnv); err != nil {
			return nil, err
		}
	}
	if addr := os.Getenv(bindAddrEnv); addr != "" {
		// A rank on one of the scale-out layout's nodes: its node's
		// address, which the other node reaches over the link.
		cfg.BindAddr, cfg.AdvertiseAddr = addr, addr
	}
	rv, err := rendezvous.Meet(ctx, cfg)
	if err != nil {
		return nil, err
	}
	switch backend {
	case "hier":
		// As FULGUR_BACKEND=hier builds it; the scaleout workload runs it
		// on layouts that qualify (2 nodes of 2 ranks or more), so it never
		// falls back to auto there.
		g, err := ddp.ConnectHier(ctx, rv, env.NodeRank, zerolog.Nop())
		if err != nil {
			rv.Close()
		}
		return g, err
	case "shm":
		return shm.New(ctx, rv)
	case "tcp":
		g, err := tcp.NewGroup(ctx, rv)
		if err != nil {
			rv.Close()
		}
		return g, err
	}
	rv.Close()
	return nil, fmt.Errorf("allreduce: unknown backend %q", backend)
}

// bindAddrEnv carries a rank's address on its node (the scale-out
// layout's) to openBackend.
const bindAddrEnv = "FULGUR_BENCH_BIND_ADDR"

// extraBackends holds backends compiled in by build tags (mpi).
var extraBackends = map[string]func(ctx context.Context) (collective.Group, error){}

// extraFinalize shuts a tagged backend down after its group closes.
var extraFinalize = map[string]func() error{}

// mpiBuilt is set by allreduce_mpi.go (build tag mpi).
var mpiBuilt bool

// mpirunSelf runs this binary under mpirun as the ranks of configuration c
// (with Impl "mpi-rank") and returns rank 0's figures.
func mpirunSelf(ctx context.Context, c Config, ranks int) (Figures, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c.Impl = "mpi-rank"
	spec, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	// The transports of the Open MPI row it is set against (openmpi-sm).
	bind := variant(c.Variant)["bind"]
	args := []string{"--oversubscribe", "-np", strconv.Itoa(ranks), "--mca", "btl", openMPIPeers[peerOf["mpi"]]}
	args = append(args, mpirunBindArgs(bind)...)
	args = append(args, "-x", childEnv, exe)
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	cmd := exec.CommandContext(ctx, "mpirun", args...)
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("mpirun %s: %v\n%s", strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	if err := checkBindings(stderr.String(), ranks, bind); err != nil {
		return nil, err
	}
	return lastJSON(stdout.Bytes(), stderr.String())
}

const openMPIProgram = `#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  long bytes = atol(argv[1]);
  int iters = atoi(argv[2]), warm = atoi(argv[3]);
  double warmTime = atof(argv[4]);
  long n = bytes / 4;
  float *b = malloc(bytes);
  for (long i = 0; i < n; i++) b[i] = 1;
  double w0 = MPI_Wtime();
  for (int it = 1, timed = 0, warmed = 0; timed < iters; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t[2] = {MPI_Wtime() - t0, MPI_Wtime() - w0}, tmax[2];
    MPI_Allreduce(t, tmax, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (warmed) {
      timed++;
      if (rank == 0) printf("%.9f\n", tmax[0]);
    }
    warmed = warmed || (it >= warm && tmax[1] >= warmTime);
  }
  MPI_Finalize();
  return 0;
}
`

// openMPIAllreduce compiles the C program with mpicc and runs it under
// mpirun with the given transports, its ranks placed as bind says
// (mpirunBindArgs).
func openMPIAllreduce(ctx context.Context, btl string, ranks, size, iters int, bind string) (Figures, error) {
	dir, err := os.MkdirTemp("", "fulgur-bench-mpi")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src, bin := filepath.Join(dir, "allreduce.c"), filepath.Join(dir, "allreduce")
	if err := os.WriteFile(src, []byte(openMPIProgram), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "mpicc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mpicc (from libopenmpi-dev): %v\n%s", err, out)
	}
	args := []string{"--oversubscribe", "-np", strconv.Itoa(ranks), "--mca", "btl", btl}
	args = append(args, mpirunBindArgs(bind)...)
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	args = append(args, bin, strconv.Itoa(size), strconv.Itoa(iters), strconv.Itoa(allreduceWarmup),
		strconv.FormatFloat(allreduceWarmTime.Seconds(), 'g', -1, 64))
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "mpirun", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("mpirun %s: %v\n%s", strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	if err := checkBindings(stderr.String(), ranks, bind); err != nil {
		return nil, err
	}
	var times []float64
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if t, err := strconv.ParseFloat(strings.TrimSpace(sc.Text()), 64); err == nil {
			times = append(times, t)
		}
	}
	if len(times) != iters {
		return nil, fmt.Errorf("mpirun printed %d timings, want %d:\n%s", len(times), iters, tail(stdout.String(), 500))
	}
	return iterFigures(size, ranks, times), nil
}

// allreduceDerive adds, per size and rank count, each backend's bus
// bandwidth with plain labels (backend, ranks, bytes) and its ratio to the
// Open MPI transport it competes with (shm vs vader, tcp vs tcp), computed
// run by run (runs are interleaved) and summarised as median, min, max.
func allreduceDerive(o *Options, rs []*Result) []Row {
	type key struct {
		backend     string
		bytes, rnks int
	}
	runs := map[key][]float64{}
	binds := map[key]string{}
	for _, r := range rs {
		v := variant(r.Config.Variant)
		size, _ := strconv.Atoi(v["bytes"])
		ranks := r.Config.Ranks
		if n, err := strconv.Atoi(v["ranks"]); err == nil {
			ranks = n
		}
		if v["backend"] == "memcpy" {
			ranks = 0
		}
		runs[key{v["backend"], size, ranks}] = r.figure("busbw_gbps")
		binds[key{v["backend"], size, ranks}] = v["bind"]
	}
	var rows []Row
	var keys []key
	for k := range runs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.bytes != b.bytes {
			return a.bytes < b.bytes
		}
		if a.rnks != b.rnks {
			return a.rnks < b.rnks
		}
		return a.backend < b.backend
	})
	for _, k := range keys {
		bw := runs[k]
		if len(bw) == 0 {
			continue
		}
		row := Row{Workload: "allreduce", Config: fmt.Sprintf("%s ranks=%d bytes=%d", k.backend, k.rnks, k.bytes),
			Labels:  map[string]any{"backend": k.backend, "ranks": k.rnks, "bytes": k.bytes},
			Figures: map[string]Stat{"busbw_gbps": stat(bw)}, N: len(bw)}
		if b := binds[k]; b != "" {
			row.Config += " bind=" + b
			row.Labels["bind"] = b
		}
		if k.backend == "memcpy" {
			row.Config = fmt.Sprintf("memcpy bytes=%d (one core, GB/s copied)", k.bytes)
		} else if mem := runs[key{"memcpy", k.bytes, 0}]; len(mem) > 0 {
			// The fraction of the copy bandwidth a rank reaches: bus
			// bandwidth is the bytes each rank must move per second, so a
			// collective at 1.0 moves data as fast as one memcpy.
			var fr []float64
			for i := 0; i < min(len(bw), len(mem)); i++ {
				fr = append(fr, bw[i]/mem[i])
			}
			row.Figures["of_memcpy"] = stat(fr)
		}
		if p, ok := peerOf[k.backend]; ok {
			if pbw := runs[key{p, k.bytes, k.rnks}]; len(pbw) > 0 {
				var ratios []float64
				for i := 0; i < min(len(bw), len(pbw)); i++ {
					ratios = append(ratios, bw[i]/pbw[i])
				}
				row.Figures["ratio"] = stat(ratios)
				row.Labels["peer"] = p
				row.Config += " vs " + p
				if b := binds[key{p, k.bytes, k.rnks}]; b != "" {
					row.Config += " bind=" + b
				}
			}
		}
		rows = append(rows, row)
	}
	return rows
}
