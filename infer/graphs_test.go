package infer_test

import (
	"context"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
)

// countingMLP counts the predict graphs built (one PredictStep call each).
type countingMLP struct {
	tinyMLP
	builds map[int]int
}

func (m *countingMLP) PredictStep(s *module.Step) (*G.Node, error) {
	m.builds[s.BatchSize()]++
	return m.tinyMLP.PredictStep(s)
}

// A service batching requests as they come sees many batch sizes; each
// kept graph holds its activations, so the Model keeps MaxBatchSizes of
// them, dropping the least recently used, and predicts the same after
// building one again.
func TestMaxBatchSizes(t *testing.T) {
	cm := &countingMLP{builds: map[int]int{}}
	m, err := infer.New(cm, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true, Seed: 2, MaxBatchSizes: 2})
	if err != nil {
		t.Fatal(err)
	}
	first := map[int][]float64{}
	for _, rows := range []int{1, 2, 1, 3, 2, 1, 1} {
		got := predict(t, m, randomX(uint64(rows), rows))
		if w, ok := first[rows]; ok && !sameValues(got, w) {
			t.Errorf("%d rows: %v after the graph was built again, %v before", rows, got[:3], w[:3])
		}
		first[rows] = got
	}
	// Kept: {1}, {1 2}, {2 1}, {1 3} (2 dropped), {3 2} (1 dropped), {2 1}, {2 1}.
	if want := map[int]int{1: 2, 2: 2, 3: 1}; !equalCounts(cm.builds, want) {
		t.Errorf("graphs built per batch size %v, want %v", cm.builds, want)
	}

	un := &countingMLP{builds: map[int]int{}}
	m, err = infer.New(un, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true, MaxBatchSizes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for rows := 1; rows <= 12; rows++ {
		predict(t, m, randomX(1, rows))
		predict(t, m, randomX(1, 1))
	}
	if len(un.builds) != 12 || un.builds[1] != 1 {
		t.Errorf("MaxBatchSizes -1: graphs built %v, want each of 12 sizes once", un.builds)
	}
	if _, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true, MaxBatchSizes: -2}); err == nil || !strings.Contains(err.Error(), "MaxBatchSizes is -2") {
		t.Errorf("MaxBatchSizes -2: %v", err)
	}
}

func equalCounts(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Inputs that do not fit the module's PredictStep are New's error, naming
// the Inputs, not the first request's.
func TestNewChecksInputs(t *testing.T) {
	for _, c := range []struct {
		name string
		in   data.Field
		want []string
	}{
		{"another name", data.Field{Name: "image", Shape: []int{1, 4, 4}}, []string{`building the predict graph for Inputs image[1 4 4]`, `step input "x" does not exist`}},
		{"another shape", data.Field{Name: "x", Shape: []int{1, 5, 5}}, []string{`building the predict graph for Inputs x[1 5 5]`, "set Inputs to its fields and per-example shapes"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{c.in}, InitialWeights: true})
			if err == nil {
				t.Fatal("New accepted Inputs the module cannot read")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// A NaN or infinite input is an error naming the field, the row and the
// value, not a row of NaN predictions (which an argmax reads as class 0).
func TestPredictRefusesNaNInput(t *testing.T) {
	m32, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	x := randomX(3, 3)
	x[16+5] = float32(math.NaN())
	b, err := m32.Batch(3, x)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := m32.Predict(context.Background(), b); err == nil || !strings.Contains(err.Error(), `field "x" of row 1 holds NaN at value 5 of the row`) {
		t.Errorf("NaN input: %v, %v; want an error naming row 1", err, out)
	}
	m64, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true, Precision: "64"})
	if err != nil {
		t.Fatal(err)
	}
	x64 := make([]float64, 2*16)
	x64[16+15] = math.Inf(-1)
	b, err = m64.Batch64(2, x64)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := m64.Predict(context.Background(), b); err == nil || !strings.Contains(err.Error(), `field "x" of row 1 holds -Inf at value 15 of the row`) {
		t.Errorf("-Inf input: %v, %v; want an error naming row 1", err, out)
	}
}
