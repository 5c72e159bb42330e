package infer_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
)

// A Predict call allocates its returned copy and little else, and a
// service's calls leave nothing behind: the heap after 10,000 calls is
// what it was after the first.
func TestPredictAllocationsAndGrowth(t *testing.T) {
	for _, a := range archs {
		t.Run(a.name, func(t *testing.T) {
			m, err := infer.New(a.new(), infer.Config{Inputs: []data.Field{xField}, InitialWeights: true})
			if err != nil {
				t.Fatal(err)
			}
			b, err := m.Batch(1, randomX(1, 1))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			run := func() {
				if _, err := m.Predict(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			run()
			allocs := testing.AllocsPerRun(100, run)
			t.Logf("%v allocations per Predict", allocs)
			if allocs > 6 {
				t.Errorf("%v allocations per Predict of one row, want at most 6 (the output's copy and its header)", allocs)
			}
			heap := func() uint64 {
				var ms runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms)
				return ms.HeapAlloc
			}
			before := heap()
			for range 10000 {
				run()
			}
			after := heap()
			runtime.KeepAlive(m)
			t.Logf("heap %d bytes before 10,000 calls, %d after", before, after)
			if after > before+256<<10 {
				t.Errorf("the heap grew by %d bytes over 10,000 calls", after-before)
			}
		})
	}
}

// BenchmarkPredictBatch1 is a service's latency for one example: the
// README's MLP (784-256-128-10) and resnet8, one row of 28x28, float32.
func BenchmarkPredictBatch1(b *testing.B) {
	for _, c := range []struct {
		name string
		mod  module.Module
	}{{"mlp", &models.MLP{}}, {"resnet8", &models.ResNet{}}} {
		b.Run(c.name, func(b *testing.B) {
			m, err := infer.New(c.mod, infer.Config{Inputs: []data.Field{{Name: "x", Shape: []int{1, 28, 28}}}, InitialWeights: true})
			if err != nil {
				b.Fatal(err)
			}
			x := make([]float32, 784)
			for i := range x {
				x[i] = float32(i%17) / 17
			}
			batch, err := m.Batch(1, x)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Predict(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
