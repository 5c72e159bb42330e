package trainer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/trainer"
)

// TestOverfitBatchesTrainsOnTheSameBatches: with OverfitBatches 2 and a
// shuffling loader of 8 batches, every epoch trains on the data set's
// first two batches, in order, and validation runs on the validation
// loader's first two; the training loss of those batches falls towards
// zero.
func TestOverfitBatchesTrainsOnTheSameBatches(t *testing.T) {
	ds := regression(t, 128, 0.01, 4)
	vds := regression(t, 64, 0.01, 5)
	s := &modeLog{Strategy: single.NewSingle()}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 100, Seed: 2, OverfitBatches: 2, StrategyImpl: s, DisableSanityCheck: true}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, true, false), loader(t, vds, 16, true, false)); err != nil {
		t.Fatal(err)
	}
	row := func(d data.Dataset, i int) float32 {
		dst := [][]float32{make([]float32, 4), make([]float32, 1)}
		if err := d.Read(i, dst); err != nil {
			t.Fatal(err)
		}
		return dst[0][0]
	}
	want := fmt.Sprint(row(ds, 0), row(ds, 16))
	train := s.first[module.Train]
	if len(train) != 200 {
		t.Fatalf("%d training steps, want 2 an epoch for 100 epochs", len(train))
	}
	for e := range 100 {
		if got := fmt.Sprint(train[2*e], train[2*e+1]); got != want {
			t.Fatalf("epoch %d trained on batches starting %s, want the data set's first two (%s)", e, got, want)
		}
	}
	val := s.first[module.Validate]
	if len(val) != 200 || fmt.Sprint(val[0], val[1]) != fmt.Sprint(row(vds, 0), row(vds, 16)) {
		t.Errorf("validation steps %d starting %v, want 2 an epoch on the validation set's first two batches", len(val), val[:min(2, len(val))])
	}
	if l := tr.Stats().LastTrainLoss; !(l < 0.01) {
		t.Errorf("training loss %g after 200 steps on the same two batches, want it near zero", l)
	}
}

func TestOverfitBatchesConflicts(t *testing.T) {
	for _, c := range []struct {
		cfg  trainer.Config
		want string
	}{
		{trainer.Config{OverfitBatches: 2, LimitTrainBatches: 5}, "OverfitBatches is 2 and LimitTrainBatches is 5"},
		{trainer.Config{OverfitBatches: 2, LimitValBatches: 1}, "OverfitBatches is 2 and LimitValBatches is 1"},
		{trainer.Config{OverfitBatches: 2, FastDevRun: 1}, "OverfitBatches is 2 and FastDevRun is 1"},
		{trainer.Config{OverfitBatches: -1}, "OverfitBatches is -1"},
	} {
		if _, err := trainer.New(quiet(c.cfg)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", c.cfg, err, c.want)
		}
	}
	if _, err := trainer.New(quiet(trainer.Config{OverfitBatches: 2, LimitTrainBatches: 2})); err != nil {
		t.Errorf("OverfitBatches 2 with LimitTrainBatches 2: %v", err)
	}
}
