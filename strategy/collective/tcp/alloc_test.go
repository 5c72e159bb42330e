package tcp_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// allocsPerOp runs op on both ranks of groups, iters times after a
// warm-up, and returns the allocations of the whole process (both ranks)
// per operation. Rank 1 runs on its own goroutine; the two meet through
// atomic counters and yields, not channels: a goroutine blocked on a
// channel takes a waiter from its P's cache, and with two Ps the waiters
// pile up on one P while the other allocates new ones.
func allocsPerOp(t *testing.T, groups []collective.Collective, iters int, op func(r int) error) float64 {
	t.Helper()
	var started, finished atomic.Int64
	var err1 error
	stop := int64(-1)
	go func() {
		for k := int64(1); ; k++ {
			for started.Load() < k {
				if started.Load() == stop {
					return
				}
				runtime.Gosched()
			}
			err1 = op(1)
			finished.Store(k)
		}
	}()
	defer started.Store(stop)
	run := func() {
		k := started.Add(1)
		err0 := op(0)
		for finished.Load() < k {
			runtime.Gosched()
		}
		if err0 != nil || err1 != nil {
			t.Fatalf("rank 0: %v; rank 1: %v", err0, err1)
		}
	}
	for range 5 {
		run()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range iters {
		run()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(iters)
}

// TestAllReduceAllocations: a two-rank all-reduce of resnet8's gradients
// (311,016 bytes, what a ddp step sends) allocates (almost) nothing, on
// one P (the spinning reads and writes of a pinned rank) and on more; as
// ddp runs it too (asynchronously, on a context it can cancel), where the
// handle it gets back is the allocation left. Were the plans rebuilt, the
// operation header encoded anew, the spinning reads' closures or the
// context's watch made per operation, each would show here.
func TestAllReduceAllocations(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector allocates on its own")
	}
	const n = 77754 // resnet8's parameters
	groups := newGroup(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// As ddp holds its buckets: converting a slice to an interface
	// allocates, so it does that once.
	bufs := []any{make([]float32, n), make([]float32, n)}
	for _, procs := range []int{1, 2} {
		for _, c := range []struct {
			name string
			op   func(r int) error
			most float64 // per rank
		}{
			{"sync", func(r int) error { return groups[r].AllReduce(ctx, bufs[r], collective.Mean) }, 0},
			// The handle: its struct and its done channel.
			{"async", func(r int) error {
				return groups[r].(collective.Async).AllReduceAsync(ctx, bufs[r], collective.Mean).Wait()
			}, 2},
		} {
			func() {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				got := allocsPerOp(t, groups, 50, c.op)
				t.Logf("GOMAXPROCS=%d %s: %.2f allocations per all-reduce, both ranks", procs, c.name, got)
				if got > 2*c.most+0.5 {
					t.Errorf("GOMAXPROCS=%d %s: %.2f allocations per all-reduce of both ranks, want at most %v", procs, c.name, got, 2*c.most)
				}
			}()
		}
	}
}
