package strategytest_test

import (
	"fmt"

	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// Shard is how the suite hands each in-process rank its part of a global
// batch.
func ExampleShard() {
	ds, err := strategytest.Regression(6, 2, 1, 1)
	if err != nil {
		panic(err)
	}
	b, err := strategytest.Rows(ds, 0, 6)
	if err != nil {
		panic(err)
	}
	for r := 0; r < 3; r++ {
		fmt.Println(r, strategytest.Shard(b, r, 3).Indices)
	}
	// Output:
	// 0 [0 1]
	// 1 [2 3]
	// 2 [4 5]
}
