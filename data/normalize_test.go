package data_test

import (
	"math"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

func TestMeanStdAndNormalize(t *testing.T) {
	// x is a 2-vector: column 0 is 1, 2, 3, 4; column 1 is 10, 10, 30, 30.
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{2}}, {Name: "y"}},
		[][]float32{{1, 10, 2, 10, 3, 30, 4, 30}, {0, 1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	// Statistics over a part only (the training part): examples 0 and 2.
	part, err := data.NewSubset(ds, []int{0, 2})
	if err != nil {
		t.Fatal(err)
	}
	mean, std, err := data.MeanStd(part, "x")
	if err != nil {
		t.Fatal(err)
	}
	// Population standard deviation, as scikit-learn's StandardScaler.
	if want := []float32{2, 20}; mean[0] != want[0] || mean[1] != want[1] {
		t.Fatalf("mean = %v, want %v", mean, want)
	}
	if want := []float32{1, 10}; std[0] != want[0] || std[1] != want[1] {
		t.Fatalf("std = %v, want %v", std, want)
	}
	norm, err := data.Normalize(ds, "x", mean, std)
	if err != nil {
		t.Fatal(err)
	}
	if norm.Len() != 4 || norm.Fields()[0].Name != "x" {
		t.Fatalf("Len %d, Fields %v", norm.Len(), norm.Fields())
	}
	got := readAll(t, norm)
	want := [][]float32{{-1, -1, 0, -1, 1, 1, 2, 1}, {0, 1, 2, 3}}
	for f := range want {
		for i := range want[f] {
			if math.Abs(float64(got[f][i]-want[f][i])) > 1e-6 {
				t.Fatalf("normalised values %v, want %v", got, want)
			}
		}
	}
	// The dataset underneath is left as it was.
	if raw := readAll(t, ds)[0]; raw[0] != 1 || raw[5] != 30 {
		t.Fatalf("Normalize changed the dataset under it: %v", raw)
	}
}

func TestNormalizeErrors(t *testing.T) {
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{2}}}, [][]float32{{1, 5, 2, 5}})
	if err != nil {
		t.Fatal(err)
	}
	_, std, err := data.MeanStd(ds, "x")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		field     string
		mean, std []float32
		want      string
	}{
		{"x", []float32{0, 0}, std, "std[1] is 0 (the value is the same in every example)"},
		{"y", []float32{0}, []float32{1}, `no field "y": the fields are [x[2]]`},
		{"x", []float32{0}, []float32{1, 1}, "mean has 1 values and std 2 but field \"x\" holds 2"},
		{"x", []float32{0, float32(math.NaN())}, []float32{1, 1}, "mean[1] is NaN"},
	} {
		if _, err := data.Normalize(ds, c.field, c.mean, c.std); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Normalize(%q, %v, %v) = %v, want an error saying %q", c.field, c.mean, c.std, err, c.want)
		}
	}
	if _, _, err := data.MeanStd(ds, "label"); err == nil || !strings.Contains(err.Error(), `no field "label"`) {
		t.Errorf("MeanStd of a missing field: %v", err)
	}
}

// A column far from zero with a small spread (timestamps, prices in cents)
// keeps its standard deviation: a sum of squares in float64 loses it.
func TestMeanStdOfALargeOffset(t *testing.T) {
	const n = 1000
	col := make([]float32, n)
	for i := range col {
		col[i] = 1e8 + float32(16*(i%2)) // 1e8 and 1e8+16: float32 steps by 8 there
	}
	ds, err := data.NewInMemory([]data.Field{{Name: "t"}}, [][]float32{col})
	if err != nil {
		t.Fatal(err)
	}
	mean, std, err := data.MeanStd(ds, "t")
	if err != nil {
		t.Fatal(err)
	}
	if mean[0] != 1e8+8 || std[0] != 8 {
		t.Fatalf("mean %v std %v, want 1e8+8 and 8", mean[0], std[0])
	}
}
