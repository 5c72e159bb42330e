package blas

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func absentOpenBLAS(int) (*Native, error) { return nil, ErrNoOpenBLAS }
func absentBLIS(int) (*Native, error)     { return nil, ErrNoBLIS }

var none = loaders{openblas: absentOpenBLAS, blis: absentBLIS}

func TestChooseWithoutLibraries(t *testing.T) {
	cases := []struct {
		name     string
		lookup   func(string) (string, bool)
		impl     string
		fallback string // substring of Choice.Fallback; "" for none
		err      string // substring of the error; "" for success
	}{
		{"auto falls back", env(), "gonum", "OpenBLAS not found", ""},
		{"gonum asked for", env("FULGUR_BLAS", "gonum"), "gonum", "", ""},
		{"openblas demanded", env("FULGUR_BLAS", "openblas"), "", "", "FULGUR_BLAS is openblas: blas: OpenBLAS not found"},
		{"blis demanded", env("FULGUR_BLAS", "BLIS"), "", "", "FULGUR_BLAS is blis: blas: BLIS not found"},
		{"bad name", env("FULGUR_BLAS", "mkl"), "", "", `FULGUR_BLAS is "mkl": use auto, blis, openblas or gonum`},
		{"bad threads", env("FULGUR_BLAS_THREADS", "two"), "", "", `FULGUR_BLAS_THREADS is "two"`},
		{"zero threads", env("FULGUR_BLAS_THREADS", "0"), "", "", `FULGUR_BLAS_THREADS is "0"`},
		{"every problem at once", env("FULGUR_BLAS", "x", "FULGUR_BLAS_THREADS", "-1"), "", "", "FULGUR_BLAS_THREADS is \"-1\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := choose(ChooseOptions{Lookup: c.lookup}, none)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Impl.Name() != c.impl {
				t.Errorf("impl = %q, want %q", got.Impl.Name(), c.impl)
			}
			if (c.fallback == "") != (got.Fallback == "") || !strings.Contains(got.Fallback, c.fallback) {
				t.Errorf("fallback = %q, want one containing %q", got.Fallback, c.fallback)
			}
		})
	}
}

// With the real libraries (skipped where neither is installed): the order
// is BLIS, then OpenBLAS, the thread count is set, and a single-threaded
// BLIS build gives way to OpenBLAS when more threads are asked for.
func TestChooseLibraries(t *testing.T) {
	_, errB := loadBLISFor(1)
	_, errO := LoadOpenBLAS()
	if errB != nil && errO != nil {
		t.Skipf("neither BLIS (%v) nor OpenBLAS (%v) loads", errB, errO)
	}
	real := loaders{openblas: func(int) (*Native, error) { return LoadOpenBLAS() }, blis: loadBLISFor}
	cases := []struct {
		lookup  func(string) (string, bool)
		kinds   []string // acceptable kinds
		threads int
		fromEnv bool
	}{
		{env("FULGUR_BLAS_THREADS", "1"), []string{"blis", "openblas"}, 1, true},
		{env("FULGUR_BLAS", "openblas", "FULGUR_BLAS_THREADS", " 3 "), []string{"openblas"}, 3, true},
		{env("FULGUR_BLAS", "auto", "FULGUR_BLAS_THREADS", "2"), []string{"blis", "openblas"}, 2, true},
	}
	if errB != nil {
		cases[0].kinds = []string{"openblas"}
	}
	for _, c := range cases {
		if errO != nil && c.kinds[0] == "openblas" && len(c.kinds) == 1 {
			continue
		}
		got, err := choose(ChooseOptions{Lookup: c.lookup}, real)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := got.Impl.(*Native)
		if !ok {
			t.Fatalf("choice %+v, want a run-time library", got)
		}
		if !strings.Contains(strings.Join(c.kinds, " "), n.Kind()) || got.Threads != c.threads || got.ThreadsFromEnv != c.fromEnv || n.Threads() != c.threads {
			t.Errorf("choice %s with %d threads (from env %v), want one of %v with %d", n.Name(), got.Threads, got.ThreadsFromEnv, c.kinds, c.threads)
		}
		if !strings.HasPrefix(n.Name(), n.Kind()+" (") {
			t.Errorf("Name() = %q", n.Name())
		}
	}
}

// Without FULGUR_BLAS_THREADS, auto keeps BLIS even when its build runs one
// thread (the ops then split their work over Cores()/Threads()
// goroutines); an explicit count above the build's passes it over.
func TestChooseKeepsBLISByDefault(t *testing.T) {
	if _, err := loadBLISFor(1); err != nil {
		t.Skip(err)
	}
	real := loaders{openblas: func(int) (*Native, error) { return LoadOpenBLAS() }, blis: loadBLISFor}
	got, err := choose(ChooseOptions{Lookup: env()}, real)
	if err != nil {
		t.Fatal(err)
	}
	n, ok := got.Impl.(*Native)
	if !ok || n.Kind() != "blis" || got.ThreadsFromEnv || got.Threads != n.Threads() || got.Threads < 1 {
		t.Errorf("choice %+v, want BLIS at its own thread count, not from the environment", got)
	}
}

func TestChooseDefaultThreads(t *testing.T) {
	if _, err := LoadOpenBLAS(); errors.Is(err, ErrNoOpenBLAS) {
		t.Skip(err)
	}
	got, err := choose(ChooseOptions{Lookup: env("FULGUR_BLAS", "openblas")}, loaders{openblas: func(int) (*Native, error) { return LoadOpenBLAS() }})
	if err != nil {
		t.Fatal(err)
	}
	// One thread: the goroutines of nn/ops use the rest of the cores.
	if got.Threads != 1 || got.ThreadsFromEnv {
		t.Errorf("threads %d (from env %v), want 1", got.Threads, got.ThreadsFromEnv)
	}
}

// SetThreadsPerRank divides the core budget that Cores reports between the
// local ranks, whatever the implementation (gonum here) does with threads.
func TestSetThreadsPerRankSharesCores(t *testing.T) {
	planMu.Lock()
	oldSet, oldIn := planSet, planIn
	planSet = nil
	planMu.Unlock()
	defer func() { planMu.Lock(); planSet, planIn = oldSet, oldIn; planMu.Unlock() }()
	procs := min(runtime.NumCPU(), runtime.GOMAXPROCS(0))
	if got := Cores(); got != procs {
		t.Fatalf("Cores() = %d before any split, want GOMAXPROCS %d", got, procs)
	}
	for _, c := range []struct{ ranks, want int }{{1, procs}, {2, max(1, procs/2)}, {procs + 1, 1}} {
		if _, err := SetThreadsPerRank(c.ranks); err != nil {
			t.Fatal(err)
		}
		if got := Cores(); got != c.want {
			t.Errorf("after SetThreadsPerRank(%d): Cores() = %d, want %d", c.ranks, got, c.want)
		}
	}
	if _, err := SetThreadsPerRank(0); err == nil {
		t.Error("SetThreadsPerRank(0) succeeded")
	}
	if got := Cores(); got != 1 {
		t.Errorf("a rejected SetThreadsPerRank changed Cores() to %d", got)
	}
}

// A BLIS build without threading reports one thread whatever count is set
// (bli_thread_get_num_threads echoes the count back); a threaded build
// reports the count.
func TestBLISThreadsOfItsBuild(t *testing.T) {
	lib, err := LoadBLIS()
	if err != nil {
		t.Skip(err)
	}
	defer func() { _ = lib.SetThreads(1) }()
	if err := lib.SetThreads(3); err != nil {
		t.Fatal(err)
	}
	want := 3
	if !lib.Threaded() {
		want = 1
	}
	if got := lib.Threads(); got != want {
		t.Errorf("%s (serial build %v) after SetThreads(3): Threads() = %d, want %d", lib.Name(), !lib.Threaded(), got, want)
	}
}

// A bad explicit count is an error naming the variable, the value and the
// fix.
func TestChooseBadCounts(t *testing.T) {
	for _, kv := range [][2]string{{"FULGUR_WORKERS", "lots"}, {"FULGUR_WORKERS", "0"}, {"FULGUR_BLAS_THREADS", "-1"}} {
		_, err := choose(ChooseOptions{Lookup: env("FULGUR_BLAS", "gonum", kv[0], kv[1])}, none)
		if err == nil || !strings.Contains(err.Error(), kv[0]+` is "`+kv[1]+`"`) || !strings.Contains(err.Error(), "1 or more") {
			t.Errorf("%s=%s: error %v", kv[0], kv[1], err)
		}
	}
}
