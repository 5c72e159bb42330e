package blas

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/rs/zerolog"
)

// ChooseOptions say how Choose picks the implementation. The zero value
// reads the environment: FULGUR_BLAS ("auto", "blis", "openblas" or
// "gonum"), FULGUR_BLAS_THREADS (threads per multiply; default 1) and
// FULGUR_WORKERS (goroutines running kernels at once; default the cores
// given to the process over the local ranks), and the launcher's local rank
// count (see Plan).
type ChooseOptions struct {
	// Lookup reads configuration variables; nil: os.LookupEnv. Tests inject
	// their own.
	Lookup func(string) (string, bool)
}

// Choice is what Choose selected.
type Choice struct {
	Impl Impl
	// Fallback explains why gonum runs although OpenBLAS was wanted ("" when
	// OpenBLAS runs, or gonum was asked for).
	Fallback string
	// Threads is the library's thread count (0 for gonum).
	Threads int
	// ThreadsFromEnv reports that FULGUR_BLAS_THREADS fixed the count, which
	// SetThreadsPerRank then leaves alone.
	ThreadsFromEnv bool
	// Plan is how the process splits its cores (logged with the choice).
	Plan Plan
	in   PlanInput
	// kind is what FULGUR_BLAS calls Impl (blis, openblas, gonum); "" for
	// the implementation a program installed with Use.
	kind string
}

var (
	chooseMu sync.Mutex
	chosen   *Choice
)

// Choose picks the matrix-multiply implementation for this process, once:
// BLIS or OpenBLAS when the dynamic loader finds them, gonum otherwise (see
// choose for the order), and installs it with Use; an implementation the
// program installed with Use itself stays (FULGUR_BLAS is then ignored,
// with a warning). It logs the choice (and, on fallback, why and what to
// install) on log. Programs call it at start, before any graph runs (the
// trainer calls it when it first sets a module up); later calls return
// the first choice and log nothing, or fail when the configuration now
// asks for something else (another FULGUR_BLAS, FULGUR_BLAS_THREADS or
// FULGUR_WORKERS, set between two trainers), which one process cannot
// give. It fails on a bad FULGUR_BLAS or FULGUR_BLAS_THREADS, when a
// library was demanded but cannot load, or when a multiply already ran on
// another implementation.
func Choose(log zerolog.Logger, o ChooseOptions) (Choice, error) {
	chooseMu.Lock()
	defer chooseMu.Unlock()
	if chosen != nil {
		if err := chosen.conflict(o); err != nil {
			return Choice{}, err
		}
		return *chosen, nil
	}
	var c Choice
	if impl, byProgram := global.program(); byProgram {
		want, in, err := request(o)
		if err != nil {
			return Choice{}, err
		}
		if want != "auto" {
			log.Warn().Str("FULGUR_BLAS", want).Str("blas", impl.Name()).Msg("FULGUR_BLAS is ignored: the program chose the matrix multiply with blas.Use")
		}
		c = Choice{Impl: impl, in: in}
		if t, ok := impl.(threadCounter); ok {
			c.Threads, c.ThreadsFromEnv = t.Threads(), in.BLASThreads > 0
		}
	} else {
		var err error
		if c, err = choose(o, system); err != nil {
			return Choice{}, err
		}
		if err := global.use(c.Impl, false); err != nil {
			if Current().Name() != c.Impl.Name() {
				return Choice{}, err
			}
		}
	}
	ev := log.Info()
	if c.Fallback != "" {
		ev = log.Warn().Str("reason", c.Fallback)
	}
	ev.Str("blas", c.Impl.Name()).Msg("matrix multiply")
	c.Plan = setPlan(c.in)
	log.Info().Msg("threads: " + c.Plan.String())
	if n, ok := c.Impl.(*Native); ok {
		warnLibraryThreadVars(log, o, n.Kind(), c.Plan.BLASThreads, n.Threaded())
	}
	chosen = &c
	return c, nil
}

// warnLibraryThreadVars says which of the library's own thread variables
// (OMP_NUM_THREADS, a PyTorch habit; OPENBLAS_NUM_THREADS, ...) the
// environment sets to a count other than the plan's: the plan sets the
// library's count over them, and FULGUR_BLAS_THREADS is what changes it.
func warnLibraryThreadVars(log zerolog.Logger, o ChooseOptions, kind string, threads int, threaded bool) {
	lookup := o.Lookup
	if lookup == nil {
		lookup = os.LookupEnv
	}
	vars := []string{"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"}
	if kind == "blis" {
		vars = []string{"BLIS_NUM_THREADS", "OMP_NUM_THREADS"}
	}
	for _, k := range vars {
		v, ok := lookup(k)
		n, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case !ok || err != nil || n == threads:
		case !threaded:
			log.Warn().Msgf("%s=%s is not the count of a multiply here: this %s is a build without threading (one thread a multiply whatever is asked); install its threaded build and set FULGUR_BLAS_THREADS=%d to ask for %d", k, v, kind, n, n)
		default:
			log.Warn().Msgf("%s=%s is not the count of a multiply here: fulgur sets %s's to the plan's %d (the threads line); set FULGUR_BLAS_THREADS=%d to ask for %d", k, v, kind, threads, n, n)
		}
	}
}

// conflict is the error of a later Choose whose configuration asks for
// another implementation or explicit counts than c was made with: the
// process runs one BLAS, chosen at its first trainer.
func (c *Choice) conflict(o ChooseOptions) error {
	want, in, err := request(o)
	if err != nil {
		return err
	}
	first := NewPlan(c.in)
	var asks []string
	if want != "auto" && c.kind != "" && want != c.kind {
		asks = append(asks, "FULGUR_BLAS is "+want)
	}
	if in.BLASThreads > 0 && in.BLASThreads != first.BLASThreads {
		asks = append(asks, fmt.Sprintf("FULGUR_BLAS_THREADS is %d", in.BLASThreads))
	}
	if in.Workers > 0 && in.Workers != first.Workers {
		asks = append(asks, fmt.Sprintf("FULGUR_WORKERS is %d", in.Workers))
	}
	if len(asks) == 0 {
		return nil
	}
	return fmt.Errorf("%s, but this process chose the matrix multiply at its first trainer (blas.Choose): %s, %s; the BLAS and its counts are chosen once per process: set them before the first trainer, or run each configuration in a process of its own", strings.Join(asks, ", "), c.Impl.Name(), first)
}

// loaders load the run-time libraries for n threads; tests replace them.
type loaders struct {
	openblas, blis func(threads int) (*Native, error)
}

var system = loaders{openblas: loadOpenBLASFor, blis: loadBLISFor}

// loadOpenBLASFor loads OpenBLAS for n threads. Unless the environment sets
// a count already, OPENBLAS_NUM_THREADS is set while it loads, so that
// OpenBLAS starts only the worker threads it will use (it reads the
// variable when loaded; a single-thread rank then has no idle workers).
// SetThreads can still raise the count later: OpenBLAS starts more workers
// on demand.
func loadOpenBLASFor(n int) (*Native, error) {
	if !anySet("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS") {
		defer setWhileLoading("OPENBLAS_NUM_THREADS", strconv.Itoa(n))()
	}
	return LoadOpenBLAS()
}

// loadBLISFor loads BLIS for n threads (its kernel choice: blisConfig).
func loadBLISFor(n int) (*Native, error) {
	if !anySet("BLIS_NUM_THREADS", "OMP_NUM_THREADS") {
		defer setWhileLoading("BLIS_NUM_THREADS", strconv.Itoa(n))()
	}
	return LoadBLIS()
}

// setWhileLoading sets the unset variable key, which a library reads when
// it is loaded and initialised, and returns what unsets it again: the
// program's environment, which its child processes inherit (another
// build of BLIS would read BLIS_ARCH_TYPE as another configuration), is
// left as it was.
func setWhileLoading(key, value string) (unset func()) {
	os.Setenv(key, value)
	return func() { os.Unsetenv(key) }
}

func anySet(keys ...string) bool {
	for _, k := range keys {
		if _, ok := os.LookupEnv(k); ok {
			return true
		}
	}
	return false
}

// request is what the configuration asks Choose for: the implementation
// (FULGUR_BLAS: auto, blis, openblas or gonum) and the plan's input.
func request(o ChooseOptions) (want string, in PlanInput, err error) {
	lookup := o.Lookup
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var errs []error
	want = "auto"
	if v, ok := lookup("FULGUR_BLAS"); ok && v != "" {
		want = strings.ToLower(strings.TrimSpace(v))
		switch want {
		case "auto", "openblas", "blis", "gonum":
		default:
			errs = append(errs, fmt.Errorf("FULGUR_BLAS is %q: use auto, blis, openblas or gonum", v))
		}
	}
	in, err = planInputFromEnv(lookup)
	if err != nil {
		errs = append(errs, err)
	}
	return want, in, errors.Join(errs...)
}

func choose(o ChooseOptions, ld loaders) (Choice, error) {
	want, in, err := request(o)
	if err != nil {
		return Choice{}, err
	}
	threads, fromEnv := NewPlan(in).BLASThreads, in.BLASThreads > 0
	if want == "gonum" {
		return Choice{Impl: Gonum{}, in: in, kind: "gonum"}, nil
	}
	// auto: BLIS first (its small-matrix kernels run the multiplies of
	// training steps 1.4-2x faster than OpenBLAS 0.3.21 on the mlp shapes,
	// BenchmarkMLPShapes); then OpenBLAS; then gonum. Whatever the build
	// (serial or threaded), the default plan asks it for one thread and
	// runs Workers goroutines, each multiplying on its own (nn/ops splits a
	// convolution's batch that way), which beat OpenBLAS's threads on
	// resnet8 (about 1,400 against 880 samples/s on two cores). Only an
	// explicit FULGUR_BLAS_THREADS above what the build gives passes a
	// serial BLIS over for OpenBLAS.
	var tried []string
	for _, kind := range []string{"blis", "openblas"} {
		if want != "auto" && want != kind {
			continue
		}
		load := ld.openblas
		if kind == "blis" {
			load = ld.blis
		}
		lib, err := load(threads)
		if err != nil {
			if want == kind {
				return Choice{}, fmt.Errorf("FULGUR_BLAS is %s: %w", kind, err)
			}
			tried = append(tried, err.Error())
			continue
		}
		if err := lib.SetThreads(threads); err != nil {
			return Choice{}, err
		}
		if got := lib.Threads(); got != threads && want == "auto" && kind == "blis" && fromEnv {
			tried = append(tried, fmt.Sprintf("%s runs %d thread(s), %d asked for", lib.Name(), got, threads))
			continue
		}
		return Choice{Impl: lib, Threads: lib.Threads(), ThreadsFromEnv: fromEnv, in: in, kind: kind}, nil
	}
	return Choice{Impl: Gonum{}, Fallback: strings.Join(tried, "; ") + "; running the pure-Go gonum BLAS", in: in, kind: "gonum"}, nil
}

// threader is an implementation whose thread count can change.
type threader interface{ SetThreads(n int) error }

// SetThreads sets the thread count of the implementation in use when it has
// one (OpenBLAS); gonum's parallelism is not adjustable and it returns nil.
func SetThreads(n int) error {
	if n < 1 {
		return fmt.Errorf("blas: thread count %d: use 1 or more", n)
	}
	if t, ok := Current().(threader); ok {
		return t.SetThreads(n)
	}
	return nil
}

// SetThreadsPerRank shares the cores given to the process between
// localRanks processes (or in-process replicas) running kernels at once:
// the plan (see Plan) is made again for that many local ranks, keeping
// FULGUR_BLAS_THREADS and FULGUR_WORKERS, and the library is set to the
// plan's BLAS thread count. It is the process's own count from then on:
// a share that ends with a strategy is ShareCores. It returns the BLAS
// thread count now in force (0 for gonum).
func SetThreadsPerRank(localRanks int) (int, error) {
	if localRanks < 1 {
		return 0, fmt.Errorf("blas: %d local ranks: use 1 or more", localRanks)
	}
	sharesMu.Lock()
	defer sharesMu.Unlock()
	baseRanks = localRanks
	return applyShares()
}

// The shares in force (ShareCores), by id, and the local ranks of the
// process itself (the launcher's, or SetThreadsPerRank's; 0: the plan's
// own) that they are made over.
var (
	sharesMu  sync.Mutex
	shares    = map[uint64]int{}
	nextShare uint64
	baseRanks int
)

// ShareCores shares the cores given to the process between localRanks
// replicas running kernels at once (dp's replicas, in-process ranks), as
// SetThreadsPerRank does, until release is called: then the plan is the
// process's own again. Without the release, a program that trains on dp
// and then on one device would run the second on its share of the cores
// (and, with a different worker count, to other bits). Shares in force at
// once (trainers running in parallel) plan for the largest. Strategies
// call it at Setup and release at Teardown. It returns the BLAS thread
// count now in force (0 for gonum); release may be called more than once.
func ShareCores(localRanks int) (threads int, release func(), err error) {
	if localRanks < 1 {
		return 0, nil, fmt.Errorf("blas: %d local ranks: use 1 or more", localRanks)
	}
	sharesMu.Lock()
	defer sharesMu.Unlock()
	nextShare++
	id := nextShare
	shares[id] = localRanks
	if threads, err = applyShares(); err != nil {
		delete(shares, id)
		return 0, nil, err
	}
	var once sync.Once
	return threads, func() {
		once.Do(func() {
			sharesMu.Lock()
			defer sharesMu.Unlock()
			delete(shares, id)
			applyShares() // the count applied before worked: so does this one
		})
	}, nil
}

// applyShares makes the plan for the largest share in force, or the
// process's own local ranks without one, and sets the library's thread
// count to it. sharesMu is held.
func applyShares() (int, error) {
	planMu.Lock()
	in := planIn
	if planSet == nil {
		in = PlanInput{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), LocalRanks: 1}
	}
	planMu.Unlock()
	ranks := baseRanks
	if ranks == 0 {
		ranks = chosenRanks()
	}
	for _, n := range shares {
		ranks = max(ranks, n)
	}
	in.LocalRanks = ranks
	p := setPlan(in)
	t, ok := Current().(threader)
	if !ok {
		return 0, nil
	}
	if err := t.SetThreads(p.BLASThreads); err != nil {
		return 0, err
	}
	chooseMu.Lock()
	if chosen != nil {
		chosen.Threads, chosen.Plan = p.BLASThreads, p
	}
	chooseMu.Unlock()
	return p.BLASThreads, nil
}

// chosenRanks is the local ranks Choose planned for (the launcher's), or
// one before Choose.
func chosenRanks() int {
	chooseMu.Lock()
	defer chooseMu.Unlock()
	if chosen != nil {
		return max(1, chosen.in.LocalRanks)
	}
	return 1
}

// Cores is how many cores this process (or each of its in-process replicas)
// may keep busy: the plan's Budget, the cores given to the process over the
// local ranks. Code that runs multiplies on several goroutines at once uses
// Workers() of them, so that goroutines × BLAS threads stay within it.
func Cores() int { return CurrentPlan().Budget }
