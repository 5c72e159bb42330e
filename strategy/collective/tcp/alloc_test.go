package tcp_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// allocsPerOp runs op on every rank of groups, iters times after a
// warm-up, and returns the allocations of the whole process (all ranks)
// per operation. Ranks 1 and up run on goroutines of their own; the ranks
// meet through atomic counters and yields, not channels: a goroutine
// blocked on a channel takes a waiter from its P's cache, and with two Ps
// the waiters pile up on one P while the other allocates new ones.
func allocsPerOp(t *testing.T, groups []collective.Collective, iters int, op func(r int) error) float64 {
	t.Helper()
	var started atomic.Int64
	n := len(groups)
	finished := make([]atomic.Int64, n)
	errs := make([]error, n)
	stop := int64(-1)
	for r := 1; r < n; r++ {
		go func() {
			for k := int64(1); ; k++ {
				for started.Load() < k {
					if started.Load() == stop {
						return
					}
					runtime.Gosched()
				}
				errs[r] = op(r)
				finished[r].Store(k)
			}
		}()
	}
	defer started.Store(stop)
	run := func() {
		k := started.Add(1)
		errs[0] = op(0)
		for r := 1; r < n; r++ {
			for finished[r].Load() < k {
				runtime.Gosched()
			}
		}
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
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

// TestSmallAllReduceAllocations: with three and four ranks, an all-reduce
// whose sends fit the window (64 KiB gathering whole buffers, 256 KiB by
// the ring) runs on the caller's goroutine and allocates nothing: no
// sender goroutine, channels or ticker per operation.
func TestSmallAllReduceAllocations(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector allocates on its own")
	}
	for _, n := range []int{3, 4} {
		groups := newGroup(t, n)
		for _, bytes := range []int{64 << 10, 256 << 10} {
			bufs := make([]any, n)
			for r := range bufs {
				bufs[r] = make([]float32, bytes/4)
			}
			for _, procs := range []int{1, 2} {
				func() {
					defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
					got := allocsPerOp(t, groups, 30, func(r int) error {
						return groups[r].AllReduce(context.Background(), bufs[r], collective.Sum)
					})
					t.Logf("ranks=%d bytes=%d GOMAXPROCS=%d: %.2f allocations per all-reduce, all ranks", n, bytes, procs, got)
					if got > 0.5 {
						t.Errorf("ranks=%d bytes=%d GOMAXPROCS=%d: %.2f allocations per all-reduce of all ranks, want none", n, bytes, procs, got)
					}
				}()
			}
		}
	}
}
