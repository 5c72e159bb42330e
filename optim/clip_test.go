package optim

import (
	"math"
	"testing"
)

func TestClipGradNormAgainstTorch(t *testing.T) {
	// torch.nn.utils.clip_grad_norm_ on a float32 gradient [3, -4, 12] with
	// max_norm 6.5 returned 13.0 and left these gradients (PyTorch 1.13,
	// produced once with /usr/bin/python3).
	want := []float32{1.4999998807907104, -1.9999998807907104, 5.999999523162842}
	g := []float32{3, -4, 12}
	if n := ClipGradNorm32(g, 6.5); n != 13 {
		t.Fatalf("norm = %v, want 13", n)
	}
	for i := range g {
		if u := ulps32(g[i], want[i]); u > 1 {
			t.Errorf("g[%d] = %.9g, torch %.9g", i, g[i], want[i])
		}
	}
	g64 := []float64{3, -4, 12}
	if n := ClipGradNorm64(g64, 6.5); n != 13 {
		t.Fatalf("norm64 = %v", n)
	}
	maxNorm, norm := 6.5, 13.0 // variables: a constant expression would be computed exactly
	c := maxNorm / (norm + 1e-6)
	for i, x := range []float64{3, -4, 12} {
		if g64[i] != x*c {
			t.Errorf("g64[%d] = %v, want %v", i, g64[i], x*c)
		}
	}
}

func TestClipGradNorm(t *testing.T) {
	cases := []struct {
		name    string
		g       []float64
		max     float64
		norm    float64
		clipped bool
	}{
		{"under", []float64{0.375, 0.5}, 1, 0.625, false},
		{"over", []float64{30, 40, 0, 0, 0}, 5, 50, true},
		{"empty", nil, 1, 0, false},
		{"nan", []float64{1, math.NaN()}, 1, math.NaN(), false},
		{"inf", []float64{math.Inf(-1), 1}, 1, math.Inf(1), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g64 := append([]float64(nil), tc.g...)
			g32 := to32(tc.g)
			n64, n32 := ClipGradNorm64(g64, tc.max), ClipGradNorm32(g32, tc.max)
			for _, n := range []float64{n64, n32} {
				if !(n == tc.norm || math.IsNaN(n) && math.IsNaN(tc.norm)) {
					t.Fatalf("norm = %v, want %v", n, tc.norm)
				}
			}
			after := math.Sqrt(SumSquares64(g64))
			if tc.clipped {
				if math.Abs(after-tc.max) > 1e-6 {
					t.Errorf("norm after clipping = %v, want %v", after, tc.max)
				}
				if r := math.Sqrt(SumSquares32(g32)); math.Abs(r-tc.max) > 1e-5 {
					t.Errorf("float32 norm after clipping = %v", r)
				}
			} else if !bitsEqual(g64, tc.g) {
				t.Errorf("gradients changed without clipping: %v", g64)
			}
		})
	}
}

// A strategy that sums SumSquares over spans and scales each span gets what
// ClipGradNorm gets on the whole buffer.
func TestClipAcrossSpans(t *testing.T) {
	_, gs := data(1003, 1, 31)
	g := to32(gs[0])
	ScaleGrads32(g, 1000)
	whole := append([]float32(nil), g...)
	n := ClipGradNorm32(whole, 1)
	var sum float64
	cuts := []int{0, 400, 401, 1003}
	for i := 1; i < len(cuts); i++ {
		sum += SumSquares32(g[cuts[i-1]:cuts[i]])
	}
	norm := math.Sqrt(sum)
	if math.Abs(norm-n) > 1e-12*n {
		t.Fatalf("span norm %v, whole %v", norm, n)
	}
	s := ClipScale(n, 1) // the strategy uses the reduced norm
	for i := 1; i < len(cuts); i++ {
		ScaleGrads32(g[cuts[i-1]:cuts[i]], s)
	}
	if !bitsEqual(g, whole) {
		t.Fatalf("span-wise clipping differs from whole-buffer clipping")
	}
	if s >= 1 {
		t.Fatalf("the test did not clip: scale %v", s)
	}
}

func TestClipGradValue(t *testing.T) {
	in := []float64{-3, -0.5, 0, 0.5, 3, math.NaN()}
	want := []float64{-1, -0.5, 0, 0.5, 1, math.NaN()}
	g64 := append([]float64(nil), in...)
	g32 := to32(in)
	ClipGradValue64(g64, 1)
	ClipGradValue32(g32, 1)
	for i := range want {
		if math.IsNaN(want[i]) {
			if !math.IsNaN(g64[i]) || !math.IsNaN(float64(g32[i])) {
				t.Errorf("NaN became %v / %v", g64[i], g32[i])
			}
			continue
		}
		if g64[i] != want[i] || float64(g32[i]) != want[i] {
			t.Errorf("g[%d] = %v / %v, want %v", i, g64[i], g32[i], want[i])
		}
	}
}

func TestClipDoesNotAllocate(t *testing.T) {
	g := make([]float32, 1000)
	g64 := make([]float64, 1000)
	for i := range g {
		g[i] = float32(i)
		g64[i] = float64(i)
	}
	if a := testing.AllocsPerRun(20, func() {
		ClipGradNorm32(g, 1)
		ClipGradNorm64(g64, 1)
		ClipGradValue32(g, 0.5)
		ClipGradValue64(g64, 0.5)
	}); a != 0 {
		t.Errorf("clipping allocates %v times", a)
	}
}
