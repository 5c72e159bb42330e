//go:build linux

package shm_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/collectivetest"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/shm"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
	"github.com/rs/zerolog"
)

func configs(t testing.TB, n int) []rendezvous.Config {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nop := zerolog.Nop()
	cfgs := make([]rendezvous.Config, n)
	for r := range cfgs {
		cfgs[r] = rendezvous.Config{Rank: r, Size: n, MasterAddr: "127.0.0.1", MasterPort: ln.Addr().(*net.TCPAddr).Port,
			Token: "t", BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop}
	}
	cfgs[0].Listener = ln
	return cfgs
}

func build(t testing.TB, n int, open func(context.Context, *rendezvous.Rendezvous) (collective.Group, error)) []collective.Collective {
	t.Helper()
	cfgs := configs(t, n)
	return collectivetest.Start(t, n, func(r int) (collective.Collective, error) {
		rv, err := rendezvous.Meet(context.Background(), cfgs[r])
		if err != nil {
			return nil, err
		}
		g, err := open(context.Background(), rv)
		if err != nil {
			rv.Close()
			return nil, err
		}
		return g, nil
	})
}

func TestConformance(t *testing.T) {
	collectivetest.RunAll(t, func(t *testing.T, n int) []collective.Collective {
		if n == 1 { // one rank has nobody to share with: Auto falls back
			return build(t, n, func(ctx context.Context, rv *rendezvous.Rendezvous) (collective.Group, error) {
				return shm.Auto(ctx, rv, tcp.NewGroup)
			})
		}
		return build(t, n, shm.New)
	})
}

func TestAutoPicksSharedMemory(t *testing.T) {
	cs := build(t, 2, func(ctx context.Context, rv *rendezvous.Rendezvous) (collective.Group, error) {
		return shm.Auto(ctx, rv, func(context.Context, *rendezvous.Rendezvous) (collective.Group, error) {
			return nil, errors.New("Auto fell back for two ranks on one host")
		})
	})
	type unwrapper interface{ Unwrap() collective.Collective }
	for r, c := range cs {
		inner := c.(unwrapper).Unwrap()
		if _, ok := inner.(*shm.Group); !ok {
			t.Errorf("rank %d: Auto chose %T for two ranks on one host, want *shm.Group", r, inner)
		}
	}
}

func BenchmarkAllReduce(b *testing.B) {
	for _, size := range []int{4 << 20, 25 << 20} {
		b.Run(strconv.Itoa(size>>20)+"MB", func(b *testing.B) {
			cs := build(b, 2, shm.New)
			bufs := [][]float32{make([]float32, size/4), make([]float32, size/4)}
			b.SetBytes(int64(size))
			b.ResetTimer()
			var wg sync.WaitGroup
			for r, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < b.N; i++ {
						if err := c.AllReduce(context.Background(), bufs[r], collective.Sum); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// TestSilentPeer: rank 2 never joins; the others fail with ErrTimeout
// naming it (its counter is the one that stopped).
func TestSilentPeer(t *testing.T) {
	cfgs := configs(t, 3)
	cs := make([]collective.Collective, 3)
	var wg sync.WaitGroup
	for r := range cfgs {
		cfgs[r].Timeout = 300 * time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			rv, err := rendezvous.Meet(context.Background(), cfgs[r])
			if err != nil {
				t.Error(err)
				return
			}
			cs[r], err = shm.New(context.Background(), rv)
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	errs := make([]error, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = cs[r].AllReduce(context.Background(), make([]float32, 1<<16), collective.Sum)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if p, ok := collective.PeerOf(err); !ok || p != 2 || !errors.Is(err, collective.ErrTimeout) {
			t.Errorf("rank %d: got %v, want ErrTimeout naming rank 2", r, err)
		}
	}
}
