package blas_test

import (
	"strings"
	"testing"
)

// A PyTorch habit, OMP_NUM_THREADS=2 (or OPENBLAS_NUM_THREADS,
// BLIS_NUM_THREADS), does not set the threads of a multiply here: the plan
// does, and FULGUR_BLAS_THREADS changes it. Choose says so, naming the
// variable, its value and the setting to use, rather than leaving the
// user to believe the BLAS runs 2 threads.
func TestLibraryThreadVariablesAreNamed(t *testing.T) {
	for _, c := range []struct{ kind, env string }{
		{"openblas", "OMP_NUM_THREADS=2"},
		{"openblas", "OPENBLAS_NUM_THREADS=2"},
		{"blis", "BLIS_NUM_THREADS=2"},
	} {
		if c.kind == "blis" {
			blisLib(t)
		} else {
			openBLAS(t)
		}
		kv, log := runChoose(t, "FULGUR_BLAS="+c.kind, c.env)
		if kv["reported"] != "1" {
			t.Errorf("%s with %s: the library runs %s threads, want the plan's 1\n%s", c.kind, c.env, kv["reported"], log)
		}
		for _, want := range []string{c.env, "FULGUR_BLAS_THREADS=2"} {
			if !strings.Contains(log, want) {
				t.Errorf("%s with %s: the log does not say %q:\n%s", c.kind, c.env, want, log)
			}
		}
	}
	// Unset, empty or equal to the plan's count: nothing to say.
	kv, log := runChoose(t, "FULGUR_BLAS=openblas", "OMP_NUM_THREADS=1")
	if strings.Contains(log, "OMP_NUM_THREADS") || kv["reported"] != "1" {
		t.Errorf("OMP_NUM_THREADS=1, the plan's count: %s threads, log\n%s", kv["reported"], log)
	}
}
