package ddp_test

import (
	"context"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/dp"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// BenchmarkStep measures one training step (forward, backward, gradient
// reduction, Adam) of a 784-256-10 perceptron at global batch 64: Single,
// DP on 2 replicas, and 2 in-process DDP and sharded ranks (inproc), so the
// cost of each strategy's bookkeeping shows against Single.
//
//	go test -run '^$' -bench Step -benchtime 200x ./strategy/ddp
func BenchmarkStep(b *testing.B) {
	m := &strategytest.MLP{In: 784, Hidden: 256, Out: 10, Optimizer: "adam", LR: 1e-3}
	ds, err := strategytest.Regression(64, 784, 10, 1)
	if err != nil {
		b.Fatal(err)
	}
	batch, _ := strategytest.Rows(ds, 0, 64)
	for _, tc := range []struct {
		name string
		mk   func() []strategy.Strategy
	}{
		{"single", func() []strategy.Strategy { return []strategy.Strategy{single.NewSingle()} }},
		{"dp2", func() []strategy.Strategy {
			d, _ := dp.NewDP(dp.DPConfig{Devices: cpus(2)})
			return []strategy.Strategy{d}
		}},
		{"ddp2", func() []strategy.Strategy { return ddpRanks(b, 2, 0, nil) }},
		{"sharded2", func() []strategy.Strategy { return shardedRanks(b, 2) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ranks := tc.mk()
			ctx := context.Background()
			if err := strategytest.SetupAll(ctx, ranks, m, ds.Fields(), 1); err != nil {
				b.Fatal(err)
			}
			defer strategytest.Each(ranks, func(_ int, s strategy.Strategy) error { return s.Teardown(ctx) })
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := strategytest.Step(ctx, ranks, strategy.OptimizerOptions{}, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// cpus opens n CPU devices.
func cpus(n int) []device.Device {
	devs, err := device.Open("cpu", n)
	if err != nil {
		panic(err)
	}
	return devs
}
