//go:build linux

package shm

import (
	"context"
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
	for _, status := range []uint32{statusClosed, statusDead} {
		mem, err := unix.Mmap(-1, 0, fileSize(2), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(mem)
		g := &Group{rank: 1, size: 2, timeout: time.Second, mem: mem, slot: SlotBytes}
		peer := &Group{rank: 0, size: 2, mem: mem, slot: SlotBytes}
		g.scanned = func() {
			// Rank 0 arrives, passes and leaves.
			if atomic.LoadUint64(peer.counter(0)) == 0 {
				atomic.StoreUint64(peer.counter(0), 1)
				atomic.StoreUint32(peer.status(0), status)
			}
		}
		if err := g.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 1}); err != nil {
			t.Errorf("status %d: rank 1's barrier: %v; want it passed (rank 0 reached it before leaving)", status, err)
		}
		// A peer that left without reaching the barrier still fails it.
		g.scanned = nil
		if err := g.barrier(context.Background(), collective.Header{Kind: collective.KindBarrier, Seq: 2}); err == nil {
			t.Errorf("status %d: a barrier that rank 0 never reached passed", status)
		}
	}
}
