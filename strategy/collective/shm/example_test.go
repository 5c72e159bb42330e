//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/shm"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
)

// Auto meets at the rendezvous and, finding every rank on this host, picks
// shared memory (else the TCP ring, its fallback here). Ranks are goroutines here; in a job they are processes.
func ExampleAuto() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	bufs := [][]float32{{1, 2}, {3, 4}}
	var wg sync.WaitGroup
	for rank := range 2 {
		cfg := rendezvous.Config{Rank: rank, Size: 2, MasterAddr: "127.0.0.1", MasterPort: port, Token: "s3cret", BindAddr: "127.0.0.1"}
		if rank == 0 {
			cfg.Listener = ln
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rv, err := rendezvous.Meet(context.Background(), cfg)
			if err != nil {
				fmt.Println(err)
				return
			}
			g, err := shm.Auto(context.Background(), rv, tcp.NewGroup)
			if err != nil {
				fmt.Println(err)
				return
			}
			defer g.Close()
			if err := g.AllReduce(context.Background(), bufs[rank], collective.Max); err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println(bufs[0], bufs[1])
	// Output: [3 4] [3 4]
}
