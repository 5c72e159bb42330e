package models

import (
	"math"
	"testing"

	"github.com/fulgur-ml/fulgur/optim"
)

// The example's cosine schedule steps once per epoch: over 3 epochs the
// learning rates are 1e-3, 7.5e-4 and 2.5e-4; without CosineEpochs the
// rate stays constant, as the benchmark workload defines it.
func TestResNetCosinePerEpoch(t *testing.T) {
	o, s, err := (&ResNet{CosineEpochs: 3}).ConfigureOptimizers()
	if err != nil || s == nil {
		t.Fatalf("ConfigureOptimizers = %v, %v, %v", o, s, err)
	}
	if s.Interval() != optim.PerEpoch {
		t.Fatalf("interval %v, want per epoch", s.Interval())
	}
	if st, ok := s.(optim.Starter); ok {
		st.Start(o)
	}
	for epoch, want := range []float64{1e-3, 7.5e-4, 2.5e-4} {
		if got := o.LR(); math.Abs(got-want) > 1e-12 {
			t.Fatalf("epoch %d: lr %g, want %g", epoch, got, want)
		}
		s.Step(o, math.NaN())
	}
	if _, s, _ := (&ResNet{}).ConfigureOptimizers(); s != nil {
		t.Fatal("a scheduler without CosineEpochs")
	}
}
