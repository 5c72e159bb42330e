package main

import (
	"context"
	"fmt"
	"time"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
	"github.com/fulgur-ml/fulgur/trainer"
)

// overhead: the mlp epoch through Trainer.Fit against the same model graph
// and optimizer driven by a plain loop with no trainer, strategy, data
// loader or callbacks: every shuffled batch is read into memory before the
// timed loop (so the loop pays nothing for data), then each step runs the
// compiled graph (forward and backward) and Adam over the flat parameters.
// The ratio of wall times (trainer / plain) is what the framework costs,
// its data pipeline included.
// "plain-tape" runs the same loop on Gorgonia's TapeMachine instead of the
// engine's executor: what a plain Gorgonia program would get.
func init() {
	register(&workload{
		Name: "overhead",
		Doc:  "mlp epoch through Trainer.Fit vs the same graph and optimizer in a plain loop; ratio of wall times",
		Configs: func(o *Options) ([]Config, error) {
			var cs []Config
			for _, v := range []string{"plain", "trainer", "plain-tape"} {
				cs = append(cs, Config{Workload: "overhead", Impl: "fulgur", Variant: v, Threads: o.Threads[0], BLAS: o.BLAS[0],
					Batch: orDefault(o.Batch, 64), Epochs: 1, Steps: o.Steps, Seed: o.Seed, Data: o.Data})
			}
			return cs, nil
		},
		Run: func(ctx context.Context, c Config) (Figures, error) {
			switch c.Variant {
			case "trainer":
				return trainJob{Config: c, Module: &models.MLP{}, Strategy: "single"}.run(ctx)
			case "plain", "plain-tape":
				return plainLoop(ctx, c, c.Variant == "plain-tape")
			}
			return nil, fmt.Errorf("overhead: unknown variant %q", c.Variant)
		},
		Derive: func(o *Options, rs []*Result) []Row {
			by := map[string]*Result{}
			for _, r := range rs {
				by[r.Config.Variant] = r
			}
			var rows []Row
			for _, v := range []string{"trainer", "plain-tape"} {
				a, p := by[v], by["plain"]
				if a == nil || p == nil {
					continue
				}
				var ratio []float64
				for run := 0; run < min(len(a.Runs), len(p.Runs)); run++ {
					// Same samples in both: the wall-time ratio is the
					// inverse ratio of samples/s.
					if s := a.Runs[run]["samples_per_s"]; s > 0 {
						ratio = append(ratio, p.Runs[run]["samples_per_s"]/s)
					}
				}
				if len(ratio) > 0 {
					rows = append(rows, Row{Workload: "overhead", Config: v + "/plain wall time", N: len(ratio),
						Labels: map[string]any{"variant": v}, Figures: map[string]Stat{"ratio": stat(ratio)}})
				}
			}
			return rows
		},
	})
}

// plainLoop trains the mlp for one epoch with the engine alone (or the
// TapeMachine) and a hand-written batch loop, timed like trainJob: batches
// 2..n, allocations over the steady batches.
func plainLoop(ctx context.Context, c Config, tape bool) (Figures, error) {
	log := childLog()
	blasName, err := chooseBLAS(log)
	if err != nil {
		return nil, err
	}
	train, test, _, err := data.OpenFashionMNIST(c.Data)
	if err != nil {
		return nil, err
	}
	mod := &models.MLP{}
	b := module.NewBuilder(tensor.Float32)
	if err := mod.Configure(b); err != nil {
		return nil, err
	}
	specs, err := b.Specs()
	if err != nil {
		return nil, err
	}
	store, err := module.NewStore(specs, tensor.Float32, c.Seed)
	if err != nil {
		return nil, err
	}
	eng := engine.New(mod, store, train.Fields(), c.Seed)
	eng.Tape = tape
	opt, _, err := mod.ConfigureOptimizers()
	if err != nil {
		return nil, err
	}
	np := store.NumParams()
	if err := opt.Bind(0, np); err != nil {
		return nil, err
	}
	log.Info().Str("blas", blasName).Str("config", c.Label()).Msg("overhead plain loop")

	bs := c.Batch
	nb := train.Len() / bs
	if c.Steps > 0 && c.Steps < nb {
		nb = c.Steps
	}
	perm := data.Permutation(c.Seed, 0, train.Len())
	all := newBatch(train.Fields(), nb*bs)
	if err := fillBatch(train, all, perm[:nb*bs], make([][]float32, len(all.Fields))); err != nil {
		return nil, err
	}
	batch := &data.Batch{Size: bs, Fields: all.Fields, Data: make([][]float32, len(all.Fields))}
	timer := &trainTimer{now: time.Now, lastBatch: nb - 1}
	var st trainerState
	t0 := time.Now()
	for bi := 0; bi < nb; bi++ {
		for f, fd := range all.Fields {
			w := bs * fd.Size()
			batch.Data[f] = all.Data[f][bi*w : (bi+1)*w]
		}
		if _, err := eng.Run(ctx, module.Train, batch, false, 1); err != nil {
			return nil, err
		}
		opt.Begin()
		opt.Update32(store.Data32()[:np], store.Grad32(), 0)
		st.BatchIdx = bi
		timer.OnTrainBatchEnd(ctx, &st.State)
	}
	fitSeconds := time.Since(t0).Seconds()
	acc, err := plainTest(ctx, eng, test)
	if err != nil {
		return nil, err
	}
	return Figures{
		"samples_per_s":     float64(timer.steps*bs) / timer.total.Seconds(),
		"allocs_per_step":   timer.allocs,
		"samples_per_cpu_s": float64(timer.steps*bs) / timer.cpu.Seconds(),
		"test_acc":          acc,
		"steps":             float64(nb),
		"seconds":           fitSeconds,
	}, nil
}

// newBatch makes a batch of rows examples of fields.
func newBatch(fields []data.Field, rows int) *data.Batch {
	b := &data.Batch{Size: rows, Fields: fields, Data: make([][]float32, len(fields))}
	for f, fd := range fields {
		b.Data[f] = make([]float32, rows*fd.Size())
	}
	return b
}

// fillBatch reads the examples idx into b; dst is reused scratch with one
// slot per field.
func fillBatch(ds data.Dataset, b *data.Batch, idx []int, dst [][]float32) error {
	b.Size = len(idx)
	for r, i := range idx {
		for f, fd := range b.Fields {
			w := fd.Size()
			dst[f] = b.Data[f][r*w : (r+1)*w]
		}
		if err := ds.Read(i, dst); err != nil {
			return err
		}
	}
	return nil
}

// plainTest is the test accuracy over ds in batches of 256.
func plainTest(ctx context.Context, eng *engine.Engine, ds data.Dataset) (float64, error) {
	const bs = 256
	var sum, n float64
	for lo := 0; lo < ds.Len(); lo += bs {
		hi := min(lo+bs, ds.Len())
		idx := make([]int, hi-lo)
		for i := range idx {
			idx[i] = lo + i
		}
		b := newBatch(ds.Fields(), len(idx))
		if err := fillBatch(ds, b, idx, make([][]float32, len(b.Fields))); err != nil {
			return 0, err
		}
		res, err := eng.Run(ctx, module.Test, b, false, 1)
		if err != nil {
			return 0, err
		}
		for _, m := range res.Metrics {
			if m.Name == "test_acc" {
				sum += m.Value * m.Weight
				n += m.Weight
			}
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("the test step logged no test_acc")
	}
	return sum / n, nil
}

// trainerState lets the plain loop drive trainTimer like the trainer does.
type trainerState struct{ trainer.State }
