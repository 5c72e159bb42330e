package inproc_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
)

func Example() {
	ranks, err := inproc.NewGroup(3)
	if err != nil {
		panic(err)
	}
	grads := [][]float32{{1, 2}, {10, 20}, {100, 200}}
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.AllReduce(context.Background(), grads[r], collective.Mean); err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println(grads[0], grads[2])
	// Output: [37 74] [37 74]
}

// Four ranks as two nodes of two: a sub-group per node (sharding) and one
// per local rank across nodes (replication), as hybrid sharding uses them.
func Example_subGroups() {
	ranks, err := inproc.NewGroup(4)
	if err != nil {
		panic(err)
	}
	nodes := [][]int{{0, 1}, {2, 3}}
	across := [][]int{{0, 2}, {1, 3}}
	sums := make([][]float32, 4)
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			node, err := collective.NewGroups(ctx, c, nodes)
			if err != nil {
				fmt.Println(err)
				return
			}
			defer node.Close()
			replica, err := collective.NewGroups(ctx, c, across)
			if err != nil {
				fmt.Println(err)
				return
			}
			defer replica.Close()
			sums[r] = []float32{float32(r), float32(r)}
			node.AllReduce(ctx, sums[r][:1], collective.Sum)
			replica.AllReduce(ctx, sums[r][1:], collective.Sum)
		}()
	}
	wg.Wait()
	fmt.Println("within a node:", sums[0][0], sums[2][0], "across nodes:", sums[0][1], sums[1][1])
	// Output: within a node: 1 5 across nodes: 2 4
}
