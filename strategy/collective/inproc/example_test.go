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
