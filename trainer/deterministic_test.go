package trainer_test

import (
	"math/rand/v2"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/nn/ops"
	"github.com/fulgur-ml/fulgur/trainer"
)

// images is n random 1×16×16 images with labels 0..9.
func images(t *testing.T, n int) *data.InMemory {
	r := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, n*16*16)
	y := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for i := range y {
		y[i] = float32(r.IntN(10))
	}
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{1, 16, 16}}, {Name: "y"}}, [][]float32{x, y})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// With Deterministic set, a conv net trains to the same bits whatever the
// number of goroutines a convolution splits its batch between (what the
// core count decides by default); without it, the weight gradient sums one
// partial sum per worker, and the bits follow the worker count.
func TestDeterministicAcrossWorkerCounts(t *testing.T) {
	t.Cleanup(func() { ops.SetImageWorkers(0); ops.SetDeterministic(false) })
	ds := images(t, 96)
	fit := func(deterministic bool, workers int) string {
		ops.SetImageWorkers(workers)
		m := &models.ResNet{Config: nn.ResNetConfig{Widths: []int{16, 16, 16}}}
		return fitHash(t, trainer.Config{MaxEpochs: 1, Seed: 4, Deterministic: deterministic}, m, loader(t, ds, 48, false, false))
	}
	if a, b := fit(false, 1), fit(false, 2); a == b {
		t.Fatalf("without Deterministic, 1 and 2 image workers gave the same weights %s: the test no longer runs the split weight gradient", a)
	}
	if a, b := fit(true, 1), fit(true, 2); a != b {
		t.Errorf("with Deterministic, 1 image worker gives weights %s and 2 give %s, want the same bits", a, b)
	}
}
