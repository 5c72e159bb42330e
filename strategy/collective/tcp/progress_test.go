//go:build linux

package tcp_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/collectivetest"
)

var computeSink float64

// spinFor computes (without blocking) for about d of wall time.
func spinFor(d time.Duration) float64 {
	x := 1.0
	for end := time.Now().Add(d); time.Now().Before(end); {
		for range 1000 {
			x = x*1.0000001 + 1e-9
		}
	}
	return x
}

// TestAsyncProgressesWhileComputingOnOneP is a rank pinned to one core
// (GOMAXPROCS=1) reducing gradient buckets asynchronously while backward
// computes in short pieces with a yield between them (the engine yields
// between backward ops). Every reduction must finish before the compute
// does: a goroutine parked in Go's network poller is woken only by sysmon's
// poll every 10 ms while the P has goroutines to run, so the 60 round
// trips would take a second or more, far past the compute's 300 ms.
func TestAsyncProgressesWhileComputingOnOneP(t *testing.T) {
	const ops, n = 60, 1024
	groups := newGroup(t, 2)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()

	// Rank 1 runs the same reductions synchronously on its own goroutine
	// (another process, as far as the reduction goes).
	peer := make(chan error, 1)
	go func() {
		buf := make([]float32, n)
		for k := range ops {
			for i := range buf {
				buf[i] = float32(k + i)
			}
			if err := groups[1].AllReduce(ctx, buf, collective.Sum); err != nil {
				peer <- err
				return
			}
		}
		peer <- nil
	}()

	async := groups[0].(collective.Async)
	bufs := make([][]float32, ops)
	handles := make([]collective.Handle, ops)
	for k := range bufs {
		bufs[k] = make([]float32, n)
		for i := range bufs[k] {
			bufs[k][i] = 1
		}
		handles[k] = async.AllReduceAsync(ctx, bufs[k], collective.Sum)
	}
	var finished atomic.Int64
	var took atomic.Int64
	start := time.Now()
	go func() {
		for _, h := range handles {
			if h.Wait() != nil {
				return
			}
			finished.Add(1)
		}
		took.Store(int64(time.Since(start)))
	}()

	// Backward: 300 ms of compute in 200 µs pieces.
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		computeSink += spinFor(200 * time.Microsecond)
		runtime.Gosched()
	}
	done := finished.Load()
	if d := took.Load(); d > 0 {
		t.Logf("all %d all-reduces were done %v after they were submitted", ops, time.Duration(d))
	}

	for k, h := range handles {
		if err := h.Wait(); err != nil {
			t.Fatalf("all-reduce %d: %v", k, err)
		}
	}
	if err := <-peer; err != nil {
		t.Fatalf("rank 1: %v", err)
	}
	for k, b := range bufs {
		for i, v := range b {
			if want := float32(1 + k + i); v != want {
				t.Fatalf("all-reduce %d: element %d is %v, want %v", k, i, v, want)
			}
		}
	}
	if done != ops {
		t.Errorf("%d of %d asynchronous all-reduces had finished when 300 ms of compute (yielding every 200 µs) ended, want all: "+
			"the communication goroutine did not get to read its replies between the compute's pieces", done, ops)
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A rank waiting on one P for a peer that sends nothing does not spin the
// core away: it parks once nothing else of the process wants the P.
func TestWaitOnOnePDoesNotBurnTheCore(t *testing.T) {
	groups := newGroup(t, 2)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const wait = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cpu0, t0 := processCPU(t), time.Now()
	err := groups[0].AllReduce(ctx, make([]float32, 1024), collective.Sum) // rank 1 never joins
	cpu, wall := processCPU(t)-cpu0, time.Since(t0)
	if err == nil {
		t.Fatal("an all-reduce that rank 1 never joined succeeded")
	}
	if cpu > wall/4 {
		t.Errorf("waiting %v for a silent peer took %v of CPU: the wait spun instead of parking", wall.Round(time.Millisecond), cpu.Round(time.Millisecond))
	}
}

// On one P operations read and write through the spinning path
// (spin_linux.go): the whole conformance suite, dead and silent peers
// included, runs there too.
func TestConformanceOnOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	collectivetest.RunAll(t, newGroup)
}
