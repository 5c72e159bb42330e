package tcp_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
)

// A ring built over a rendezvous the caller holds (NewRing, NewGroup)
// takes it over, as their docs say: closing the ring closes the
// rendezvous's connections too, and the caller closes the ring only.
func TestRingClosesItsRendezvous(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(context.Context, *rendezvous.Rendezvous) (collective.Collective, error)
	}{
		{"NewRing", func(ctx context.Context, rv *rendezvous.Rendezvous) (collective.Collective, error) {
			return tcp.NewRing(ctx, rv)
		}},
		{"NewGroup", func(ctx context.Context, rv *rendezvous.Rendezvous) (collective.Collective, error) {
			return tcp.NewGroup(ctx, rv)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfgs := configs(t, 2)
			rcs := make([]rendezvous.Config, len(cfgs))
			for r := range cfgs {
				rcs[r] = cfgs[r].Rendezvous()
			}
			rvs := meetAll(t, rcs)
			gs := make([]collective.Collective, len(rvs))
			errs := make([]error, len(rvs))
			var wg sync.WaitGroup
			for r := range rvs {
				wg.Go(func() { gs[r], errs[r] = tc.open(context.Background(), rvs[r]) })
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for _, g := range gs {
				g.Close()
			}
			for r, err := range exchangeAll(rvs) {
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("rank %d: an exchange over the rendezvous after the ring's Close: %v, want its connections closed (net.ErrClosed)", r, err)
				}
			}
		})
	}
}

// exchangeAll runs one Exchange on every rank side by side: it succeeds on
// every rank while their rendezvous are open.
func exchangeAll(rvs []*rendezvous.Rendezvous) []error {
	errs := make([]error, len(rvs))
	var wg sync.WaitGroup
	for r, rv := range rvs {
		wg.Go(func() { _, errs[r] = rv.Exchange(context.Background(), []byte("still open?")) })
	}
	wg.Wait()
	return errs
}
