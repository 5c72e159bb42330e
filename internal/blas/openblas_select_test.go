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

func absent(int) (*OpenBLAS, error) { return nil, ErrNoOpenBLAS }

func load(int) (*OpenBLAS, error) { return LoadOpenBLAS() }

func TestChooseWithoutOpenBLAS(t *testing.T) {
	cases := []struct {
		name     string
		lookup   func(string) (string, bool)
		impl     string
		fallback string // substring of Choice.Fallback; "" for none
		err      string // substring of the error; "" for success
	}{
		{"auto falls back", env(), "gonum", "install it", ""},
		{"gonum asked for", env("FULGUR_BLAS", "gonum"), "gonum", "", ""},
		{"openblas demanded", env("FULGUR_BLAS", "openblas"), "", "", "FULGUR_BLAS is openblas: blas: OpenBLAS not found"},
		{"bad name", env("FULGUR_BLAS", "mkl"), "", "", `FULGUR_BLAS is "mkl": use auto, openblas or gonum`},
		{"bad threads", env("FULGUR_BLAS_THREADS", "two"), "", "", `FULGUR_BLAS_THREADS is "two"`},
		{"zero threads", env("FULGUR_BLAS_THREADS", "0"), "", "", `FULGUR_BLAS_THREADS is "0"`},
		{"every problem at once", env("FULGUR_BLAS", "x", "FULGUR_BLAS_THREADS", "-1"), "", "", "FULGUR_BLAS_THREADS is \"-1\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := choose(ChooseOptions{Lookup: c.lookup}, absent)
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

func TestChooseOpenBLASThreads(t *testing.T) {
	if _, err := LoadOpenBLAS(); errors.Is(err, ErrNoOpenBLAS) {
		t.Skip(err)
	}
	cases := []struct {
		lookup  func(string) (string, bool)
		threads int
		fromEnv bool
	}{
		{env(), runtime.GOMAXPROCS(0), false},
		{env("FULGUR_BLAS_THREADS", "1"), 1, true},
		{env("FULGUR_BLAS", "openblas", "FULGUR_BLAS_THREADS", " 3 "), 3, true},
	}
	for _, c := range cases {
		got, err := choose(ChooseOptions{Lookup: c.lookup}, load)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := got.Impl.(*OpenBLAS)
		if !ok || got.Threads != c.threads || got.ThreadsFromEnv != c.fromEnv || o.Threads() != c.threads {
			t.Errorf("choice %+v (library threads %d), want OpenBLAS with %d threads, from env %v", got, o.Threads(), c.threads, c.fromEnv)
		}
		if !strings.HasPrefix(o.Name(), "openblas (") {
			t.Errorf("Name() = %q", o.Name())
		}
	}
}
