package trainer_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/trainer"
)

// withoutLabels is ds's x alone: a predict set has no labels.
func withoutLabels(t *testing.T, ds *data.InMemory) *data.InMemory {
	t.Helper()
	x := make([]float32, ds.Len()*len(trueW))
	dst := [][]float32{nil, make([]float32, 1)}
	for i := 0; i < ds.Len(); i++ {
		dst[0] = x[i*len(trueW) : (i+1)*len(trueW)]
		if err := ds.Read(i, dst); err != nil {
			t.Fatal(err)
		}
	}
	out, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{len(trueW)}}}, [][]float32{x})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Predict after Fit takes a set without the labels training read, as
// Lightning's predict_step gets whatever the predict loader gives: the
// predictions are those of the same rows with labels. A set whose fields
// differ otherwise is refused, naming both.
func TestPredictAfterFitWithoutLabels(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		strategy string
		devices  int
	}{{"single", 1}, {"dp", 2}} {
		t.Run(tc.strategy, func(t *testing.T) {
			tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 3, Strategy: tc.strategy, Devices: tc.devices}))
			if err != nil {
				t.Fatal(err)
			}
			m := newEvalReg()
			ds := regression(t, 96, 0.01, 4)
			if err := tr.Fit(ctx, m, loader(t, ds, 16, true, false), nil); err != nil {
				t.Fatal(err)
			}
			test := regression(t, 40, 0.01, 5)
			want, err := tr.Predict(ctx, m, loader(t, test, 16, false, false))
			if err != nil {
				t.Fatal(err)
			}
			got, err := tr.Predict(ctx, m, loader(t, withoutLabels(t, test), 16, false, false))
			if err != nil {
				t.Fatalf("Predict without labels: %v", err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d batches without labels, %d with", len(got), len(want))
			}
			for i := range want {
				if !slices.Equal(got[i].Float32s(), want[i].Float32s()) {
					t.Errorf("batch %d: %v without labels, %v with", i, got[i].Float32s(), want[i].Float32s())
				}
			}
			wide, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{6}}}, [][]float32{make([]float32, 6*8)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = tr.Predict(ctx, m, loader(t, wide, 4, false, false))
			if err == nil || !strings.Contains(err.Error(), "batch has fields [x[6]], the model was set up for [x[4] y[]]") {
				t.Errorf("Predict on x[6]: err = %v", err)
			}
		})
	}
}
