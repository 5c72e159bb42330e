package trainer_test

import (
	"context"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
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

	vals := make([]float64, 2)
	_, errs := onRanks(t, 2, ddpRank(t), func(int) trainer.Config { return quiet(trainer.Config{}) }, func(r int, tr *trainer.Trainer) error {
		defer tr.Teardown(ctx)
		m, err := tr.Validate(ctx, &batchCounter{*newEvalReg()}, loader(t, ds, 16, false, false))
		vals[r] = m["val_batches"]
		return err
	})
	for r := range 2 {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if vals[r] != 6 {
			t.Errorf("rank %d: val_batches %g, want 6 (35 rows a rank in batches of 16: 3 a rank)", r, vals[r])
		}
	}
}
