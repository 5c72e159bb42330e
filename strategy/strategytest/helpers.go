package strategytest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"

	"github.com/rs/zerolog"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
)

// Each runs f for every process's strategy at once (in-process ranks must
// run their collectives concurrently) and returns every error, each prefixed
// with its rank.
func Each(strats []strategy.Strategy, f func(rank int, s strategy.Strategy) error) error {
	errs := make([]error, len(strats))
	var wg sync.WaitGroup
	for r, s := range strats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("panic: %v", p)
				}
			}()
			if err := f(r, s); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// SetupFor builds the float32 strategy.Setup of module m for the data fields
// of ds.
func SetupFor(m module.Module, fields []data.Field, seed uint64) (strategy.Setup, error) {
	return SetupForDtype(m, fields, seed, tensor.Float32)
}

// SetupForDtype is SetupFor with parameters of dtype (tensor.Float32 or
// tensor.Float64).
func SetupForDtype(m module.Module, fields []data.Field, seed uint64, dtype tensor.Dtype) (strategy.Setup, error) {
	b := module.NewBuilder(dtype)
	if err := m.Configure(b); err != nil {
		return strategy.Setup{}, err
	}
	specs, err := b.Specs()
	if err != nil {
		return strategy.Setup{}, err
	}
	newOpt := func() (optim.Optimizer, optim.Scheduler, error) {
		if oc, ok := m.(module.OptimizerConfigurer); ok {
			return oc.ConfigureOptimizers()
		}
		o, err := optim.NewSGD(optim.SGDConfig{LR: 0.01})
		return o, nil, err
	}
	return strategy.Setup{Module: m, Specs: specs, Dtype: dtype, Seed: seed, Fields: fields, NewOptimizer: newOpt, Log: zerolog.Nop()}, nil
}

// SetupAll sets every process up with m. Rank r gets seed+r, so that only a
// strategy that broadcasts rank 0's initial parameters ends up consistent.
func SetupAll(ctx context.Context, strats []strategy.Strategy, m module.Module, fields []data.Field, seed uint64) error {
	return setupAll(ctx, strats, m, fields, seed, tensor.Float32)
}

func setupAll(ctx context.Context, strats []strategy.Strategy, m module.Module, fields []data.Field, seed uint64, dtype tensor.Dtype) error {
	return Each(strats, func(r int, s strategy.Strategy) error {
		su, err := SetupForDtype(m, fields, seed+uint64(r), dtype)
		if err != nil {
			return err
		}
		return s.Setup(ctx, su)
	})
}

// Shard returns process p's rows of a global batch cut into P equal parts.
func Shard(b *data.Batch, p, P int) *data.Batch {
	if P == 1 {
		return b
	}
	per := b.Size / P
	lo, hi := p*per, (p+1)*per
	s := &data.Batch{Size: hi - lo, Fields: b.Fields, Data: make([][]float32, len(b.Data))}
	for f := range b.Data {
		w := b.Fields[f].Size()
		s.Data[f] = b.Data[f][lo*w : hi*w]
	}
	if b.Indices != nil {
		s.Indices = b.Indices[lo:hi]
	}
	if b.Pad != nil {
		s.Pad = b.Pad[lo:hi]
	}
	return s
}

// Step runs one optimizer step on every process: micro-batches are the
// global batches of an accumulation window, each cut into one shard per
// process. It returns rank 0's loss of the last micro-batch and gradient norm.
func Step(ctx context.Context, strats []strategy.Strategy, o strategy.OptimizerOptions, micro ...*data.Batch) (loss, norm float64, err error) {
	P := len(strats)
	losses, norms := make([]float64, P), make([]float64, P)
	err = Each(strats, func(r int, s strategy.Strategy) error {
		for i, b := range micro {
			res, err := s.Step(ctx, module.Train, Shard(b, r, P), strategy.TrainOptions{Sync: i == len(micro)-1, Accumulate: i > 0, Scale: 1 / float64(len(micro))})
			if err != nil {
				return err
			}
			losses[r] = res.Loss
		}
		n, err := s.OptimizerStep(ctx, o)
		norms[r] = n
		return err
	})
	return losses[0], norms[0], err
}

// Hashes returns every process's store hash.
func Hashes(strats []strategy.Strategy) []string {
	out := make([]string, len(strats))
	for i, s := range strats {
		if st := StoreOf(s); st != nil {
			out[i] = st.SHA256()
		}
	}
	return out
}

// StoreOf returns the store of a strategy that holds the whole model in
// this process (strategy.Replica), else nil.
func StoreOf(s strategy.Strategy) *module.Store {
	if r, ok := s.(strategy.Replica); ok {
		return r.Store()
	}
	return nil
}

// LiveHeap is the bytes of the Go heap's live objects after a full
// collection: what a test measures a rank's (or a run's) memory by.
func LiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
