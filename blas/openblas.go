//go:build (linux || darwin || freebsd) && (amd64 || arm64)

package blas

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/fulgur-ml/fulgur/internal/freelist"
)

// Native runs multiplies on a BLAS shared library loaded at run time through
// purego: OpenBLAS or BLIS. No cgo and no headers at build time, so
// CGO_ENABLED=0 builds still reach it.
//
// It calls the Fortran entry points sgemm_ and dgemm_, not cblas_*: they take
// every argument by pointer, so purego.SyscallN calls them with no
// allocation (purego's typed-function path goes through reflect and
// allocates on every call, and cblas's float arguments cannot be passed
// through SyscallN). Row-major c = op(a)·op(b) is computed as the
// column-major cᵀ = op(b)ᵀ·op(a)ᵀ, which is the same memory.
type Native struct {
	lib     *library
	file    string
	sgemm   uintptr
	dgemm   uintptr
	setThr  uintptr
	getThr  uintptr
	version string
	// serial: a build without threading (libblis4-serial), which keeps
	// reporting the count set although every call runs on one thread.
	serial bool
	// ompSet is omp_set_num_threads for an OpenMP build of OpenBLAS
	// (libopenblas0-openmp), else 0. Such a build runs each call on the
	// calling thread's OpenMP count (omp_get_max_threads), which
	// openblas_set_num_threads sets on its caller's thread only: the ops'
	// workers, on other threads, ran on the default, every core, each.
	// Every call sets ompThreads on its thread first.
	ompSet     uintptr
	ompThreads atomic.Int32
}

var _ Impl = (*Native)(nil)

// library describes one BLAS that can be loaded at run time.
type library struct {
	kind  string   // "openblas" or "blis"
	names []string // loader names, tried in order
	// thread-count entry points: void set(int), int get(void) (64-bit
	// integers for BLIS)
	setThreads, getThreads string
	wide                   bool // BLIS's dim_t thread counts are 64-bit
	install                string
	// prepare runs after the library is opened and before its first call.
	prepare func(h uintptr)
	// describe returns the version and configuration string of a loaded
	// library, for Name.
	describe func(h uintptr) string

	once   sync.Once
	loaded *Native
	err    error
}

var (
	// openBLAS: Debian's runtime package ships libopenblas.so.0; the
	// unversioned name comes with development packages; .dylib is Homebrew's.
	openBLAS = &library{
		kind: "openblas", names: []string{"libopenblas.so.0", "libopenblas.so", "libopenblas.dylib", "libopenblas.0.dylib"},
		setThreads: "openblas_set_num_threads", getThreads: "openblas_get_num_threads",
		install: "Debian/Ubuntu: apt-get install libopenblas0; macOS: brew install openblas",
		describe: func(h uintptr) string {
			cfg, core := cString(h, "openblas_get_config"), cString(h, "openblas_get_corename")
			if core != "" && !strings.Contains(cfg, core) {
				cfg += " " + core
			}
			return cfg
		},
	}
	// blis: Debian's libblis4-serial, -pthread and -openmp all provide
	// libblis.so.4.
	blis = &library{
		kind: "blis", names: []string{"libblis.so.4", "libblis.so", "libblis.4.dylib", "libblis.dylib"},
		setThreads: "bli_thread_set_num_threads", getThreads: "bli_thread_get_num_threads", wide: true,
		install: "Debian/Ubuntu: apt-get install libblis4-serial (or libblis4-pthread)",
		prepare: blisPrepare,
		describe: func(h uintptr) string {
			v := "BLIS " + cString(h, "bli_info_get_version_str")
			if a := blisArch(h); a != "" {
				v += " " + a
			}
			return v
		},
	}
)

// LoadOpenBLAS finds OpenBLAS through the dynamic loader's standard search
// (ld.so.cache, LD_LIBRARY_PATH, DYLD_LIBRARY_PATH) and binds its gemm
// entry points. The library is opened once per process; later calls return
// the same value. The error wraps ErrNoOpenBLAS and says what to install
// when the library is absent.
func LoadOpenBLAS() (*Native, error) { return openBLAS.load() }

// LoadBLIS is LoadOpenBLAS for BLIS (libblis.so.4). The error wraps
// ErrNoBLIS when it is absent, and ErrSlowBLIS when BLIS runs only its
// generic reference kernels on this processor.
func LoadBLIS() (*Native, error) { return blis.load() }

func (l *library) load() (*Native, error) {
	l.once.Do(func() { l.loaded, l.err = l.open() })
	return l.loaded, l.err
}

func (l *library) open() (*Native, error) {
	var errs []string
	for _, name := range l.names {
		// RTLD_LOCAL: two BLAS libraries in one process must not
		// interpose each other's sgemm_.
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		o := &Native{lib: l, file: name}
		for _, s := range []struct {
			sym string
			p   *uintptr
		}{{"sgemm_", &o.sgemm}, {"dgemm_", &o.dgemm}, {l.setThreads, &o.setThr}, {l.getThreads, &o.getThr}} {
			if *s.p, err = purego.Dlsym(h, s.sym); err != nil || *s.p == 0 {
				purego.Dlclose(h)
				return nil, fmt.Errorf("blas: %s has no symbol %s (is it %s?): %v", name, s.sym, l.kind, err)
			}
		}
		if l.prepare != nil {
			l.prepare(h)
		}
		if l == blis {
			o.serial = !blisThreaded(h)
		}
		if l == openBLAS && openBLASOpenMP(h) {
			o.ompSet, _ = purego.Dlsym(h, "omp_set_num_threads")
			r, _, _ := purego.SyscallN(o.getThr)
			o.ompThreads.Store(max(1, int32(r)))
		}
		o.version = l.describe(h)
		if l == blis && strings.HasSuffix(o.version, " generic") {
			return nil, fmt.Errorf("%w: %s (%s): set BLIS_ARCH_TYPE to a configuration for this processor", ErrSlowBLIS, name, o.version)
		}
		if err := selfCheck(o); err != nil {
			return nil, fmt.Errorf("blas: %s (%s) %w: not used", name, o.version, err)
		}
		return o, nil
	}
	notFound := ErrNoOpenBLAS
	if l == blis {
		notFound = ErrNoBLIS
	}
	return nil, fmt.Errorf("%w (%s; tried %s: %s)", notFound, l.install, strings.Join(l.names, ", "), strings.Join(errs, "; "))
}

// selfCheck multiplies small matrices of every transpose combination with
// the library and a direct loop: a library whose kernels are wrong on this
// processor (old OpenBLAS builds on new processors; a forced configuration
// the processor cannot run) is refused rather than trusted.
func selfCheck(o *Native) error {
	const m, n, k = 7, 5, 33
	a, b := make([]float64, m*k), make([]float64, k*n)
	for i := range a {
		a[i] = float64(i%11) - 5
	}
	for i := range b {
		b[i] = float64(i%7) - 3
	}
	a32, b32 := make([]float32, len(a)), make([]float32, len(b))
	for i, v := range a {
		a32[i] = float32(v)
	}
	for i, v := range b {
		b32[i] = float32(v)
	}
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			lda, ldb := k, n
			if ta {
				lda = m
			}
			if tb {
				ldb = k
			}
			c := make([]float64, m*n)
			c32 := make([]float32, m*n)
			o.Dgemm(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, n)
			o.Sgemm(ta, tb, m, n, k, 1, a32, lda, b32, ldb, 0, c32, n)
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var want float64
					for p := 0; p < k; p++ {
						var av, bv float64
						if ta {
							av = a[p*lda+i]
						} else {
							av = a[i*lda+p]
						}
						if tb {
							bv = b[j*ldb+p]
						} else {
							bv = b[p*ldb+j]
						}
						want += av * bv
					}
					// Small integers: every partial sum is exact.
					if c[i*n+j] != want || float64(c32[i*n+j]) != want {
						return fmt.Errorf("computes wrong products on this processor (transA %v, transB %v: c[%d,%d] = %v / %v, want %v)", ta, tb, i, j, c[i*n+j], c32[i*n+j], want)
					}
				}
			}
		}
	}
	return nil
}

// ErrNoOpenBLAS says OpenBLAS could not be found.
var ErrNoOpenBLAS = errors.New("blas: OpenBLAS not found: install it or keep the pure-Go gonum BLAS")

// ErrNoBLIS says BLIS could not be found.
var ErrNoBLIS = errors.New("blas: BLIS not found")

// ErrSlowBLIS says BLIS found no optimised kernels for this processor.
var ErrSlowBLIS = errors.New("blas: BLIS would run its generic reference kernels here")

// blisConfig is the BLIS kernel configuration to ask for on this processor
// when BLIS_ARCH_TYPE is unset ("" to leave BLIS's own detection alone).
// BLIS 0.9 knows processors by model and runs slow reference kernels on
// newer ones (AMD Zen 4 and 5, for instance), though their instruction sets
// run its optimised kernels: "skx" needs AVX-512 F, CD, DQ, BW and VL;
// "haswell" needs AVX2 and FMA. A self-check at load rejects a library whose
// results are wrong anyway.
var blisConfig = func() string {
	switch {
	case hasAVX512SKX():
		return "skx"
	case hasAVX2FMA():
		return "haswell"
	}
	return ""
}

// blisPrepare selects blisConfig's kernels, then initialises BLIS (which
// fixes the choice). BLIS 0.9 reads BLIS_ARCH_TYPE as the numeric id of a
// configuration in its build (a name reads as 0), so the id is looked up by
// name in the library itself.
func blisPrepare(h uintptr) {
	if _, ok := os.LookupEnv("BLIS_ARCH_TYPE"); !ok {
		if want := blisConfig(); want != "" {
			if id, ok := blisArchID(h, want); ok {
				defer setWhileLoading("BLIS_ARCH_TYPE", strconv.Itoa(id))()
			}
		}
	}
	if p, err := purego.Dlsym(h, "bli_init"); err == nil && p != 0 {
		purego.SyscallN(p)
	}
}

// blisArchID finds the id of the configuration called name.
func blisArchID(h uintptr, name string) (int, bool) {
	str, err := purego.Dlsym(h, "bli_arch_string")
	if err != nil || str == 0 {
		return 0, false
	}
	var archString func(int32) string
	purego.RegisterFunc(&archString, str)
	for id := int32(0); id < 64; id++ {
		s := archString(id)
		if s == "" {
			break
		}
		if s == name {
			return int(id), true
		}
	}
	return 0, false
}

// blisThreaded reports whether BLIS was built with threading (pthreads or
// OpenMP), when it says; a build that does not is taken to be threaded.
func blisThreaded(h uintptr) bool {
	p, err := purego.Dlsym(h, "bli_info_get_enable_threading")
	if err != nil || p == 0 {
		return true
	}
	r, _, _ := purego.SyscallN(p)
	return int64(r) != 0
}

// openBLASOpenMP reports whether OpenBLAS was built with OpenMP
// (openblas_get_parallel: 0 sequential, 1 pthreads, 2 OpenMP).
func openBLASOpenMP(h uintptr) bool {
	p, err := purego.Dlsym(h, "openblas_get_parallel")
	if err != nil || p == 0 {
		return false
	}
	r, _, _ := purego.SyscallN(p)
	return int32(r) == 2
}

// blisArch is the kernel configuration BLIS runs (its first call fixes it,
// from BLIS_ARCH_TYPE or its own processor detection).
func blisArch(h uintptr) string {
	q, err1 := purego.Dlsym(h, "bli_arch_query_id")
	str, err2 := purego.Dlsym(h, "bli_arch_string")
	if err1 != nil || err2 != nil || q == 0 || str == 0 {
		return ""
	}
	var query func() int32
	var name func(int32) string
	purego.RegisterFunc(&query, q)
	purego.RegisterFunc(&name, str)
	return name(query())
}

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

// Kind is "openblas" or "blis".
func (o *Native) Kind() string { return o.lib.kind }

// Name implements Impl: library, version and configuration, thread count,
// e.g. "openblas (OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell
// MAX_THREADS=64, 1 thread)".
func (o *Native) Name() string {
	v := o.version
	if v == "" {
		v = o.file
	}
	n := o.Threads()
	unit := "threads"
	if n == 1 {
		unit = "thread"
	}
	return fmt.Sprintf("%s (%s, %d %s)", o.lib.kind, v, n, unit)
}

// SetThreads sets how many threads the library uses for each call (n ≥ 1).
// It may be called at any time, for example by a strategy that runs several
// ranks on one machine and wants one thread each. A single-threaded build
// (libblis4-serial) keeps running on one.
func (o *Native) SetThreads(n int) error {
	if n < 1 {
		return fmt.Errorf("blas: %s thread count %d: use 1 or more", o.lib.kind, n)
	}
	o.ompThreads.Store(int32(min(n, 1<<30)))
	purego.SyscallN(o.setThr, uintptr(n))
	return nil
}

// Threaded reports whether the build runs a multiply on several threads
// (false for libblis4-serial).
func (o *Native) Threaded() bool { return !o.serial }

// Threads is the thread count the library will use: 1 for a build without
// threading, whatever count was set.
func (o *Native) Threads() int {
	if o.serial {
		return 1
	}
	r, _, _ := purego.SyscallN(o.getThr)
	if o.lib.wide {
		return int(int64(r))
	}
	return int(int32(r))
}

// gemmArgs holds the by-pointer scalar arguments of one call and the
// argument block handed to SyscallN. A free list keeps them on the heap, where
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
	omp     [1]uintptr // omp_set_num_threads's argument
}

// free32 and free64 hold the argument blocks between calls: unlike a
// sync.Pool, a garbage collection leaves them there, so the call after one
// does not allocate either.
var (
	free32 freelist.List[gemmArgs[float32]]
	free64 freelist.List[gemmArgs[float64]]
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
// op(b)ᵀ (n×k) · op(a)ᵀ (k×m) in column-major terms. With ompSet (an
// OpenMP build) it first sets the thread count on the thread that calls,
// kept for both calls.
func call[T float32 | float64](fn, ompSet uintptr, threads int32, free *freelist.List[gemmArgs[T]], transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	s := free.Get()
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
	if ompSet != 0 {
		runtime.LockOSThread()
		s.omp[0] = uintptr(threads)
		purego.SyscallN(ompSet, s.omp[:]...)
		purego.SyscallN(fn, s.args[:]...)
		runtime.UnlockOSThread()
	} else {
		purego.SyscallN(fn, s.args[:]...)
	}
	runtime.KeepAlive(s)
	s.a, s.b, s.c = nil, nil, nil
	free.Put(s)
}

// Sgemm implements Impl.
func (o *Native) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !fits(m, n, k, lda, ldb, ldc) {
		Gonum{}.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	call(o.sgemm, o.ompSet, o.ompThreads.Load(), &free32, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm implements Impl.
func (o *Native) Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if !fits(m, n, k, lda, ldb, ldc) {
		Gonum{}.Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	call(o.dgemm, o.ompSet, o.ompThreads.Load(), &free64, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
