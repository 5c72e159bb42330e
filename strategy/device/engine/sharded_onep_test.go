package engine_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
)

// With one P (a rank pinned to one core), a goroutine woken by a sharded
// engine's first gather or reduction (the collective moving it) runs while
// the run still computes, without the strategy saying that anything is in
// flight: the engine yields between steps while a Wait it was handed is not
// yet waited for. A gather prefetched during the forward pass gets the core
// before the forward pass ends; a reduction before the last unit's gradient
// is handed over, at the end of backward. The callbacks' waits return at
// once (the work they start needs nothing back), so the engine never
// blocks on the goroutine: without the yields it would run only once the
// run ended and the caller blocked (or sysmon preempted the run after
// 10 ms).
func TestShardedCommunicationRunsDuringTheRunOnOneP(t *testing.T) {
	// Kernels on one goroutine, as a rank pinned to one core runs them
	// (blas.Plan): a kernel waiting for its own pool goroutines would give
	// the P to the collective's goroutine too.
	ops.SetLoopWorkers(1)
	ops.SetImageWorkers(1)
	t.Cleanup(func() { ops.SetLoopWorkers(0); ops.SetImageWorkers(0) })
	mod, specs := resNetSpecs(t)
	_, master := resNetStore(t) // the parameters gathers give
	var units []engine.Unit     // one per learnable tensor
	for _, en := range master.Entries() {
		if !en.Buffer {
			units = append(units, engine.Unit{Lo: en.Offset, Hi: en.Offset + en.Len})
		}
	}
	fields := []data.Field{{Name: "x", Shape: []int{1, 28, 28}}, {Name: "y"}}
	batch := &data.Batch{Size: 4, Fields: fields, Data: [][]float32{make([]float32, 4*28*28), make([]float32, 4)}}
	for i := range batch.Data[0] {
		batch.Data[0][i] = float32(i%7) / 7
	}
	done := func() error { return nil }
	for _, gather := range []bool{false, true} {
		name := map[bool]string{false: "reduce", true: "gather"}[gather]
		t.Run(name, func(t *testing.T) {
			// What the engine had done when the goroutine ran.
			type progress struct {
				reduced    int32
				forwardRan bool
			}
			var reduced, gathered atomic.Int32
			var forwardRan atomic.Bool
			work := make(chan struct{})
			saw := make(chan progress, 1)
			go func() { // the collective's goroutine
				<-work
				saw <- progress{reduced.Load(), forwardRan.Load()}
			}()
			armed := false // the callbacks run on the test's goroutine, in Run
			sh := &engine.Sharding{Units: units, Reduce: func(_ context.Context, _ int, _ any) engine.Wait {
				if reduced.Add(1) == 1 && armed && !gather {
					close(work)
				}
				return done
			}}
			st, err := module.NewStoreWithoutGrad(specs, tensor.Float32, 1)
			if gather {
				st, err = module.NewLayoutStore(specs, tensor.Float32, 1, nil)
				sh.Gather = func(_ context.Context, u int, dst any) engine.Wait {
					copy(dst.([]float32), master.Data32()[units[u].Lo:units[u].Hi])
					if gathered.Add(1) == 1 && armed {
						close(work)
					}
					return done
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			e := engine.New(mod, st, fields, 1, engine.WithSharding(sh))
			e.SetBeforeBackward(func(float64) error {
				forwardRan.Store(true)
				return nil
			})
			// A first run allocates the engine's buffers, so that the run
			// watched neither allocates nor lets the collector take the P.
			ctx := context.Background()
			if _, err := e.Run(ctx, module.Train, batch, false, 1); err != nil {
				t.Fatal(err)
			}
			reduced.Store(0)
			gathered.Store(0)
			forwardRan.Store(false)
			armed = true
			runtime.GC()
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			if _, err := e.Run(ctx, module.Train, batch, false, 1); err != nil {
				t.Fatal(err)
			}
			p := <-saw
			switch {
			case gather && p.forwardRan:
				t.Error("the goroutine woken by the first gather ran only after the forward pass: under GOMAXPROCS=1 a sharded engine must yield between steps while a gather it started is not waited for")
			case !gather && p.reduced == reduced.Load():
				t.Errorf("the goroutine woken by the first reduction ran only after all %d reductions were handed over: under GOMAXPROCS=1 a sharded engine must yield between backward steps while a reduction it started is not waited for", p.reduced)
			}
		})
	}
}
