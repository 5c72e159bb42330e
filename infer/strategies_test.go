package infer_test

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A checkpoint of every strategy, one file of whole tensors or a sharded
// one (an index and a file per rank), loads into a Model that predicts
// what trainer.Predict predicts from it, bit for bit. A shard file given
// instead of its index is an error naming the index.
func TestCheckpointOfEveryStrategy(t *testing.T) {
	strategies := []struct {
		name string
		new  func(g collective.Collective) (strategy.Strategy, error)
	}{
		{"ddp", func(g collective.Collective) (strategy.Strategy, error) { return ddp.NewDDP(ddp.DDPConfig{Group: g}) }},
		{"sharded", func(g collective.Collective) (strategy.Strategy, error) { return sharded.New(sharded.Config{Group: g}) }},
		{"fsdp", func(g collective.Collective) (strategy.Strategy, error) { return fsdp.New(fsdp.Config{Group: g}) }},
	}
	x := randomX(13, 5)
	ds, err := data.NewInMemory([]data.Field{xField, {Name: "y"}}, [][]float32{randomX(4, 32), make([]float32, 32)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range strategies {
		for _, shardedCkpt := range []bool{false, true} {
			for _, a := range archs {
				name := s.name + "/" + a.name
				if shardedCkpt {
					name += "/sharded-checkpoint"
				}
				t.Run(name, func(t *testing.T) {
					ck := filepath.Join(t.TempDir(), "w.ckpt")
					fitOnTwoRanks(t, ds, a.new, s.new, shardedCkpt, ck)
					m, err := infer.New(a.new(), infer.Config{Inputs: []data.Field{xField}, Weights: ck})
					if err != nil {
						t.Fatal(err)
					}
					got := predict(t, m, x)
					want := trainerPredict(t, a.new, ck, x)
					if !sameValues(got, want) {
						t.Errorf("infer predicts %v, trainer.Predict %v", got[:3], want[:3])
					}
					if !shardedCkpt {
						return
					}
					err = infer.LoadWeights(ck+".rank1-of-2", m.Store())
					if err == nil || !strings.Contains(err.Error(), "pass the index, "+ck+",") {
						t.Errorf("a shard file as the weights: %v, want an error naming the index %s", err, ck)
					}
				})
			}
		}
	}
}

// fitOnTwoRanks trains a few steps on two in-process ranks and saves a
// checkpoint at ck.
func fitOnTwoRanks(t *testing.T, ds data.Dataset, mod func() module.Module, strat func(collective.Collective) (strategy.Strategy, error), shardedCkpt bool, ck string) {
	t.Helper()
	group, err := inproc.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			errs[r] = func() error {
				s, err := strat(group[r])
				if err != nil {
					return err
				}
				l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8, Shuffle: true, Seed: 1})
				if err != nil {
					return err
				}
				tr, err := trainer.New(trainer.Config{MaxSteps: 3, Seed: 3, Out: io.Discard, DefaultRootDir: root, StrategyImpl: s, ShardedCheckpoint: shardedCkpt, HandleSignals: trainer.Bool(false)})
				if err != nil {
					return err
				}
				defer tr.Teardown(context.Background())
				if err := tr.Fit(context.Background(), mod(), l, nil); err != nil {
					return err
				}
				return tr.SaveCheckpoint(context.Background(), ck)
			}()
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// trainerPredict is trainer.Predict's output for x from the float32
// checkpoint ck.
func trainerPredict(t *testing.T, mod func() module.Module, ck string, x []float32) []float64 {
	t.Helper()
	return trainerPredictAt(t, mod, ck, x, "32")
}

// trainerPredictAt is trainerPredict at a precision, in one batch.
func trainerPredictAt(t *testing.T, mod func() module.Module, ck string, x []float32, precision string) []float64 {
	t.Helper()
	rows := len(x) / 16
	ds, err := data.NewInMemory([]data.Field{xField}, [][]float32{x})
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: rows})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(trainer.Config{Out: io.Discard, DefaultRootDir: t.TempDir(), Precision: precision})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := tr.Predict(context.Background(), mod(), l, trainer.WithCheckpoint(ck))
	if err != nil {
		t.Fatal(err)
	}
	return values(outs[0])
}

// Predictions equal trainer.Predict's from the same checkpoint, bit for
// bit, in float32 and float64, for batches of one row, an odd number, and
// more than training's 8.
func TestPredictEqualsTrainerPredict(t *testing.T) {
	for _, a := range archs {
		for _, precision := range []string{"32", "64"} {
			t.Run(a.name+"/"+precision, func(t *testing.T) {
				tr := train(t, a.new(), precision)
				ck := filepath.Join(t.TempDir(), "w.ckpt")
				if err := tr.SaveCheckpoint(context.Background(), ck); err != nil {
					t.Fatal(err)
				}
				m, err := infer.New(a.new(), infer.Config{Inputs: []data.Field{xField}, Weights: ck, Precision: precision})
				if err != nil {
					t.Fatal(err)
				}
				for _, rows := range []int{1, 7, 24} {
					x := randomX(uint64(rows), rows)
					got := predict(t, m, x)
					want := trainerPredictAt(t, a.new, ck, x, precision)
					if !sameValues(got, want) {
						t.Errorf("%d rows: infer predicts %v, trainer.Predict %v", rows, got[:3], want[:3])
					}
				}
			})
		}
	}
}
