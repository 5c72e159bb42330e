package inproc_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/collectivetest"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
)

func newGroup(t *testing.T, n int) []collective.Collective {
	cs, err := inproc.NewGroup(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

func TestConformance(t *testing.T) { collectivetest.RunAll(t, newGroup) }

func run(cs []collective.Collective, f func(c collective.Collective) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(c) }()
	}
	wg.Wait()
	return errs
}

func TestKillRank(t *testing.T) {
	cs, err := inproc.NewGroup(3, inproc.KillRank(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ops := 0
	errs := run(cs, func(c collective.Collective) error {
		for i := 0; i < 5; i++ {
			if err := c.AllReduce(ctx, []float64{1, 2}, collective.Sum); err != nil {
				return err
			}
			if c.Rank() == 0 {
				ops++
			}
		}
		return nil
	})
	if ops != 2 {
		t.Errorf("rank 0 completed %d operations, want 2 before rank 1 dies", ops)
	}
	if !errors.Is(errs[1], collective.ErrClosed) {
		t.Errorf("killed rank 1: got %v, want ErrClosed", errs[1])
	}
	for _, r := range []int{0, 2} {
		if p, ok := collective.PeerOf(errs[r]); !ok || p != 1 || !errors.Is(errs[r], collective.ErrPeerLost) {
			t.Errorf("rank %d: got %v, want ErrPeerLost naming rank 1", r, errs[r])
		}
	}
}

func TestDelayRankAndTimeout(t *testing.T) {
	cs, err := inproc.NewGroup(2, inproc.DelayRank(1, time.Hour), inproc.Timeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cs[1].Barrier(ctx) // sleeps an hour until cancel
	err = cs[0].Barrier(ctx)
	if p, ok := collective.PeerOf(err); !ok || p != 1 || !errors.Is(err, collective.ErrTimeout) {
		t.Errorf("got %v, want ErrTimeout naming rank 1", err)
	}
}

func TestBitwiseReproducible(t *testing.T) {
	// Values whose float32 sum depends on the order of addition.
	in := [][]float32{{1e8, 1}, {1, 1e8}, {-1e8, 3}, {0.5, -1e8}}
	for trial := 0; trial < 20; trial++ {
		cs, _ := inproc.NewGroup(4)
		bufs := make([][]float32, 4)
		for r := range bufs {
			bufs[r] = append([]float32(nil), in[r]...)
		}
		run(cs, func(c collective.Collective) error {
			return c.AllReduce(context.Background(), bufs[c.Rank()], collective.Sum)
		})
		want := []float32{((in[0][0] + in[1][0]) + in[2][0]) + in[3][0], ((in[0][1] + in[1][1]) + in[2][1]) + in[3][1]}
		for r := range bufs {
			if bufs[r][0] != want[0] || bufs[r][1] != want[1] {
				t.Fatalf("trial %d rank %d: %v, want rank-order sum %v", trial, r, bufs[r], want)
			}
		}
	}
}

func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		n    int
		opts []inproc.Option
	}{
		{0, nil},
		{2, []inproc.Option{inproc.KillRank(2, 1)}},
		{2, []inproc.Option{inproc.KillRank(0, -1)}},
		{2, []inproc.Option{inproc.DelayRank(-1, time.Second)}},
		{2, []inproc.Option{inproc.Timeout(0)}},
	} {
		if _, err := inproc.NewGroup(tc.n, tc.opts...); err == nil {
			t.Errorf("NewGroup(%d, %d options) accepted bad input", tc.n, len(tc.opts))
		}
	}
}
