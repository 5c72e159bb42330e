//go:build linux

package nccl_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/nccl"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
)

// New takes the rendezvous over, as tcp's and shm's constructors do: the
// Comm keeps it for Split and its Close closes it. It was left open: ddp,
// which hands every backend its rendezvous and closes only the group,
// kept the star connections (and rank 0's listener) of a NCCL job until
// the process ended.
func TestCloseClosesTheRendezvous(t *testing.T) {
	lib := standin(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nop := zerolog.Nop()
	const n = 2
	rvs := make([]*rendezvous.Rendezvous, n)
	gs := make([]collective.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		rc := rendezvous.Config{Rank: r, Size: n, MasterAddr: "127.0.0.1", MasterPort: ln.Addr().(*net.TCPAddr).Port,
			Token: "t", BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop}
		if r == 0 {
			rc.Listener = ln
		}
		wg.Go(func() {
			if rvs[r], errs[r] = rendezvous.Meet(context.Background(), rc); errs[r] != nil {
				return
			}
			gs[r], errs[r] = nccl.New(context.Background(), rvs[r], nccl.Config{NCCLPath: lib, CUDARTPath: lib, Timeout: 20 * time.Second})
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
			t.Errorf("rank %d: an exchange over the rendezvous after the Comm's Close: %v, want its connections closed (net.ErrClosed)", r, err)
		}
	}
	for _, rv := range rvs {
		rv.Close()
	}
}
