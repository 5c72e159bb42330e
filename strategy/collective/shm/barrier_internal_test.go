//go:build linux

package shm

import (
	"context"
	"errors"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// TestBarrierPassedByAPeerThatThenClosed: rank 1 scans the counters and
// finds rank 0 behind; before it reads rank 0's status, rank 0 reaches the
// barrier, passes it (rank 1 had already arrived), closes its group and
// exits, as DDP.Teardown does after its final barrier. Rank 1 must pass the
// barrier too, not fail with "rank 0 closed its group" (a flake of the
// chaos suite's 3-rank shm job).
func TestBarrierPassedByAPeerThatThenClosed(t *testing.T) {
	peerPassesThenLeaves(t, func(g *Group, leave func()) { g.scanned = leave })
}

// TestBarrierPassedByAPeerThatClosedAfterItsStatusWasRead: rank 1 finds
// rank 0 behind and reads its status (alive); only then does rank 0 reach
// the barrier, pass it and close its group (or exit), as each rank does
// after the last operation of a job. Rank 1 must pass the barrier: a
// status read again after the counter was checked, with rank 0 now closed,
// failed the completed operation with "rank 0 closed its group" (about one
// run in 100 of the two-rank shm all-reduce benchmark, on its last
// operation).
func TestBarrierPassedByAPeerThatClosedAfterItsStatusWasRead(t *testing.T) {
	peerPassesThenLeaves(t, func(g *Group, leave func()) { g.statusRead = leave })
}

// peerPassesThenLeaves is the close race of a 2-rank group, for each way
// rank 0 leaves (closed, dead): rank 1 waits in a barrier, and at the
// point of its wait where hook installs leave, rank 0 arrives, passes the
// barrier and leaves. Rank 1 must pass it; the next barrier, which rank 0
// never reaches, fails with ErrPeerLost, and ErrPeerClosed only for a
// rank that closed in order (a strategy's final barrier,
// collective.FinalBarrier, reads that as the peer being done).
func peerPassesThenLeaves(t *testing.T, hook func(g *Group, leave func())) {
	t.Helper()
	for _, status := range []uint32{statusClosed, statusDead} {
		mem := twoRankMem(t)
		g := &Group{rank: 1, size: 2, timeout: time.Second, mem: mem, slot: SlotBytes}
		peer := &Group{rank: 0, size: 2, mem: mem, slot: SlotBytes}
		hook(g, func() {
			if atomic.LoadUint64(peer.counter(0)) == 0 {
				atomic.StoreUint64(peer.counter(0), 1)
				atomic.StoreUint32(peer.status(0), status)
			}
		})
		if err := g.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1}); err != nil {
			t.Errorf("status %d: rank 1's barrier: %v; want it passed (rank 0 reached it before leaving)", status, err)
		}
		hook(g, nil)
		err := g.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 2})
		if !errors.Is(err, collective.ErrPeerLost) || errors.Is(err, collective.ErrPeerClosed) != (status == statusClosed) {
			t.Errorf("status %d: a barrier that rank 0 never reached: %v; want ErrPeerLost (and ErrPeerClosed: %v)", status, err, status == statusClosed)
		}
	}
}

// TestBarrierLetsOtherGoroutinesRunOnOneP: with GOMAXPROCS=1, a rank
// waiting in a barrier lets the process's other goroutines run (the
// backward pass producing the next bucket) once its short spin is over,
// instead of holding the only P through thousands of sched_yield calls.
func TestBarrierLetsOtherGoroutinesRunOnOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	mem := twoRankMem(t)
	g0 := &Group{rank: 0, size: 2, timeout: 10 * time.Second, mem: mem, slot: SlotBytes, oneP: true}
	g1 := &Group{rank: 1, size: 2, timeout: 10 * time.Second, mem: mem, slot: SlotBytes, oneP: true}
	var started atomic.Bool
	scans := 0
	g0.scanned = func() {
		if !started.Load() {
			scans++
		}
	}
	done := make(chan error, 1)
	go func() {
		// The other goroutine: ready to run from the start, but it gets
		// the P only when rank 0's wait gives it up.
		started.Store(true)
		done <- g1.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1})
	}()
	if err := g0.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if scans > 1000 {
		t.Errorf("rank 0 scanned the counters %d times before the other goroutine ran: it held the only P past its spin", scans)
	}
}

// TestBarrierPauseSleepsInTheKernelOnlyWhenNothingElseRuns: past its spin,
// a rank waiting in a barrier with one P sleeps in the kernel while
// nothing else of the process wants the P (a time.Sleep would wake it up to
// a millisecond after its peer arrived: the P's thread blocks in the
// network poller, whose timeout counts whole milliseconds), and parks in
// Go's scheduler while another goroutine computes (the backward pass
// producing the next bucket), which then keeps the P.
func TestBarrierPauseSleepsInTheKernelOnlyWhenNothingElseRuns(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, busy := range []bool{false, true} {
		mem := twoRankMem(t)
		g0 := &Group{rank: 0, size: 2, timeout: 10 * time.Second, mem: mem, slot: SlotBytes, oneP: true}
		peer := &Group{rank: 1, size: 2, mem: mem, slot: SlotBytes}
		var parked, kernel int
		g0.paused = func(p bool) {
			if p {
				parked++
			} else {
				kernel++
			}
			if parked+kernel == 10 { // the peer arrives
				atomic.StoreUint64(peer.counter(1), 1)
			}
		}
		var stop atomic.Bool
		worked := make(chan struct{})
		if busy {
			go func() {
				defer close(worked)
				for !stop.Load() {
					for t0 := time.Now(); time.Since(t0) < 20*time.Microsecond; {
					}
					runtime.Gosched() // as the engine does between backward ops
				}
			}()
		} else {
			close(worked)
		}
		err := g0.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1})
		stop.Store(true)
		<-worked
		if err != nil {
			t.Fatal(err)
		}
		if busy && parked < 8 {
			t.Errorf("another goroutine computing: %d of %d pauses parked, want (nearly) all: a kernel sleep holds the only P", parked, parked+kernel)
		}
		if !busy && kernel < 8 {
			t.Errorf("nothing else to run: %d of %d pauses slept in the kernel, want (nearly) all: time.Sleep wakes a millisecond late", kernel, parked+kernel)
		}
	}
}

// TestBarrierStopsYieldingOnceAYieldRanAnotherThread: a rank waiting in a
// barrier whose core another thread wants (other work on a shared
// machine) goes on to its pauses after the first yield that handed the
// core over, instead of yielding thousands of times: each such yield lets
// the other thread run out its slice, so the rank would come out of the
// barrier milliseconds after its peer arrived.
func TestBarrierStopsYieldingOnceAYieldRanAnotherThread(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &all)
	core := -1
	for c := 0; c < 1024 && core < 0; c++ {
		if all.IsSet(c) {
			core = c
		}
	}
	var one unix.CPUSet
	one.Set(core)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	// The other thread: runnable on the same core the whole time.
	var stop atomic.Bool
	busy := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			busy <- err
			return
		}
		busy <- nil
		for !stop.Load() {
		}
	}()
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	defer stop.Store(true)

	mem := twoRankMem(t)
	g0 := &Group{rank: 0, size: 2, timeout: time.Minute, mem: mem, slot: SlotBytes}
	peer := &Group{rank: 1, size: 2, mem: mem, slot: SlotBytes}
	scans, pausedAt := 0, -1
	arrive := func() { atomic.StoreUint64(peer.counter(1), 1) }
	g0.scanned = func() {
		scans++
		if scans == 1000 { // still yielding: end the wait, the test has failed
			arrive()
		}
	}
	g0.paused = func(bool) {
		if pausedAt < 0 {
			pausedAt = scans
			arrive()
		}
	}
	if err := g0.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if pausedAt < 0 || pausedAt > 400 {
		t.Errorf("the first pause came after %d scans (-1: none in 1000), want soon after the spin's 200: the rank went on yielding a core another thread wanted", pausedAt)
	}
}

// TestBarrierYieldsOnAfterAShortHandOff: a yield that took long but
// returned early in the wait ran the kernel's own work, not another
// process for its slice: the rank yields on instead of going to its naps
// (on a quiet VM a nap after such a yield woke late). It pauses once a
// yield that took long ends past yieldWindow, which a yield to another
// process's slice does at once. The barrier reads a clock the test moves:
// 1 µs a scan, and what each yield takes.
func TestBarrierYieldsOnAfterAShortHandOff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		took  func(yield int) time.Duration // how long the yield-th yield (from 1) took
		pause bool                          // a pause before the peer arrives at the 50th yield
	}{
		{"one yield of 30µs, then quick ones", func(y int) time.Duration {
			if y == 1 {
				return 30 * time.Microsecond
			}
			return time.Microsecond
		}, false},
		{"every yield quick", func(int) time.Duration { return time.Microsecond }, false},
		{"one yield of 30µs, then quick ones past the window", func(y int) time.Duration {
			if y == 1 {
				return 30 * time.Microsecond
			}
			return yieldedTo
		}, false},
		{"yields of 30µs, past the window", func(int) time.Duration { return 30 * time.Microsecond }, true},
		{"a yield of another process's slice", func(y int) time.Duration {
			if y == 1 {
				return 3 * time.Millisecond
			}
			return time.Microsecond
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := twoRankMem(t)
			g0 := &Group{rank: 0, size: 2, timeout: time.Minute, mem: mem, slot: SlotBytes}
			peer := &Group{rank: 1, size: 2, mem: mem, slot: SlotBytes}
			clock := time.Unix(0, 0)
			g0.clock = func() time.Time { return clock }
			yields, pauses := 0, 0
			arrive := func() { atomic.StoreUint64(peer.counter(1), 1) }
			g0.scanned = func() { clock = clock.Add(time.Microsecond) }
			g0.yielding = func() {
				yields++
				clock = clock.Add(tc.took(yields))
				if yields == 50 {
					arrive()
				}
			}
			g0.paused = func(bool) {
				pauses++
				arrive()
			}
			if err := g0.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1}); err != nil {
				t.Fatal(err)
			}
			if got := pauses > 0; got != tc.pause {
				t.Errorf("%d yields, then %d pauses before the peer came; want a pause: %v", yields, pauses, tc.pause)
			}
		})
	}
}

// twoRankMem maps the shared memory of a 2-rank group in this process,
// unmapped when t ends.
func twoRankMem(t *testing.T) []byte {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, fileSize(2), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

// TestBarrierNapKeepsItsThreadOnOneP: with one P and nothing else to run,
// a rank's short naps in a barrier keep the P and their thread, with a
// timer slack of napSlack. Through the runtime's system call path, sysmon
// took the P from a sleeping thread and woke another on the rank's core,
// to which the rank's goroutine then often moved (6-13% of 20 µs naps),
// and each nap slept up to the default 50 µs slack past its end.
//
// Between two pauses the waiting goroutine only yields, which keeps its
// thread with one P when nothing else runs; so of two naps in the kernel
// in a row (each after a quick yield), the second found on another thread
// than the first moved in the first. A pause that parked (its yield took
// long: the OS ran something else, or another goroutine ran and may have
// handed the P to another thread) ends a pair.
func TestBarrierNapKeepsItsThreadOnOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	// A collection stops the world, which gives the P back to any
	// thread: not what this test looks for.
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	mem := twoRankMem(t)
	// The barrier's clock stops half way to napAfter: every pause is a
	// short nap, the kind this test is about. (By the real one, a wait that
	// a busy machine stretched past napAfter went on to long naps, through
	// the runtime with the default slack: "200 of 200 naps' threads had a
	// timer slack of 50µs", 1 run in 10 beside two busy processes.) Until
	// then it runs, so that the barrier's yields that take long still end
	// its yielding.
	var stop time.Time
	clock := func() time.Time {
		now := time.Now()
		if stop.IsZero() {
			stop = now.Add(napAfter / 2)
		}
		if now.After(stop) {
			return stop
		}
		return now
	}
	g0 := &Group{rank: 0, size: 2, timeout: time.Minute, mem: mem, slot: SlotBytes, oneP: true, clock: clock}
	peer := &Group{rank: 1, size: 2, mem: mem, slot: SlotBytes}
	const want, most = 200, 20000 // pairs of naps, pauses in all
	var pairs, moved, loose, pauses int
	lastTid, lastKernel := 0, false
	var slack time.Duration
	g0.paused = func(parked bool) {
		pauses++
		tid := unix.Gettid()
		if lastKernel && !parked {
			pairs++
			if tid != lastTid {
				moved++
			} else if s, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err == nil && time.Duration(s) > napSlack {
				loose++
				slack = time.Duration(s)
			}
		}
		lastTid, lastKernel = tid, !parked
		if pairs == want || pauses == most {
			atomic.StoreUint64(peer.counter(1), 1) // the peer arrives
		}
	}
	if err := g0.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if pairs < want {
		t.Fatalf("%d of %d pauses followed a nap in the kernel, want %d: the others parked as if other goroutines ran", pairs, pauses, want)
	}
	if moved > 0 {
		t.Errorf("the waiting goroutine changed threads in %d of %d naps, want none: a nap handed the P over", moved, pairs)
	}
	if loose > 0 {
		t.Errorf("%d of %d naps' threads had a timer slack of %v, want at most %v", loose, pairs, slack, napSlack)
	}
}

// onOneCore locks the calling goroutine to its thread and that thread to
// one core until t ends, so that getcpu stays put; it returns the core.
func onOneCore(t *testing.T) uint32 {
	t.Helper()
	runtime.LockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	core := -1
	for c := 0; c < 1024 && core < 0; c++ {
		if all.IsSet(c) {
			core = c
		}
	}
	var one unix.CPUSet
	one.Set(core)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.SchedSetaffinity(0, &all)
		runtime.UnlockOSThread()
	})
	return uint32(core)
}

// TestBarrierYieldsAtOnceToAPeerOnItsCore: the rank waited for last ran on
// this rank's core (two ranks the kernel put on one core of a busy
// machine, or more ranks than cores): it cannot arrive until this rank
// hands the core over, so the wait yields on its first scan instead of
// spinning 200 scans first.
func TestBarrierYieldsAtOnceToAPeerOnItsCore(t *testing.T) {
	core := onOneCore(t)
	mem := twoRankMem(t)
	g0 := &Group{rank: 0, size: 2, timeout: time.Minute, mem: mem, slot: SlotBytes, spinFar: time.Hour}
	peer := &Group{rank: 1, size: 2, mem: mem, slot: SlotBytes}
	atomic.StoreUint32(peer.cpuWord(1), core+1)
	scans, yieldAt := 0, -1
	g0.scanned = func() {
		scans++
		if scans == 1000 { // the test has failed: end the wait
			atomic.StoreUint64(peer.counter(1), 1)
		}
	}
	g0.yielding = func() {
		if yieldAt < 0 {
			yieldAt = scans
			atomic.StoreUint64(peer.counter(1), 1) // the peer arrives
		}
	}
	if err := g0.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if yieldAt != 1 {
		t.Errorf("the first yield came at scan %d (-1: none in 1000), want the first: the rank waited for shares this core", yieldAt)
	}
	if got := atomic.LoadUint32(g0.cpuWord(0)); got != core+1 {
		t.Errorf("rank 0 published core word %d, want %d (its core %d plus one)", got, core+1, core)
	}
}

// TestBarrierSpinsForAPeerOnAnotherCore: the rank waited for last ran on
// another core and the group has a core for each rank: the wait spins
// (no yield, no pause) for up to spinFar, and still fails at once for a
// peer that dies, and on the timeout for one that never comes.
func TestBarrierSpinsForAPeerOnAnotherCore(t *testing.T) {
	core := onOneCore(t)
	for _, end := range []string{"arrives", "dies", "silent"} {
		mem := twoRankMem(t)
		g0 := &Group{rank: 0, size: 2, timeout: time.Minute, mem: mem, slot: SlotBytes, spinFar: time.Hour}
		peer := &Group{rank: 1, size: 2, mem: mem, slot: SlotBytes}
		atomic.StoreUint32(peer.cpuWord(1), core+2) // another core
		if end == "silent" {
			g0.timeout = 50 * time.Millisecond
		}
		scans, yields, pauses := 0, 0, 0
		g0.scanned = func() {
			scans++
			if scans == 20000 {
				switch end {
				case "arrives":
					atomic.StoreUint64(peer.counter(1), 1)
				case "dies":
					atomic.StoreUint32(peer.status(1), statusDead)
				}
			}
		}
		g0.yielding = func() { yields++ }
		g0.paused = func(bool) { pauses++ }
		err := g0.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1})
		switch end {
		case "arrives":
			if err != nil {
				t.Fatal(err)
			}
		case "dies":
			if p, ok := collective.PeerOf(err); !ok || p != 1 || !errors.Is(err, collective.ErrPeerLost) {
				t.Errorf("peer died while rank 0 spun: got %v, want ErrPeerLost naming rank 1", err)
			}
		case "silent":
			if p, ok := collective.PeerOf(err); !ok || p != 1 || !errors.Is(err, collective.ErrTimeout) {
				t.Errorf("peer silent while rank 0 spun: got %v, want ErrTimeout naming rank 1", err)
			}
		}
		if end != "silent" && (yields > 0 || pauses > 0 || scans != 20000) {
			t.Errorf("peer %s at scan 20000 of a spin on another core: %d scans, %d yields and %d pauses before, want 20000 scans and none", end, scans, yields, pauses)
		}
	}
}

// TestBarrierSpinLetsOtherGoroutinesRunOnOneP: with GOMAXPROCS=1, a rank
// spinning for a peer on another core still lets the process's other
// goroutines run (the backward pass producing the next bucket).
func TestBarrierSpinLetsOtherGoroutinesRunOnOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	mem := twoRankMem(t)
	g0 := &Group{rank: 0, size: 2, timeout: 10 * time.Second, mem: mem, slot: SlotBytes, oneP: true, spinFar: time.Hour}
	g1 := &Group{rank: 1, size: 2, timeout: 10 * time.Second, mem: mem, slot: SlotBytes, oneP: true}
	atomic.StoreUint32(g1.cpuWord(1), 1<<16) // another core (65535)
	var started atomic.Bool
	scans, yields := 0, 0
	g0.scanned = func() {
		if !started.Load() {
			scans++
		}
	}
	g0.yielding = func() { yields++ }
	done := make(chan error, 1)
	go func() {
		started.Store(true)
		done <- g1.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1})
	}()
	if err := g0.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if scans > 1000 || yields > 0 {
		t.Errorf("rank 0 scanned %d times (%d yields) before the other goroutine ran, want at most 1000 and no yield: its spin held the only P", scans, yields)
	}
}
