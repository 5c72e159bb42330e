package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// TestPredictEachHandsOutEachRanksBatches: under ddp at 2 ranks, each rank
// gets the batches of its own shard (37 rows: 19 and 18; 1 row: rank 1
// gets a padded copy), the rows not marked Pad cover the data set once,
// and each row's output is the one Predict returns for it on one device.
func TestPredictEachHandsOutEachRanksBatches(t *testing.T) {
	for _, c := range []struct{ rows, pads int }{{37, 0}, {1, 1}} {
		t.Run(fmt.Sprint(c.rows), func(t *testing.T) { predictEachOnTwoRanks(t, c.rows, c.pads) })
	}
}

func predictEachOnTwoRanks(t *testing.T, rows, wantPads int) {
	ds := regression(t, rows, 0.1, 6)
	cfg := trainer.Config{Seed: 5}
	one, err := trainer.New(quiet(cfg))
	if err != nil {
		t.Fatal(err)
	}
	batches, err := one.Predict(context.Background(), &linreg{in: 4}, loader(t, ds, 8, false, false))
	if err != nil {
		t.Fatal(err)
	}
	var want []float32
	for _, b := range batches {
		want = append(want, b.Data().([]float32)...)
	}
	var mu sync.Mutex
	seen := map[int]int{}
	pads := 0
	_, errs := onRanks(t, 2, ddpRank(t), func(int) trainer.Config { return quiet(cfg) }, func(r int, tr *trainer.Trainer) error {
		return tr.PredictEach(context.Background(), &linreg{in: 4}, loader(t, ds, 8, false, false), func(b trainer.PredictBatch) error {
			y := b.Output.Data().([]float32)
			if len(y) != len(b.Indices) {
				return errors.New("one output a row expected")
			}
			mu.Lock()
			defer mu.Unlock()
			for i, idx := range b.Indices {
				if b.Pad != nil && b.Pad[i] {
					pads++
					continue
				}
				seen[idx]++
				if y[i] != want[idx] {
					t.Errorf("rank %d: row %d predicted %v, one device %v", r, idx, y[i], want[idx])
				}
			}
			return nil
		})
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if len(seen) != rows || pads != wantPads {
		t.Fatalf("rows seen %d (want %d) and %d padded (want %d)", len(seen), rows, pads, wantPads)
	}
	for idx, n := range seen {
		if n != 1 {
			t.Errorf("row %d handed out %d times", idx, n)
		}
	}
}

func TestPredictEachStopsAtTheFunctionsError(t *testing.T) {
	tr, err := trainer.New(quiet(trainer.Config{Seed: 5}))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	err = tr.PredictEach(context.Background(), &linreg{in: 4}, loader(t, regression(t, 40, 0.1, 6), 8, false, false), func(trainer.PredictBatch) error {
		calls++
		if calls == 2 {
			return errors.New("disk full")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "predict batch 1: PredictEach's fn: disk full") || calls != 2 {
		t.Errorf("PredictEach = %v after %d calls, want batch 1's error after 2", err, calls)
	}
	if err := tr.PredictEach(context.Background(), &linreg{in: 4}, loader(t, regression(t, 40, 0.1, 6), 8, false, false), nil); err == nil || !strings.Contains(err.Error(), "fn is nil") {
		t.Errorf("PredictEach with a nil fn = %v", err)
	}
}
