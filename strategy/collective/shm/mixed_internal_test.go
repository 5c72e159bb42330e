//go:build linux

package shm

import (
	"context"
	"math"
	"math/rand"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// TestAllReducePairMixedRun: two ranks on cores of their own run the
// benchmark's loop (a barrier, a 256 KiB all-reduce, a one-element max),
// each at its own pace, and each rank publishes its whole part or half of
// it at random (a P lent to other work, or not): every all-reduce gives the
// rank-order bits, and the ranks agree on every operation. A rank that
// published whole and came together with a whole peer must not take the
// peer's next operation's whole part for a half of this one: the ranks
// then disagreed on the split, and one ran ahead of the other's barriers.
func TestAllReducePairMixedRun(t *testing.T) {
	gs := pairGroups(t)
	for r := range gs {
		core := uint32(3 + r)
		gs[r].coreOf = func() uint32 { return core }
	}
	n := 65536
	want := pairData[float32](0, n)
	collective.ReduceTo(want, want, pairData[float32](1, n), collective.Sum)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range gs {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(r)))
			g := gs[r]
			part := pairData[float32](r, n)
			buf := make([]float32, n)
			one := []float64{float64(r)}
			ctx := context.Background()
			for i := range 2000 {
				g.lentSeq = 0
				if rng.Intn(2) == 0 {
					g.lentSeq = g.seq + 1 // the next operation publishes whole
				}
				copy(buf, part)
				if err := g.do(ctx, collective.KindBarrier, nil, nil, 0, 0); err != nil {
					errs[r] = err
					return
				}
				if err := g.do(ctx, collective.KindAllReduce, buf, nil, collective.Sum, 0); err != nil {
					errs[r] = err
					return
				}
				for j := range want {
					if math.Float32bits(buf[j]) != math.Float32bits(want[j]) {
						errs[r] = &collective.Error{Backend: "test", Self: r, Seq: uint64(i), Peer: -1, Err: collective.ErrMismatch}
						return
					}
				}
				if err := g.do(ctx, collective.KindAllReduce, one, nil, collective.Max, 0); err != nil {
					errs[r] = err
					return
				}
			}
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
