package infer_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
)

// A float64 model (Precision "64") takes float64 input as it is: its
// predictions are those of the float64 values, not of the values rounded
// to float32. The reference is tinyMLP computed by hand from the store.
func TestFloat64ModelTakesFloat64Batches(t *testing.T) {
	tr := train(t, &tinyMLP{}, "64")
	m, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, Precision: "64", InitialWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Store().CopyFrom(tr.Store()); err != nil {
		t.Fatal(err)
	}
	const rows = 3
	x := make([]float64, rows*16)
	for i := range x {
		// No float32 holds these: rounding them moves the predictions.
		x[i] = float64(randomX(21, rows)[i]) + 1e-9*float64(i+1)
	}
	b, err := m.Batch64(rows, x)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Predict(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Dtype().Name() != "float64" {
		t.Fatalf("output dtype %v, want float64", out.Dtype())
	}
	got := values(out)
	want := mlpByHand(t, m.Store(), x, rows)
	closeTo(t, "Batch64 against tinyMLP by hand", got, want, 1e-14)
	rounded := make([]float64, len(x))
	for i, v := range x {
		rounded[i] = float64(float32(v))
	}
	if r := mlpByHand(t, m.Store(), rounded, rows); sameValues(r, want) {
		t.Fatal("rounding the input to float32 leaves the predictions as they are: the test cannot tell the paths apart")
	}

	// Each precision names the call it takes.
	if _, err := m.Batch(rows, make([]float32, rows*16)); err == nil || !strings.Contains(err.Error(), `Precision is "64"`) || !strings.Contains(err.Error(), "Batch64") {
		t.Errorf("Batch on a float64 model: %v, want an error naming Precision \"64\" and Batch64", err)
	}
	m32, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m32.Batch64(rows, x); err == nil || !strings.Contains(err.Error(), `Precision is "32"`) || !strings.Contains(err.Error(), "make the batch with Batch") {
		t.Errorf("Batch64 on a float32 model: %v, want an error naming Precision \"32\" and Batch", err)
	}
	if _, err := m32.Predict(context.Background(), b); err == nil || !strings.Contains(err.Error(), "float64 values") {
		t.Errorf("Predict of a float64 batch on a float32 model: %v, want an error naming the float64 values", err)
	}
	if _, err := m.Batch64(rows, x[:20]); err == nil || !strings.Contains(err.Error(), `Batch64: field "x" holds 20 values; 3 rows of shape [1 4 4] need 48`) {
		t.Errorf("short float64 batch: %v", err)
	}
}

// mlpByHand is tinyMLP's forward pass (fc2(relu(fc1(x)))) in float64.
func mlpByHand(t *testing.T, s *module.Store, x []float64, rows int) []float64 {
	t.Helper()
	p := func(name string) []float64 {
		e, ok := s.Lookup(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		return s.Data64()[e.Offset : e.Offset+e.Len]
	}
	w1, b1, w2, b2 := p("fc1.weight"), p("fc1.bias"), p("fc2.weight"), p("fc2.bias")
	out := make([]float64, 0, rows*5)
	for r := 0; r < rows; r++ {
		h := make([]float64, 12)
		for o := range h {
			v := b1[o]
			for i := 0; i < 16; i++ {
				v += w1[o*16+i] * x[r*16+i]
			}
			h[o] = math.Max(v, 0)
		}
		for o := 0; o < 5; o++ {
			v := b2[o]
			for i := 0; i < 12; i++ {
				v += w2[o*12+i] * h[i]
			}
			out = append(out, v)
		}
	}
	return out
}
