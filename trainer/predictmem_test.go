package trainer_test

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Under ddp, Predict gathers every rank's rows through the strategy's
// Reduce: 8 bytes per predicted value and per row count, as many again for
// the weights, and twice that in Reduce's scratch. Once Predict has
// returned and its predictions are dropped, the ranks must not keep any of
// it: before, each rank's Reduce kept its scratch, 32 bytes a row here,
// for the strategy's life.
func TestDDPPredictKeepsNoGatherBuffer(t *testing.T) {
	if testing.Short() {
		t.Skip("predicts 200 000 rows on two ranks")
	}
	ctx := context.Background()
	const n, world = 200000, 2
	ds := regression(t, n, 0.01, 5)
	group, err := inproc.NewGroup(world)
	if err != nil {
		t.Fatal(err)
	}
	teardownAtEnd(t, nil, group)
	trs := make([]*trainer.Trainer, world)
	for r := range trs {
		d, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
		if err != nil {
			t.Fatal(err)
		}
		if trs[r], err = trainer.New(quiet(trainer.Config{Seed: 3, StrategyImpl: d, HandleSignals: trainer.Bool(false)})); err != nil {
			t.Fatal(err)
		}
	}
	before := strategytest.LiveHeap()
	rows := make([]int, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r, tr := range trs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ys, err := tr.Predict(ctx, newEvalReg(), loader(t, ds, 1000, false, false))
			errs[r] = err
			for _, y := range ys {
				rows[r] += y.Shape()[0]
			}
		}()
	}
	wg.Wait()
	for r := range trs {
		if errs[r] != nil || rows[r] != n {
			t.Fatalf("rank %d: Predict gave %d rows, %v; want %d", r, rows[r], errs[r], n)
		}
	}
	grown := int64(strategytest.LiveHeap()) - int64(before)
	runtime.KeepAlive(trs)
	// Setup (the engine, a graph per batch size) keeps well under a
	// megabyte for this model; the scratch alone is 6.4 MB a rank.
	if limit := int64(n * 8); grown > limit {
		t.Errorf("the %d ranks kept %.1f MB after Predict returned and its results were dropped, want under %.1f MB (one float64 a row): the gather buffer stayed behind", world, float64(grown)/1e6, float64(limit)/1e6)
	}
}
