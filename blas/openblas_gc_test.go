//go:build (linux || darwin || freebsd) && (amd64 || arm64)

package blas_test

import (
	"math"
	"runtime"
	"testing"

	"github.com/fulgur-ml/fulgur/blas"
)

// A garbage collection leaves the holders of the call arguments alone: the
// calls after one allocate nothing of blas' own (sync.Pools, emptied by
// every GC, made each of Sgemm and Dgemm allocate twice after one).
// purego's own pool is refilled first by a call that holds nothing of
// blas' (CallLibraryForTest), on one P: a goroutine moved to another P
// between that call and the next would put purego's block into that P's
// part of the pool, which allocates.
func TestOpenBLASCallAfterGCDoesNotAllocate(t *testing.T) { noAllocsAfterGC(t, openBLAS(t)) }

func TestBLISCallAfterGCDoesNotAllocate(t *testing.T) { noAllocsAfterGC(t, blisLib(t)) }

func noAllocsAfterGC(t *testing.T, o *blas.Native) {
	if raceBuild {
		t.Skip("the race detector drops sync.Pool values (purego's) at random")
	}
	a, b, c := make([]float32, 64*128), make([]float32, 128*10), make([]float32, 64*10)
	a64, b64, c64 := make([]float64, 64*128), make([]float64, 128*10), make([]float64, 64*10)
	calls := func() {
		o.Sgemm(false, false, 64, 10, 128, 1, a, 128, b, 10, 0, c, 10)
		o.Dgemm(false, true, 64, 128, 10, 1, c64, 10, b64, 10, 0, a64, 128)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	calls() // warm
	// Mallocs counts the whole process, the runtime's goroutines too: the
	// fewest of a few tries is the calls' own count (calls that allocate
	// after a GC do so after every GC).
	fewest := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		o.CallLibraryForTest()
		runtime.ReadMemStats(&before)
		calls()
		runtime.ReadMemStats(&after)
		fewest = min(fewest, after.Mallocs-before.Mallocs)
	}
	if fewest != 0 {
		t.Fatalf("the Sgemm and Dgemm after a GC made %d allocations (the fewest of 3 tries), want 0", fewest)
	}
}
