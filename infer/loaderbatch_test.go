package infer_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
)

// A labelled test set's loader gives batches with the labels beside the
// inputs: Predict takes them as they come (the doc's "or from a
// data.Loader"), reading the fields the model was built for by name and
// leaving the others, in either order, and predicts what a batch of the
// inputs alone gives. A field of the model's name with another shape is
// still an error naming both.
func TestPredictTakesALabelledLoadersBatches(t *testing.T) {
	tr := train(t, &tinyMLP{}, "")
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := infer.SaveStateDict(path, tr.Store()); err != nil {
		t.Fatal(err)
	}
	m, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, Weights: path})
	if err != nil {
		t.Fatal(err)
	}
	const rows = 6
	x := randomX(9, rows)
	y := []float32{0, 1, 2, 3, 4, 0}
	want := predict(t, m, x)
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		fields []data.Field
		cols   [][]float32
	}{
		{"inputs then labels", []data.Field{xField, {Name: "y"}}, [][]float32{x, y}},
		{"labels then inputs", []data.Field{{Name: "y"}, xField}, [][]float32{y, x}},
	} {
		ds, err := data.NewInMemory(c.fields, c.cols)
		if err != nil {
			t.Fatal(err)
		}
		l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: rows})
		if err != nil {
			t.Fatal(err)
		}
		it := l.Iter(ctx, 0)
		b, ok := it.Next()
		if !ok {
			t.Fatalf("%s: no batch: %v", c.name, it.Err())
		}
		out, err := m.Predict(ctx, b)
		it.Close()
		if err != nil {
			t.Fatalf("%s: Predict of a loader's batch: %v", c.name, err)
		}
		if got := values(out); !sameValues(got, want) {
			t.Errorf("%s: predictions %v, want those of the inputs alone %v", c.name, got, want)
		}
	}

	bad := &data.Batch{Size: rows, Fields: []data.Field{{Name: "x", Shape: []int{16}}, {Name: "y"}}, Data: [][]float32{x, y}}
	if _, err := m.Predict(ctx, bad); err == nil || !strings.Contains(err.Error(), "[16]") || !strings.Contains(err.Error(), "[1 4 4]") {
		t.Errorf("a batch whose x has another shape: err = %v, want one naming both shapes", err)
	}
	none := &data.Batch{Size: rows, Fields: []data.Field{{Name: "y"}}, Data: [][]float32{y}}
	if _, err := m.Predict(ctx, none); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("a batch without x: err = %v, want one naming x", err)
	}
}
