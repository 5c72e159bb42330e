package ops

import (
	"sync"

	"github.com/fulgur-ml/fulgur/internal/blas"
)

// Loops around the multiplies (im2col, normalisation, elementwise) can run on
// several goroutines. Work is split by index, never by timing, and
// reductions combine per-index partial results in index order: results do
// not depend on the number of workers (TestParallelMatchesSerial).
//
// By default they run serially: measured on the resnet8 step (batch 64, two
// cores), splitting them over two goroutines next to a two-thread OpenBLAS
// made the step slower (about 90 -> 120 ms), as OpenBLAS's threads spin
// between calls and the goroutines compete with them for the cores.
// SetLoopWorkers changes it for programs where that does not hold.

// parallelGrain is the least number of elements worth a goroutine;
// maxWorkers caps the goroutines of one loop. Tests change both to run the
// parallel paths on small inputs.
var (
	parallelGrain = 1 << 15
	maxWorkers    = func() int { return 1 }
)

// SetLoopWorkers sets how many goroutines the loops around the multiplies
// may use: 0 means as many as the BLAS uses threads (blas.Threads), 1 (the
// default) keeps them serial. Call it at program start, before graphs run.
func SetLoopWorkers(n int) {
	switch {
	case n <= 0:
		maxWorkers = blas.Threads
	default:
		maxWorkers = func() int { return n }
	}
}

// workers is how many goroutines a loop over n items of size elements each
// should use.
func workers(n, size int) int {
	if n < 2 {
		return 1
	}
	return max(1, min(maxWorkers(), n, n*size/parallelGrain))
}

// parallelFor runs f over [0, n) split into w contiguous ranges, w-1 of them
// on new goroutines. Callers check workers(...) > 1 first and call their
// kernel directly otherwise, so that the serial path builds no closure (and
// allocates nothing).
func parallelFor(w, n int, f func(lo, hi int)) {
	var wg sync.WaitGroup
	wg.Add(w - 1)
	for i := 1; i < w; i++ {
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(i*n/w, (i+1)*n/w)
	}
	f(0, n/w)
	wg.Wait()
}

// Convolutions also split their batch between goroutines, image chunk by
// image chunk, each with its own column-matrix scratch, each calling the
// BLAS on its own: worth it when each multiply runs on one thread (BLIS's
// serial build, or OpenBLAS set to one thread), where a second core would
// otherwise idle. imageWorkers is how many goroutines: Cores()/Threads(), so
// that goroutines × BLAS threads stay within this process's (or rank's)
// share of the cores; 1 with gonum, which parallelises by itself.
var imageWorkers = func() int { return max(1, blas.Cores()/blas.Threads()) }

// imageGrain is the least number of multiply-adds per image worker worth
// waking a goroutine for. Tests lower it.
var imageGrain = 1 << 18

// SetImageWorkers sets how many goroutines a convolution splits its batch
// between: 0 (the default) means blas.Cores()/blas.Threads(), 1 keeps it
// serial. Results do not depend on it, except the weight gradient's, which
// sums the workers' partial sums in worker order: the same bits for the
// same count. Call it at program start, before graphs run.
func SetImageWorkers(n int) {
	if n <= 0 {
		imageWorkers = func() int { return max(1, blas.Cores()/blas.Threads()) }
		return
	}
	imageWorkers = func() int { return n }
}

// imageSplit is how many workers a convolution with chunks chunks of macs
// multiply-adds in all should use.
func imageSplit(chunks, macs int) int {
	if chunks < 2 {
		return 1
	}
	return max(1, min(imageWorkers(), chunks, macs/imageGrain))
}

// part is work split into n parts that can run at once; run does part i.
type part interface{ run(i, n int) }

// partRun is the state of one runParts call, held in the job so that a split
// allocates nothing.
type partRun struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	fault any // the first panic of a part run on the pool
}

type partMsg struct {
	p    part
	i, n int
	s    *partRun
}

// pool is a set of long-lived goroutines that run parts, so that a split
// allocates nothing (a go statement with a closure would).
var pool struct {
	mu      sync.Mutex
	started int
	ch      chan partMsg
}

// runParts runs parts 1..n-1 of p on the pool and part 0 on the caller,
// and returns when all are done. A part's panic is raised again on the
// caller (where the engine turns it into an error), not on the pool's
// goroutine. Parts must not call runParts.
func runParts(p part, n int, s *partRun) {
	pool.mu.Lock()
	if pool.ch == nil {
		pool.ch = make(chan partMsg, 64)
	}
	for ; pool.started < n-1; pool.started++ {
		go poolWorker(pool.ch)
	}
	ch := pool.ch
	pool.mu.Unlock()
	s.fault = nil
	s.wg.Add(n - 1)
	for i := 1; i < n; i++ {
		ch <- partMsg{p, i, n, s}
	}
	func() {
		defer s.wg.Wait()
		p.run(0, n)
	}()
	if s.fault != nil {
		panic(s.fault)
	}
}

func poolWorker(ch <-chan partMsg) {
	for m := range ch {
		runPart(m)
	}
}

func runPart(m partMsg) {
	defer m.s.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			m.s.mu.Lock()
			if m.s.fault == nil {
				m.s.fault = r
			}
			m.s.mu.Unlock()
		}
	}()
	m.p.run(m.i, m.n)
}
