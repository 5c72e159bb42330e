package trainer_test

import (
	"context"
	"sync"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// batchCounter logs 1 per validation batch with ReduceBy(Sum): the epoch's
// value is the number of batches (Lightning's reduce_fx="sum"), across ranks
// the job's.
type batchCounter struct{ evalReg }

func (m *batchCounter) ValidationStep(s *module.Step) error {
	one := G.Must(G.Add(G.Must(G.Mul(G.Must(G.Sum(s.Input("y"))), G.NewConstant(float32(0)))), G.NewConstant(float32(1))))
	s.Log("val_batches", one, module.ReduceBy(module.Sum))
	return nil
}

// TestReduceBySumAddsTheBatchesValues: a value logged with ReduceBy(Sum) is
// the sum of the batches' values. It was the sum of value × rows (the
// weighting of a mean), so 1 a batch over 70 rows gave 70, not 5.
func TestReduceBySumAddsTheBatchesValues(t *testing.T) {
	ctx := context.Background()
	ds := regression(t, 70, 0.01, 5)
	tr, err := trainer.New(quiet(trainer.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tr.Validate(ctx, &batchCounter{*newEvalReg()}, loader(t, ds, 16, false, false))
	if err != nil {
		t.Fatal(err)
	}
	if got["val_batches"] != 5 {
		t.Errorf("one device: val_batches %g, want 5 (70 rows in batches of 16)", got["val_batches"])
	}

	group, err := inproc.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]float64, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		d, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := trainer.New(quiet(trainer.Config{StrategyImpl: d, HandleSignals: trainer.Bool(false)}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tr.Teardown(ctx)
			var m map[string]float64
			m, errs[r] = tr.Validate(ctx, &batchCounter{*newEvalReg()}, loader(t, ds, 16, false, false))
			vals[r] = m["val_batches"]
		}()
	}
	wg.Wait()
	for r := range 2 {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if vals[r] != 6 {
			t.Errorf("rank %d: val_batches %g, want 6 (35 rows a rank in batches of 16: 3 a rank)", r, vals[r])
		}
	}
}
