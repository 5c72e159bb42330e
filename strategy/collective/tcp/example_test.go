package tcp_test

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
)

// Two ranks on loopback. In a real job each rank is its own process and gets
// Rank, Size, MasterAddr, MasterPort from strategy/cluster and Token from
// FULGUR_TOKEN.
func Example() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0") // rank 0's rendezvous port
	port := ln.Addr().(*net.TCPAddr).Port
	grads := [][]float64{{1, 2, 3}, {10, 20, 30}}
	var wg sync.WaitGroup
	for rank := range 2 {
		cfg := tcp.Config{Rank: rank, Size: 2, MasterAddr: "127.0.0.1", MasterPort: port, Token: "s3cret", BindAddr: "127.0.0.1"}
		if rank == 0 {
			cfg.Listener = ln
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := tcp.New(context.Background(), cfg)
			if err != nil {
				fmt.Println(err)
				return
			}
			defer g.Close()
			if err := g.AllReduce(context.Background(), grads[rank], collective.Sum); err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println(grads[0], grads[1])
	// Output: [11 22 33] [11 22 33]
}
