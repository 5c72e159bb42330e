package blas

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// The conformance suite runs from blastest's own test (it imports this
// package); here: argument checking, the k == 0 path and the once-only rule.

func TestSgemmKZeroScalesC(t *testing.T) {
	c := []float32{1, 2, 3, 4}
	Sgemm(false, false, 2, 2, 0, 1, nil, 1, nil, 2, 3, c, 2)
	want := []float32{3, 6, 9, 12}
	for i := range c {
		if c[i] != want[i] {
			t.Fatalf("c = %v, want %v", c, want)
		}
	}
	d := []float64{1, 2}
	Dgemm(false, false, 1, 2, 0, 1, nil, 1, nil, 2, 0, d, 2)
	if d[0] != 0 || d[1] != 0 {
		t.Fatalf("beta 0 must clear c, got %v", d)
	}
}

func TestGemmChecksArguments(t *testing.T) {
	cases := []struct {
		name string
		call func()
		want string
	}{
		{"short a", func() {
			Sgemm(false, false, 2, 2, 3, 1, make([]float32, 5), 3, make([]float32, 6), 2, 0, make([]float32, 4), 2)
		}, "gemm a is 2×3 with leading dimension 3 but has 5 elements"},
		{"narrow ldb", func() {
			Dgemm(false, true, 2, 4, 3, 1, make([]float64, 6), 3, make([]float64, 12), 2, 0, make([]float64, 8), 4)
		}, "gemm b is 4×3 but its leading dimension is 2"},
		{"short c", func() {
			Dgemm(false, false, 2, 2, 1, 1, make([]float64, 2), 1, make([]float64, 2), 2, 0, make([]float64, 3), 2)
		}, "gemm c is 2×2 with leading dimension 2 but has 3 elements"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(r.(string), c.want) {
					t.Fatalf("panic = %v, want one containing %q", r, c.want)
				}
			}()
			c.call()
		})
	}
}

type fake struct{ Gonum }

func (fake) Name() string { return "fake" }

func TestUseOnlyBeforeFirstMultiply(t *testing.T) {
	s := &selector{impl: Gonum{}}
	if err := s.use(nil, true); err == nil {
		t.Fatal("use(nil) succeeded")
	}
	if err := s.use(fake{}, true); err != nil {
		t.Fatalf("use before start: %v", err)
	}
	if got := s.get().Name(); got != "fake" {
		t.Fatalf("after use(fake), get().Name() = %q", got)
	}
	if err := s.use(Gonum{}, true); !errors.Is(err, ErrStarted) {
		t.Fatalf("use after the first multiply = %v, want ErrStarted", err)
	}
	if got := s.get().Name(); got != "fake" {
		t.Fatalf("a refused use changed the implementation to %q", got)
	}
}

func TestDefaultIsGonum(t *testing.T) {
	if got := Current().Name(); got != "gonum" {
		t.Fatalf("default implementation is %q, want gonum", got)
	}
}

type threaded struct {
	Gonum
	n int
}

func (t threaded) Threads() int { return t.n }

func TestThreads(t *testing.T) {
	s := &selector{impl: threaded{n: 3}}
	old := global
	global = s
	defer func() { global = old }()
	if got := Threads(); got != 3 {
		t.Fatalf("Threads() = %d with a 3-thread implementation", got)
	}
	global = &selector{impl: Gonum{}}
	if got := Threads(); got != runtime.GOMAXPROCS(0) {
		t.Fatalf("Threads() = %d for gonum, want GOMAXPROCS %d", got, runtime.GOMAXPROCS(0))
	}
}
