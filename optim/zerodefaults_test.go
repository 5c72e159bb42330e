package optim_test

import (
	"fmt"
	"testing"

	"github.com/fulgur-ml/fulgur/optim"
)

// A zero Beta1, or a zero WeightDecay for AdamW, takes torch's default
// (0.9, 0.01); optim.Zero asks for zero. This checks that it gives torch's results for 0
// (GANs use betas=(0, 0.99); fine-tuning often AdamW(weight_decay=0)).
// Reference: torch 1.13, three steps from p = [0.5, -1.25, 2.0, 0.125]
// with p.grad set to each row of grads, then print(p) (float64: repr,
// float32: '%.9g'):
//
//	torch.optim.Adam([p], lr=0.1, betas=(0.0, 0.99))
//	torch.optim.AdamW([p], lr=0.1, weight_decay=0.0)
func TestAdamZeroBeta1AndAdamWZeroDecay(t *testing.T) {
	grads := [][]float64{{0.1, -0.2, 0.3, -0.4}, {-0.05, 0.15, 0.25, 0.5}, {0.3, 0.0, -0.1, 0.2}}
	for _, c := range []struct {
		name     string
		new      func() (*optim.Adam, error)
		f64, f32 []float64
	}{
		{"Adam(betas=(0, 0.99))", func() (*optim.Adam, error) {
			return optim.NewAdam(optim.AdamConfig{LR: 0.1, Beta1: optim.Zero, Beta2: 0.99})
		},
			[]float64{0.30167466708040214, -1.2349125724516263, 1.8524968502398156, 0.06291992530948526},
			[]float64{0.301674634, -1.23491251, 1.85249686, 0.0629199445}},
		{"AdamW(weight_decay=0)", func() (*optim.Adam, error) { return optim.NewAdamW(optim.AdamConfig{LR: 0.1, WeightDecay: optim.Zero}) },
			[]float64{0.30631625651245925, -1.134162656281735, 1.742522160543944, 0.17766253867681917},
			[]float64{0.306316227, -1.13416266, 1.74252212, 0.177662522}},
	} {
		for _, f32 := range []bool{false, true} {
			o, err := c.new()
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Bind(0, 4); err != nil {
				t.Fatal(err)
			}
			p64 := []float64{0.5, -1.25, 2.0, 0.125}
			p32 := []float32{0.5, -1.25, 2.0, 0.125}
			for _, g := range grads {
				o.Begin()
				if f32 {
					o.Update32(p32, []float32{float32(g[0]), float32(g[1]), float32(g[2]), float32(g[3])}, 0)
				} else {
					o.Update64(p64, append([]float64(nil), g...), 0)
				}
			}
			// torch's kernels fuse some multiply-adds, optim's do not (see
			// torch_test.go): float32 may differ by an ulp, float64 by a few
			// units of 1e-16, which the steps' cancellation makes up to 1e-15
			// relative here. A zero Beta1 or decay taken for 0.9 or 0.01 is
			// off by more than 1e-2.
			for i, want := range c.f64 {
				got, tol := p64[i], 1e-15
				if f32 {
					want, got, tol = c.f32[i], float64(p32[i]), 2.4e-7
				}
				if d := got - want; d > tol*(1+abs(want)) || d < -tol*(1+abs(want)) {
					t.Errorf("%s float32=%v: p[%d] = %s, torch %s", c.name, f32, i, fmt.Sprint(got), fmt.Sprint(want))
				}
			}
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// Validate turns optim.Zero into an exact 0 after filling the defaults, so
// no update multiplies by the subnormal constant; 0 itself still takes
// the default.
func TestZeroIsExactZeroAfterValidate(t *testing.T) {
	c := optim.AdamConfig{Beta1: optim.Zero, Beta2: optim.Zero, WeightDecay: optim.Zero}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Beta1 != 0 || c.Beta2 != 0 || c.WeightDecay != 0 {
		t.Errorf("after Validate: Beta1 %v, Beta2 %v, WeightDecay %v; want 0 each", c.Beta1, c.Beta2, c.WeightDecay)
	}
	d := optim.AdamConfig{}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if d.Beta1 != 0.9 || d.Beta2 != 0.999 {
		t.Errorf("zero config: Beta1 %v, Beta2 %v; want torch's 0.9, 0.999", d.Beta1, d.Beta2)
	}
}
