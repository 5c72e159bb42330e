package blas

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// Impl is one implementation of the two matrix multiplies fulgur needs.
//
// Both compute c = alpha·op(a)·op(b) + beta·c on row-major matrices, where
// op(a) is m×k (a itself, or aᵀ when transA), op(b) is k×n and c is m×n.
// Implementations may assume the arguments were checked by this package.
type Impl interface {
	// Name says which implementation this is, for start-up logs
	// ("gonum", "openblas 0.3.21 (1 thread)").
	Name() string
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int)
}

// selector holds the process-wide choice; a type so tests can exercise the
// once-only rule on a fresh one.
type selector struct {
	mu      sync.Mutex
	impl    Impl
	started atomic.Bool // set by the first multiply; after it, use refuses
	// byProgram: impl was installed by the program's Use, which Choose
	// then leaves in place.
	byProgram bool
}

var global = &selector{impl: Gonum{}}

// ErrStarted is returned by Use once a multiply has run.
var ErrStarted = errors.New("blas: Use was called after the first matrix multiply: choose the implementation at program start")

// Use selects the implementation every later multiply runs on. Call it once,
// at program start, before any graph runs; once a multiply has run it returns
// ErrStarted and changes nothing, so results never depend on a swap midway.
func Use(impl Impl) error { return global.use(impl, true) }

// Current is the implementation in use; its Name is what programs log.
func Current() Impl {
	global.mu.Lock()
	defer global.mu.Unlock()
	return global.impl
}

// use installs impl; byProgram records that the program's Use did.
func (s *selector) use(impl Impl, byProgram bool) error {
	if impl == nil {
		return errors.New("blas: Use(nil): pass an implementation, for example blas.Gonum{}")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started.Load() {
		return ErrStarted
	}
	s.impl, s.byProgram = impl, byProgram
	return nil
}

// program is the implementation the program installed with Use, if it did.
func (s *selector) program() (Impl, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.impl, s.byProgram
}

// get returns the implementation and marks the choice final. The fast path
// is one atomic load; impl is only written under mu before started is set.
func (s *selector) get() Impl {
	if !s.started.Load() {
		s.mu.Lock()
		s.started.Store(true)
		s.mu.Unlock()
	}
	return s.impl
}

// Sgemm computes c = alpha·op(a)·op(b) + beta·c in float32 (row-major; see
// Impl). It panics with a descriptive message when a dimension or a slice
// length is inconsistent: that is a bug in the calling kernel.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	check(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if k == 0 || alpha == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	global.get().Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm is Sgemm in float64.
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	check(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if k == 0 || alpha == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	global.get().Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// check validates what a row-major gemm reads and writes, so that every
// implementation (including ones reached through a C ABI, which would
// corrupt memory instead of panicking) sees only consistent arguments.
func check(transA, transB bool, m, n, k, la, lda, lb, ldb, lc, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("blas: gemm with negative size m=%d n=%d k=%d", m, n, k))
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	need := func(what string, rows, cols, ld, have int) {
		if ld < max(1, cols) {
			panic(fmt.Sprintf("blas: gemm %s is %d×%d but its leading dimension is %d (want at least %d)", what, rows, cols, ld, max(1, cols)))
		}
		if rows > 0 && cols > 0 && have < (rows-1)*ld+cols {
			panic(fmt.Sprintf("blas: gemm %s is %d×%d with leading dimension %d but has %d elements (want at least %d)", what, rows, cols, ld, have, (rows-1)*ld+cols))
		}
	}
	need("a", ar, ac, lda, la)
	need("b", br, bc, ldb, lb)
	need("c", m, n, ldc, lc)
}

// scale sets c = beta·c, the whole product when op(a)·op(b) contributes
// nothing; implementations never see k == 0 or alpha == 0. As in reference
// BLAS, beta == 0 overwrites c (NaNs in c do not survive).
func scale[T float32 | float64](m, n int, beta T, c []T, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// threadCounter is an implementation that runs each multiply on several
// threads and says how many.
type threadCounter interface{ Threads() int }

// Threads is how many threads the implementation in use runs a multiply on:
// what the kernels around the multiplies (im2col, normalisation) should use
// too, so that a process sized for one core stays on one core. It is
// GOMAXPROCS for implementations that do not say (gonum parallelises over
// goroutines).
func Threads() int {
	if t, ok := Current().(threadCounter); ok {
		if n := t.Threads(); n > 0 {
			return n
		}
	}
	return runtime.GOMAXPROCS(0)
}
