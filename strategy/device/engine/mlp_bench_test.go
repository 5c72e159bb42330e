package engine

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/rs/zerolog"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/internal/cputime"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
)

// BenchmarkMLPStep is one training step of the mlp workload (batch 64,
// 784-256-128-10, Adam) on the engine: forward, backward, gradient gather,
// optimizer update. It uses OpenBLAS with one thread when installed (set
// FULGUR_BLAS=gonum to compare). Profile with
//
//	go test ./strategy/device/engine -run XXX -bench MLPStep -benchmem -cpuprofile cpu.out
func BenchmarkMLPStep(b *testing.B) {
	benchStep(b, func() trainable { return &models.MLP{} }, []bool{false, true}, 64)
}

// BenchmarkResNet8Step is the same for the resnet8 workload (batch 64,
// 1x28x28, Adam) on the executor: the trainer's step without the data
// loader, for A/B runs of kernel and engine changes.
//
//	go test ./strategy/device/engine -run XXX -bench ResNet8Step -count 5
func BenchmarkResNet8Step(b *testing.B) {
	benchStep(b, func() trainable { return &models.ResNet{} }, []bool{false}, 64)
}

// BenchmarkResNet8Step32 is BenchmarkResNet8Step at batch 32, a rank's
// batch in cmd/bench's scaling workload: on one core (GOMAXPROCS=1,
// FULGUR_WORKERS=1, taskset), its samples/s over BenchmarkResNet8Step's
// is that workload's half_batch_speed without the data loader.
//
//	GOMAXPROCS=1 FULGUR_WORKERS=1 taskset -c 0 go test ./strategy/device/engine -run XXX -bench 'ResNet8Step(32)?$' -count 5
func BenchmarkResNet8Step32(b *testing.B) {
	benchStep(b, func() trainable { return &models.ResNet{} }, []bool{false}, 32)
}

// trainable is a module with its own optimizer.
type trainable interface {
	module.Module
	module.OptimizerConfigurer
}

func benchStep(b *testing.B, newModule func() trainable, tapes []bool, size int) {
	lookup := func(k string) (string, bool) {
		if k == "FULGUR_BLAS_THREADS" {
			if v, ok := os.LookupEnv(k); ok {
				return v, ok
			}
			return "1", true
		}
		return os.LookupEnv(k)
	}
	c, err := blas.Choose(zerolog.Nop(), blas.ChooseOptions{Lookup: lookup})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("blas: %s", c.Impl.Name())
	for _, tape := range tapes {
		name := "exec"
		if tape {
			name = "tape"
		}
		b.Run(name, func(b *testing.B) {
			mod := newModule()
			bd := module.NewBuilder(tensor.Float32)
			if err := mod.Configure(bd); err != nil {
				b.Fatal(err)
			}
			specs, _ := bd.Specs()
			st, err := module.NewStore(specs, tensor.Float32, 1)
			if err != nil {
				b.Fatal(err)
			}
			fields := []data.Field{{Name: "x", Shape: []int{1, 28, 28}}, {Name: "y"}}
			e := New(mod, st, fields, 1)
			e.Tape = tape
			opt, _, err := mod.ConfigureOptimizers()
			if err != nil {
				b.Fatal(err)
			}
			np := st.NumParams()
			if err := opt.Bind(0, np); err != nil {
				b.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			batch := &data.Batch{Size: size, Fields: fields, Data: [][]float32{make([]float32, size*784), make([]float32, size)}}
			for i := range batch.Data[0] {
				batch.Data[0][i] = r.Float32()
			}
			for i := range batch.Data[1] {
				batch.Data[1][i] = float32(r.IntN(10))
			}
			ctx := context.Background()
			step := func() {
				if _, err := e.Run(ctx, module.Train, batch, false, 1); err != nil {
					b.Fatal(err)
				}
				opt.Begin()
				opt.Update32(st.Data32()[:np], st.Grad32(), 0)
			}
			for range 5 { // first runs allocate op buffers
				step()
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cputime.Now()
			for b.Loop() {
				step()
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "samples/s")
			// The process's CPU time a step: what a shared machine's
			// load moves far less than the wall time.
			b.ReportMetric(float64((cputime.Now()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
