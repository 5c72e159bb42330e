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
