//go:build linux

package shm_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/shm"
)

// A group built over a rendezvous the caller holds takes it over, as New's
// doc says: closing the group closes the rendezvous's connections too.
func TestGroupClosesItsRendezvous(t *testing.T) {
	cfgs := configs(t, 2)
	rvs := make([]*rendezvous.Rendezvous, len(cfgs))
	gs := make([]collective.Group, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for r := range cfgs {
		wg.Go(func() {
			if rvs[r], errs[r] = rendezvous.Meet(context.Background(), cfgs[r]); errs[r] == nil {
				gs[r], errs[r] = shm.New(context.Background(), rvs[r])
			}
		})
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
	for r, rv := range rvs {
		wg.Go(func() { _, errs[r] = rv.Exchange(context.Background(), []byte("still open?")) })
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("rank %d: an exchange over the rendezvous after the group's Close: %v, want its connections closed (net.ErrClosed)", r, err)
		}
	}
}
