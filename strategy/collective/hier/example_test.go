package hier_test

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/hier"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/shm"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
)

// Four ranks on two nodes of two, as ddp composes them when ranks run on
// several hosts: the whole job's flat group is a TCP ring, each node's
// ranks share memory, and hier.New puts the two levels together. (Here the
// four ranks are goroutines of one process on one host, told that they
// run on two.) An all-reduce sums inside each node, across the nodes among
// the ranks with the same local index, and hands the result back inside
// each node: every rank ends with the job's sum, as over the flat group.
func ExampleNew() {
	hosts := []string{"node-a", "node-a", "node-b", "node-b"} // rank r runs on hosts[r]
	shape := hier.ShapeOf(hosts)
	ok, _ := shape.Qualifies()
	fmt.Printf("%v: qualifies %v\n", shape, ok)
	// An uneven layout does not: hier.New would work, for nothing.
	uneven := hier.ShapeOf([]string{"node-a", "node-a", "node-b"})
	ok, why := uneven.Qualifies()
	fmt.Printf("%v: qualifies %v, %s\n", uneven, ok, why)

	// Rank 0 accepts the others here (a job sets MASTER_ADDR and
	// MASTER_PORT); port 0 picks a free one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	sums := make([][]float32, len(hosts))
	means := make([][]float64, len(hosts))
	var wg sync.WaitGroup
	for r := range hosts {
		wg.Go(func() {
			ctx := context.Background()
			cfg := rendezvous.Config{Rank: r, Size: len(hosts), MasterAddr: "127.0.0.1", MasterPort: ln.Addr().(*net.TCPAddr).Port, Token: "example", BindAddr: "127.0.0.1"}
			if r == 0 {
				cfg.Listener = ln
			}
			rv, err := rendezvous.Meet(ctx, cfg)
			if err != nil {
				panic(err)
			}
			flat, err := tcp.NewRing(ctx, rv) // closes rv when closed
			if err != nil {
				panic(err)
			}
			// This rank's group of its node's ranks: shared memory, over a
			// rendezvous split from the flat group's.
			local := func(ctx context.Context, color, key int) (collective.Collective, error) {
				return rendezvous.SplitGroup(ctx, rv, flat, color, key, func(ctx context.Context, sub *rendezvous.Rendezvous) (collective.Collective, error) {
					return shm.Auto(ctx, sub, tcp.NewGroup)
				})
			}
			g, err := hier.New(ctx, flat, shape, local)
			if err != nil {
				panic(err)
			}
			defer g.Close() // closes flat and the groups New built too

			sums[r] = []float32{float32(r + 1), float32(10 * (r + 1)), float32(100 * (r + 1))}
			if err := g.AllReduce(ctx, sums[r], collective.Sum); err != nil {
				panic(err)
			}
			means[r] = []float64{float64(r), float64(r * r)}
			if err := g.AllReduce(ctx, means[r], collective.Mean); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	for r := range hosts {
		fmt.Printf("rank %d on %s: sum %v, mean %v\n", r, hosts[r], sums[r], means[r])
	}
	// Output:
	// 2 nodes x 2 ranks: qualifies true
	// 3 ranks on 2 nodes, unevenly: qualifies false, the nodes run different numbers of ranks
	// rank 0 on node-a: sum [10 100 1000], mean [1.5 3.5]
	// rank 1 on node-a: sum [10 100 1000], mean [1.5 3.5]
	// rank 2 on node-b: sum [10 100 1000], mean [1.5 3.5]
	// rank 3 on node-b: sum [10 100 1000], mean [1.5 3.5]
}
