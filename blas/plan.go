package blas

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
)

// Plan is how a process splits the cores it was given between the
// goroutines that run kernels at once (nn/ops splits each convolution's
// batch and each elementwise loop between them, every part calling the BLAS
// on its own) and the threads the BLAS runs each multiply on.
//
// By default Workers × BLASThreads never exceeds Budget, the cores given to
// the process divided between the ranks on this machine: a threaded BLAS
// (libblis4-pthread, libopenblas0-pthread) next to goroutines that also
// multiply competes with them for the cores, and its threads spin at
// barriers, which on a loaded machine cost 8-30x. The default runs one BLAS
// thread and Budget workers: splitting the batch scales better than a
// threaded multiply on training's small matrices. FULGUR_BLAS_THREADS and
// FULGUR_WORKERS set either count explicitly; an explicit count may exceed
// the budget, the other one then drops to what remains.
//
// A launcher that binds each rank to cores of its own (mpirun's
// --bind-to and --map-by ...:PE=n, srun's --cpu-bind, numactl in a
// wrapper) gives each a mask narrower than its own: the local ranks spread
// over the launcher's cores, and only those on this rank's share them
// (SharedBy), where ranks that inherit the launcher's mask (torchrun,
// fulgur run, ddp_spawn) all share it.
type Plan struct {
	Cores      int // cores given to the process (affinity mask, GOMAXPROCS if lower)
	LocalRanks int // processes or in-process replicas on this machine
	// SharedBy is how many of the LocalRanks share Cores: all of them,
	// unless the launcher bound each to cores of its own (see
	// PlanInput.LauncherCPUs).
	SharedBy    int
	Budget      int  // Cores / SharedBy, at least 1
	Workers     int  // goroutines that run kernels at once
	BLASThreads int  // threads per multiply
	ThreadsSet  bool // FULGUR_BLAS_THREADS fixed BLASThreads
	WorkersSet  bool // FULGUR_WORKERS fixed Workers
}

// PlanInput is what a Plan is made from; NewPlan is a pure function of it.
type PlanInput struct {
	CPUs       int // cores in the affinity mask (runtime.NumCPU)
	GOMAXPROCS int // runtime.GOMAXPROCS(0); the lower of the two counts
	LocalRanks int // ranks on this machine (0 or 1: alone)
	// LauncherCPUs is the cores in the affinity mask of the process that
	// started this one, read where a launcher announced local ranks; 0:
	// unknown, taken as CPUs. A mask narrower than the launcher's was bound
	// to this rank: the LocalRanks spread over the launcher's cores, so
	// LocalRanks × CPUs / LauncherCPUs of them (rounded up) share it
	// (cluster.SharingRanks).
	LauncherCPUs int
	// BLASThreads and Workers are explicit counts (FULGUR_BLAS_THREADS,
	// FULGUR_WORKERS); 0 leaves them to the plan.
	BLASThreads, Workers int
}

// NewPlan makes the plan for in (see Plan).
func NewPlan(in PlanInput) Plan {
	cores := max(1, in.CPUs)
	if in.GOMAXPROCS > 0 {
		cores = min(cores, in.GOMAXPROCS)
	}
	p := Plan{Cores: cores, LocalRanks: max(1, in.LocalRanks)}
	p.SharedBy = cluster.SharingRanks(p.LocalRanks, in.CPUs, in.LauncherCPUs)
	p.Budget = max(1, cores/p.SharedBy)
	p.BLASThreads, p.ThreadsSet = 1, in.BLASThreads > 0
	if p.ThreadsSet {
		p.BLASThreads = in.BLASThreads
	}
	p.Workers, p.WorkersSet = max(1, p.Budget/p.BLASThreads), in.Workers > 0
	if p.WorkersSet {
		p.Workers = in.Workers
		if !p.ThreadsSet {
			p.BLASThreads = max(1, p.Budget/p.Workers)
		}
	}
	return p
}

// String is the plan as logged at start: "2 cores, 1 local rank: 2 workers
// x 1 BLAS thread".
func (p Plan) String() string {
	plural := func(n int, unit string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, unit)
		}
		return fmt.Sprintf("%d %ss", n, unit)
	}
	ranks := plural(p.LocalRanks, "local rank")
	if p.SharedBy > 0 && p.SharedBy != p.LocalRanks {
		ranks += fmt.Sprintf(", %d on these cores (bound by the launcher)", p.SharedBy)
	}
	s := fmt.Sprintf("%s, %s: %s x %s", plural(p.Cores, "core"), ranks,
		plural(p.Workers, "worker"), plural(p.BLASThreads, "BLAS thread"))
	var set []string
	if p.WorkersSet {
		set = append(set, "FULGUR_WORKERS")
	}
	if p.ThreadsSet {
		set = append(set, "FULGUR_BLAS_THREADS")
	}
	if len(set) > 0 {
		s += " (" + strings.Join(set, ", ") + ")"
	}
	return s
}

// planInputFromEnv reads the explicit counts and the local ranks the
// launcher announces (torchrun's LOCAL_WORLD_SIZE, mpirun's
// OMPI_COMM_WORLD_LOCAL_SIZE, SLURM's tasks per node), and then the
// launcher's affinity mask (the parent process's). A malformed
// launcher environment counts as one rank here: the strategy reports it.
func planInputFromEnv(lookup func(string) (string, bool)) (PlanInput, error) {
	in := PlanInput{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), LocalRanks: 1}
	if e, ok, err := cluster.Detect(cluster.Lookup(lookup)); ok && err == nil && e.LocalWorldSize > 0 {
		in.LocalRanks = e.LocalWorldSize
		if in.LocalRanks > 1 {
			in.LauncherCPUs = cluster.LauncherCPUs()
		}
	}
	var err error
	if in.BLASThreads, err = count(lookup, "FULGUR_BLAS_THREADS", "threads"); err != nil {
		return in, err
	}
	if in.Workers, err = count(lookup, "FULGUR_WORKERS", "goroutine workers"); err != nil {
		return in, err
	}
	return in, nil
}

// count reads a positive count from key (0 when unset or empty).
func count(lookup func(string) (string, bool), key, what string) (int, error) {
	v, ok := lookup(key)
	if !ok || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s is %q: use a whole number of %s, 1 or more (unset: the default plan)", key, v, what)
	}
	return n, nil
}

var (
	planMu  sync.Mutex
	planSet *Plan // the plan in force; nil: the default for this process
	planIn  PlanInput
)

// CurrentPlan is the plan in force: the one Choose made (and
// SetThreadsPerRank changed), or before Choose runs, the default for this
// process alone with no explicit counts.
func CurrentPlan() Plan {
	planMu.Lock()
	defer planMu.Unlock()
	if planSet != nil {
		return *planSet
	}
	return NewPlan(PlanInput{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), LocalRanks: 1})
}

func setPlan(in PlanInput) Plan {
	planMu.Lock()
	defer planMu.Unlock()
	p := NewPlan(in)
	planIn, planSet = in, &p
	return p
}

// Workers is how many goroutines may run kernels (each calling the BLAS on
// its own) at once: the plan's Workers.
func Workers() int { return CurrentPlan().Workers }
