package replica_test

import (
	"fmt"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

// A strategy that shards (sharded, fsdp) cuts the flat parameters into
// units and gives rank r block r of each: Chunks lays a rank's blocks end
// to end into its shard, the span its optimizer is bound to. Here a model of
// 37 parameters in two units, fc1's 30 and fc2's 7, on two ranks.
//
// The optimizer's state over the shard goes into a state dict as spans of
// the global buffer (OptimizerChunks), so that a rank of another world size
// takes its own chunks from them (LoadOptimizerChunks): here rank 1 of
// three, from the two ranks' spans.
func ExampleChunks() {
	units := []engine.Unit{{Lo: 0, Hi: 30}, {Lo: 30, Hi: 37}}
	const np = 37
	sd := &strategy.StateDict{}
	for rank := range 2 {
		chunks, shardLen := replica.Chunks(units, 2, rank)
		fmt.Printf("rank %d of 2: chunks %v, shard of %d\n", rank, chunks, shardLen)
		// A stand-in for the optimizer's momentum over this shard: each
		// value is the index of its parameter.
		momentum := make([]float64, 0, shardLen)
		for _, c := range chunks {
			for i := c.Lo; i < c.Hi; i++ {
				momentum = append(momentum, float64(i))
			}
		}
		sd.Tensors = append(sd.Tensors, replica.OptimizerChunks("momentum", momentum, chunks, np)...)
	}
	for _, t := range sd.Tensors {
		fmt.Printf("%s [%d, %d)\n", t.Name, t.Lo, t.Hi)
	}

	chunks, shardLen := replica.Chunks(units, 3, 1)
	got, err := replica.LoadOptimizerChunks(sd, "momentum", chunks, shardLen)
	if err != nil {
		panic(err)
	}
	fmt.Printf("rank 1 of 3: chunks %v, momentum %v\n", chunks, got)
	// Output:
	// rank 0 of 2: chunks [{0 15 0} {30 34 15}], shard of 19
	// rank 1 of 2: chunks [{15 30 0} {34 37 15}], shard of 18
	// optimizer/momentum [0, 15)
	// optimizer/momentum [30, 34)
	// optimizer/momentum [15, 30)
	// optimizer/momentum [34, 37)
	// rank 1 of 3: chunks [{10 20 0} {33 35 10}], momentum [10 11 12 13 14 15 16 17 18 19 33 34]
}

// Seed gives each replica (or rank) its own dropout stream from the run's
// seed; replica 0 keeps the run's, so that one replica of a distributed
// run draws what Single draws.
func ExampleSeed() {
	const seed = 42
	seen := map[uint64]bool{}
	for i := range 4 {
		seen[replica.Seed(seed, i)] = true
	}
	fmt.Println("replica 0 draws as Single:", replica.Seed(seed, 0) == seed)
	fmt.Println("distinct streams of 4 replicas:", len(seen))
	// Output:
	// replica 0 draws as Single: true
	// distinct streams of 4 replicas: 4
}
