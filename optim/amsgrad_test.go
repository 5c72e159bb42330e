package optim_test

import (
	"math"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/optim"
)

// TestAMSGradResumeIsExact saves an AMSGrad AdamW's state after 3 of 6
// steps, loads it into a fresh optimizer and checks that the last 3 steps
// give the straight run's parameters bit for bit. The gradients shrink
// after step 2, so the saved max of the second moments (not the current
// one) decides the later updates: a resume that dropped it would differ.
func TestAMSGradResumeIsExact(t *testing.T) {
	grads := [][]float64{{1, -2, 0.5}, {2, 1, -1}, {0.01, 0.02, 0.01}, {0.02, -0.01, 0.01}, {0.01, 0.01, -0.02}, {0.0, 0.03, 0.01}}
	newOpt := func() optim.Optimizer {
		o, err := optim.NewAdamW(optim.AdamConfig{LR: 0.1, AMSGrad: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Bind(0, 3); err != nil {
			t.Fatal(err)
		}
		return o
	}
	run := func(o optim.Optimizer, p []float64, gs [][]float64) {
		for _, g := range gs {
			o.Begin()
			o.Update64(p, g, 0)
		}
	}
	straight := []float64{0.5, -1, 2}
	run(newOpt(), straight, grads)

	first := newOpt()
	p := []float64{0.5, -1, 2}
	run(first, p, grads[:3])
	saved := first.State()
	vmax, ok := saved.Buffers["max_exp_avg_sq"]
	if !ok {
		t.Fatalf("State has buffers %v, no max_exp_avg_sq", saved.Buffers)
	}
	if v := saved.Buffers["exp_avg_sq"]; !(vmax[0] > v[0]) {
		t.Fatalf("max_exp_avg_sq %v not above exp_avg_sq %v after the gradients shrank: the test would not see a lost max", vmax, v)
	}
	resumed := newOpt()
	if err := resumed.LoadState(saved); err != nil {
		t.Fatal(err)
	}
	run(resumed, p, grads[3:])
	for i := range p {
		if math.Float64bits(p[i]) != math.Float64bits(straight[i]) {
			t.Fatalf("resumed p = %v, straight run %v", p, straight)
		}
	}

	// Without the max the resume would not be exact: LoadState says so.
	delete(saved.Buffers, "max_exp_avg_sq")
	if err := newOpt().LoadState(saved); err == nil || !strings.Contains(err.Error(), "has no max_exp_avg_sq, so it was saved without AdamConfig.AMSGrad") {
		t.Errorf("LoadState without max_exp_avg_sq: %v", err)
	}
	// A plain AdamW cannot take an AMSGrad state either.
	plain, _ := optim.NewAdamW(optim.AdamConfig{LR: 0.1})
	if err := plain.Bind(0, 3); err != nil {
		t.Fatal(err)
	}
	if err := plain.LoadState(first.State()); err == nil || !strings.Contains(err.Error(), "holds max_exp_avg_sq, so it was saved with AdamConfig.AMSGrad: set AMSGrad") {
		t.Errorf("plain AdamW loading an AMSGrad state: %v", err)
	}
}
