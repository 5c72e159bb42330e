package blas_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/blas"
)

// The default plan keeps goroutine workers × BLAS threads within the cores
// given to the process over the local ranks: one BLAS thread, the rest as
// workers. Explicit counts win; the other count takes what remains.
func TestNewPlan(t *testing.T) {
	for _, c := range []struct {
		name                        string
		in                          blas.PlanInput
		cores, budget, work, thread int
	}{
		{"two cores alone", blas.PlanInput{CPUs: 2, GOMAXPROCS: 2}, 2, 2, 2, 1},
		{"one core", blas.PlanInput{CPUs: 1, GOMAXPROCS: 1, LocalRanks: 1}, 1, 1, 1, 1},
		{"GOMAXPROCS lower than the affinity mask", blas.PlanInput{CPUs: 16, GOMAXPROCS: 4}, 4, 4, 4, 1},
		{"GOMAXPROCS above the affinity mask", blas.PlanInput{CPUs: 2, GOMAXPROCS: 8}, 2, 2, 2, 1},
		{"GOMAXPROCS unknown", blas.PlanInput{CPUs: 6}, 6, 6, 6, 1},
		{"two local ranks on 16 cores", blas.PlanInput{CPUs: 16, GOMAXPROCS: 16, LocalRanks: 2}, 16, 8, 8, 1},
		{"more ranks than cores", blas.PlanInput{CPUs: 2, GOMAXPROCS: 2, LocalRanks: 3}, 2, 1, 1, 1},
		{"uneven split", blas.PlanInput{CPUs: 7, GOMAXPROCS: 7, LocalRanks: 2}, 7, 3, 3, 1},
		{"FULGUR_BLAS_THREADS=2 on 8 cores", blas.PlanInput{CPUs: 8, GOMAXPROCS: 8, BLASThreads: 2}, 8, 8, 4, 2},
		{"FULGUR_BLAS_THREADS=3 on 8 cores", blas.PlanInput{CPUs: 8, GOMAXPROCS: 8, BLASThreads: 3}, 8, 8, 2, 3},
		{"FULGUR_BLAS_THREADS above the budget", blas.PlanInput{CPUs: 2, GOMAXPROCS: 2, BLASThreads: 4}, 2, 2, 1, 4},
		{"FULGUR_BLAS_THREADS with 2 ranks", blas.PlanInput{CPUs: 8, GOMAXPROCS: 8, LocalRanks: 2, BLASThreads: 2}, 8, 4, 2, 2},
		{"FULGUR_WORKERS=1 on 4 cores", blas.PlanInput{CPUs: 4, GOMAXPROCS: 4, Workers: 1}, 4, 4, 1, 4},
		{"FULGUR_WORKERS=3 on 4 cores", blas.PlanInput{CPUs: 4, GOMAXPROCS: 4, Workers: 3}, 4, 4, 3, 1},
		{"both explicit", blas.PlanInput{CPUs: 2, GOMAXPROCS: 2, Workers: 2, BLASThreads: 2}, 2, 2, 2, 2},
		// A launcher that bound its 4 local ranks: to a socket of 8 of its
		// 16 cores each, 2 ranks on each (mpirun --bind-to socket); to 4
		// cores each (mpirun --map-by slot:PE=4, srun --cpus-per-task=4).
		{"4 ranks bound by 2 to 8 of 16 cores", blas.PlanInput{CPUs: 8, GOMAXPROCS: 8, LocalRanks: 4, LauncherCPUs: 16}, 8, 4, 4, 1},
		{"4 ranks bound to 4 of 16 cores each", blas.PlanInput{CPUs: 4, GOMAXPROCS: 4, LocalRanks: 4, LauncherCPUs: 16}, 4, 4, 4, 1},
		{"2 ranks bound to 1 of 16 cores each", blas.PlanInput{CPUs: 1, GOMAXPROCS: 1, LocalRanks: 2, LauncherCPUs: 16}, 1, 1, 1, 1},
		// Ranks that inherit the launcher's mask share it
		// (taskset -c 0-3 torchrun --nproc-per-node 4).
		{"4 ranks on the launcher's 4 cores", blas.PlanInput{CPUs: 4, GOMAXPROCS: 4, LocalRanks: 4, LauncherCPUs: 4}, 4, 1, 1, 1},
	} {
		p := blas.NewPlan(c.in)
		if p.Cores != c.cores || p.Budget != c.budget || p.Workers != c.work || p.BLASThreads != c.thread {
			t.Errorf("%s: NewPlan(%+v) = %+v, want %d cores, budget %d, %d workers x %d BLAS threads",
				c.name, c.in, p, c.cores, c.budget, c.work, c.thread)
		}
		if c.in.BLASThreads == 0 && c.in.Workers == 0 && p.Workers*p.BLASThreads > p.Budget {
			t.Errorf("%s: default plan %v oversubscribes its budget of %d cores", c.name, p, p.Budget)
		}
	}
}

func TestPlanString(t *testing.T) {
	for _, c := range []struct {
		in   blas.PlanInput
		want string
	}{
		{blas.PlanInput{CPUs: 2, GOMAXPROCS: 2, LocalRanks: 1}, "2 cores, 1 local rank: 2 workers x 1 BLAS thread"},
		{blas.PlanInput{CPUs: 1, GOMAXPROCS: 1, LocalRanks: 2}, "1 core, 2 local ranks: 1 worker x 1 BLAS thread"},
		{blas.PlanInput{CPUs: 8, GOMAXPROCS: 8, LocalRanks: 4, LauncherCPUs: 16}, "8 cores, 4 local ranks, 2 on these cores (bound by the launcher): 4 workers x 1 BLAS thread"},
		{blas.PlanInput{CPUs: 4, GOMAXPROCS: 4, BLASThreads: 2}, "4 cores, 1 local rank: 2 workers x 2 BLAS threads (FULGUR_BLAS_THREADS)"},
	} {
		if got := blas.NewPlan(c.in).String(); got != c.want {
			t.Errorf("NewPlan(%+v).String() = %q, want %q", c.in, got, c.want)
		}
	}
}

// chooseChild is the child side of the tests below: it runs Choose in a
// fresh process (Choose and the library loads are once per process) and
// prints what the loaded library reports.
func TestMain(m *testing.M) {
	if os.Getenv("FULGUR_BLAS_PLAN_CHILD") == "1" {
		c, err := blas.Choose(zerolog.New(os.Stderr), blas.ChooseOptions{})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		fmt.Printf("impl=%s\nlibrary_threads=%d\nworkers=%d\ncores=%d\n", c.Impl.Name(), blas.Threads(), blas.Workers(), blas.Cores())
		if n, ok := c.Impl.(*blas.Native); ok {
			fmt.Printf("kind=%s\nreported=%d\nthreaded=%v\n", n.Kind(), n.Threads(), n.Threaded())
			fmt.Printf("reported_after_calls=%d\n", threadsAfterCallsElsewhere(n))
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// threadsAfterCallsElsewhere multiplies matrices large enough for the
// library to split them between threads, from goroutines locked to OS
// threads of their own (as the ops' workers run on whatever threads the Go
// scheduler gives them, none of them the thread that set the count), then
// returns the count the library reports. OpenMP OpenBLAS takes each call's
// count from the calling thread's OpenMP setting and keeps it as its own, so
// a count set on one thread only shows here as the default (the cores).
func threadsAfterCallsElsewhere(n *blas.Native) int {
	const size = 192
	a, b := make([]float32, size*size), make([]float32, size*size)
	for i := range a {
		a[i], b[i] = float32(i%7), float32(i%5)
	}
	done := make(chan struct{})
	for range 4 {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			c := make([]float32, size*size)
			n.Sgemm(false, false, size, size, size, 1, a, size, b, size, 0, c, size)
			done <- struct{}{}
		}()
	}
	for range 4 {
		<-done
	}
	return n.Threads()
}

// runChoose runs Choose in a child process with env added and returns its
// key=value lines and its log.
func runChoose(t *testing.T, env ...string) (map[string]string, string) {
	t.Helper()
	return runChooseUnder(t, nil, env...)
}

// runChooseUnder is runChoose with the child started by the command
// prefix (taskset -c 0), which execs it.
func runChooseUnder(t *testing.T, prefix []string, env ...string) (map[string]string, string) {
	t.Helper()
	args := append(append([]string(nil), prefix...), os.Args[0], "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "FULGUR_BLAS_PLAN_CHILD=1")
	// The test's own environment must not fix the counts.
	for _, k := range []string{"FULGUR_BLAS_THREADS", "FULGUR_WORKERS", "BLIS_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS", "LOCAL_WORLD_SIZE"} {
		cmd.Env = append(cmd.Env, k+"=")
	}
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %v: %v\n%s%s", env, err, out, stderr.String())
	}
	kv := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			kv[k] = v
		}
	}
	return kv, stderr.String()
}

// Under the threaded builds Debian installs as the default libraries
// (libblis4-pthread, libopenblas0-pthread), the library itself reports one
// thread by default, and the ops use the process's cores as workers.
func TestDefaultLibraryRunsOneThread(t *testing.T) {
	for _, kind := range []string{"blis", "openblas"} {
		t.Run(kind, func(t *testing.T) {
			if kind == "blis" {
				blisLib(t)
			} else {
				openBLAS(t)
			}
			kv, log := runChoose(t, "FULGUR_BLAS="+kind)
			if kv["kind"] != kind {
				t.Fatalf("FULGUR_BLAS=%s chose %q\n%s", kind, kv["impl"], log)
			}
			if kv["threaded"] != "true" {
				t.Logf("%s is a build without threading: it runs one thread whatever is asked", kv["impl"])
			}
			cores := min(runtime.NumCPU(), runtime.GOMAXPROCS(0))
			if kv["reported_after_calls"] != "1" {
				t.Errorf("%s: after multiplies on other OS threads the library runs %s threads a call, want 1 (the count set must hold on every thread)",
					kv["impl"], kv["reported_after_calls"])
			}
			if kv["reported"] != "1" || kv["workers"] != fmt.Sprint(cores) {
				t.Errorf("%s: the library reports %s threads and ops run %s workers, want 1 thread and %d workers (the process's cores)",
					kv["impl"], kv["reported"], kv["workers"], cores)
			}
			want := fmt.Sprintf("threads: %d cores, 1 local rank: %d workers x 1 BLAS thread", cores, cores)
			if cores == 1 {
				want = "threads: 1 core, 1 local rank: 1 worker x 1 BLAS thread"
			}
			if !strings.Contains(log, want) {
				t.Errorf("log does not say %q:\n%s", want, log)
			}
		})
	}
}

// FULGUR_BLAS_THREADS reaches the library; local ranks announced by a
// launcher split the cores.
func TestChoosePlanFromEnvironment(t *testing.T) {
	openBLAS(t)
	kv, log := runChoose(t, "FULGUR_BLAS=openblas", "FULGUR_BLAS_THREADS=2")
	if kv["reported"] != "2" {
		t.Errorf("FULGUR_BLAS_THREADS=2: %s reports %s threads\n%s", kv["impl"], kv["reported"], log)
	}
	cores := min(runtime.NumCPU(), runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		launcher string
		ranks    int
		env      []string
	}{
		{"mpirun", 4, []string{"OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=4"}},
		{"torchrun", 2, []string{"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"}},
		{"slurm", 3, []string{"SLURM_PROCID=0", "SLURM_NTASKS=6", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NNODES=2",
			"SLURM_TASKS_PER_NODE=3(x2)", "SLURM_JOB_NODELIST=node[1-2]", "SLURM_JOB_ID=7"}},
	} {
		kv, log = runChoose(t, append([]string{"FULGUR_BLAS=gonum"}, c.env...)...)
		want := fmt.Sprint(max(1, cores/c.ranks))
		if kv["cores"] != want || kv["workers"] != want || !strings.Contains(log, fmt.Sprintf("%d local ranks", c.ranks)) {
			t.Errorf("%d local ranks under %s: cores %s, workers %s, want %s each\n%s", c.ranks, c.launcher, kv["cores"], kv["workers"], want, log)
		}
	}
}
