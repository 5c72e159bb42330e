//go:build (linux || darwin || freebsd) && (amd64 || arm64)

package blas

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// OpenBLAS runs multiplies on an OpenBLAS shared library loaded at run time
// through purego: no cgo and no headers at build time, so CGO_ENABLED=0
// builds still reach it.
//
// It calls the Fortran entry points sgemm_ and dgemm_, not cblas_*: they take
// every argument by pointer, so purego.SyscallN calls them with no
// allocation (purego's typed-function path goes through reflect and
// allocates on every call, and cblas's float arguments cannot be passed
// through SyscallN). Row-major c = op(a)·op(b) is computed as the
// column-major cᵀ = op(b)ᵀ·op(a)ᵀ, which is the same memory.
type OpenBLAS struct {
	lib      string
	sgemm    uintptr
	dgemm    uintptr
	setThr   uintptr
	getThr   uintptr
	config   string
	corename string
}

var _ Impl = (*OpenBLAS)(nil)

// openBLASNames are the loader names tried in order: the runtime package of
// Debian and most distributions ships libopenblas.so.0; the unversioned name
// comes with development packages; .dylib is Homebrew's.
var openBLASNames = []string{"libopenblas.so.0", "libopenblas.so", "libopenblas.dylib", "libopenblas.0.dylib"}

var (
	loadOnce sync.Once
	loaded   *OpenBLAS
	loadErr  error
)

// LoadOpenBLAS finds OpenBLAS through the dynamic loader's standard search
// (ld.so.cache, LD_LIBRARY_PATH, DYLD_LIBRARY_PATH) and binds its gemm
// entry points. The library is opened once per process; later calls return
// the same value. It returns an error that says what to install when the
// library is absent.
func LoadOpenBLAS() (*OpenBLAS, error) {
	loadOnce.Do(func() { loaded, loadErr = loadOpenBLAS(openBLASNames) })
	return loaded, loadErr
}

func loadOpenBLAS(names []string) (*OpenBLAS, error) {
	var errs []string
	for _, name := range names {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		o := &OpenBLAS{lib: name}
		for _, s := range []struct {
			sym string
			p   *uintptr
		}{{"sgemm_", &o.sgemm}, {"dgemm_", &o.dgemm}, {"openblas_set_num_threads", &o.setThr}, {"openblas_get_num_threads", &o.getThr}} {
			if *s.p, err = purego.Dlsym(h, s.sym); err != nil || *s.p == 0 {
				purego.Dlclose(h)
				return nil, fmt.Errorf("blas: %s has no symbol %s (is it OpenBLAS?): %v", name, s.sym, err)
			}
		}
		o.config = cString(h, "openblas_get_config")
		o.corename = cString(h, "openblas_get_corename")
		return o, nil
	}
	return nil, fmt.Errorf("%w (tried %s: %s)", ErrNoOpenBLAS, strings.Join(names, ", "), strings.Join(errs, "; "))
}

// ErrNoOpenBLAS says the library could not be found.
var ErrNoOpenBLAS = errors.New("blas: OpenBLAS not found: install it (Debian/Ubuntu: apt-get install libopenblas0; macOS: brew install openblas) or keep the pure-Go gonum BLAS")

// cString calls a const char *(void) function of the library, "" when
// absent. Called once at load, so purego's reflect path is fine here.
func cString(h uintptr, sym string) string {
	if p, err := purego.Dlsym(h, sym); err != nil || p == 0 {
		return ""
	}
	var f func() string
	purego.RegisterLibFunc(&f, h, sym)
	return strings.TrimSpace(f())
}

// Name implements Impl: library, version string and thread count, e.g.
// "openblas (OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64, 1 thread)".
func (o *OpenBLAS) Name() string {
	cfg := o.config
	if cfg == "" {
		cfg = o.lib
	}
	if o.corename != "" && !strings.Contains(cfg, o.corename) {
		cfg += " " + o.corename
	}
	n := o.Threads()
	unit := "threads"
	if n == 1 {
		unit = "thread"
	}
	return fmt.Sprintf("openblas (%s, %d %s)", cfg, n, unit)
}

// SetThreads sets how many threads OpenBLAS uses for each call (n ≥ 1).
// It may be called at any time, for example by a strategy that runs several
// ranks on one machine and wants one thread each.
func (o *OpenBLAS) SetThreads(n int) error {
	if n < 1 {
		return fmt.Errorf("blas: OpenBLAS thread count %d: use 1 or more", n)
	}
	thr := int32(n)
	purego.SyscallN(o.setThr, uintptr(thr))
	return nil
}

// Threads is the thread count OpenBLAS will use.
func (o *OpenBLAS) Threads() int {
	r, _, _ := purego.SyscallN(o.getThr)
	return int(int32(r))
}

// gemmArgs holds the by-pointer scalar arguments of one call and the
// argument block handed to SyscallN. A pool keeps them on the heap, where
// the pointers stay valid, without an allocation per call (a variadic
// argument list would escape, purego.SyscallN being uintptrescapes), and
// makes concurrent calls safe.
type gemmArgs[T float32 | float64] struct {
	ta, tb        byte
	m, n, k       int32
	lda, ldb, ldc int32
	alpha, beta   T
	// a, b and c hold the matrices while C reads them: storing them here
	// makes them escape to the heap, which does not move objects, so the
	// addresses in args stay valid.
	a, b, c []T
	args    [15]uintptr
}

var (
	pool32 = sync.Pool{New: func() any { return new(gemmArgs[float32]) }}
	pool64 = sync.Pool{New: func() any { return new(gemmArgs[float64]) }}
)

func trChar(t bool) byte {
	if t {
		return 'T'
	}
	return 'N'
}

// fits reports whether every size fits OpenBLAS's 32-bit blasint.
func fits(v ...int) bool {
	for _, x := range v {
		if x > 1<<31-1 {
			return false
		}
	}
	return true
}

// call runs the Fortran gemm fn on row-major matrices: cᵀ (n×m) =
// op(b)ᵀ (n×k) · op(a)ᵀ (k×m) in column-major terms.
func call[T float32 | float64](fn uintptr, pool *sync.Pool, transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	s := pool.Get().(*gemmArgs[T])
	s.ta, s.tb = trChar(transB), trChar(transA)
	s.m, s.n, s.k = int32(n), int32(m), int32(k)
	s.lda, s.ldb, s.ldc = int32(ldb), int32(lda), int32(ldc)
	s.alpha, s.beta = alpha, beta
	s.a, s.b, s.c = a, b, c
	s.args = [15]uintptr{
		uintptr(unsafe.Pointer(&s.ta)), uintptr(unsafe.Pointer(&s.tb)),
		uintptr(unsafe.Pointer(&s.m)), uintptr(unsafe.Pointer(&s.n)), uintptr(unsafe.Pointer(&s.k)),
		uintptr(unsafe.Pointer(&s.alpha)),
		uintptr(unsafe.Pointer(unsafe.SliceData(s.b))), uintptr(unsafe.Pointer(&s.lda)),
		uintptr(unsafe.Pointer(unsafe.SliceData(s.a))), uintptr(unsafe.Pointer(&s.ldb)),
		uintptr(unsafe.Pointer(&s.beta)),
		uintptr(unsafe.Pointer(unsafe.SliceData(s.c))), uintptr(unsafe.Pointer(&s.ldc)),
		1, 1, // hidden lengths of the two character arguments (gfortran ABI)
	}
	purego.SyscallN(fn, s.args[:]...)
	runtime.KeepAlive(s)
	s.a, s.b, s.c = nil, nil, nil
	pool.Put(s)
}

// Sgemm implements Impl.
func (o *OpenBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !fits(m, n, k, lda, ldb, ldc) {
		Gonum{}.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	call(o.sgemm, &pool32, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm implements Impl.
func (o *OpenBLAS) Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if !fits(m, n, k, lda, ldb, ldc) {
		Gonum{}.Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	call(o.dgemm, &pool64, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
