package optim

import (
	"fmt"
	"math"
)

// clipEps is torch's: clip_coef = max_norm / (total_norm + 1e-6).
const clipEps = 1e-6

// SumSquares32 returns the sum of g[i]^2, accumulated in float64 (where the
// square of a float32 is exact) in a fixed order, so it is deterministic.
// A strategy sums these over its spans and ranks, then takes the square root
// to get the total 2-norm.
func SumSquares32(g []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(g); i += 4 {
		x := g[i : i+4 : i+4]
		a, b, c, d := float64(x[0]), float64(x[1]), float64(x[2]), float64(x[3])
		s0 += float64(a * a) // exact for a float32; the conversion rules out FMA
		s1 += float64(b * b)
		s2 += float64(c * c)
		s3 += float64(d * d)
	}
	for ; i < len(g); i++ {
		a := float64(g[i])
		s0 += float64(a * a)
	}
	return (s0 + s1) + (s2 + s3)
}

// SumSquares64 is SumSquares32 on float64.
func SumSquares64(g []float64) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(g); i += 4 {
		x := g[i : i+4 : i+4]
		s0 += float64(x[0] * x[0])
		s1 += float64(x[1] * x[1])
		s2 += float64(x[2] * x[2])
		s3 += float64(x[3] * x[3])
	}
	for ; i < len(g); i++ {
		s0 += float64(g[i] * g[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// ClipScale is the factor torch's clip_grad_norm_ multiplies gradients by:
// maxNorm / (totalNorm + 1e-6), or 1 when that is not below 1. A non-finite
// totalNorm gives 1 (nothing is scaled; the caller decides what a NaN or Inf
// gradient means). maxNorm must be > 0.
func ClipScale(totalNorm, maxNorm float64) float64 {
	checkClip("ClipScale", "maxNorm", maxNorm)
	if !finite(totalNorm) {
		return 1
	}
	c := maxNorm / (totalNorm + clipEps)
	if c < 1 {
		return c
	}
	return 1
}

// ScaleGrads32 multiplies every gradient by s (rounded to float32).
func ScaleGrads32(g []float32, s float64) {
	f := float32(s)
	for i := range g {
		g[i] *= f
	}
}

// ScaleGrads64 multiplies every gradient by s.
func ScaleGrads64(g []float64, s float64) {
	for i := range g {
		g[i] *= s
	}
}

// ClipGradNorm32 scales g so its 2-norm is at most maxNorm (> 0), like
// torch.nn.utils.clip_grad_norm_, and returns the norm before clipping.
// A non-finite norm is returned and g is left as it is.
func ClipGradNorm32(g []float32, maxNorm float64) float64 {
	checkClip("ClipGradNorm32", "maxNorm", maxNorm)
	n := math.Sqrt(SumSquares32(g))
	if s := ClipScale(n, maxNorm); s < 1 {
		ScaleGrads32(g, s)
	}
	return n
}

// ClipGradNorm64 is ClipGradNorm32 on float64.
func ClipGradNorm64(g []float64, maxNorm float64) float64 {
	checkClip("ClipGradNorm64", "maxNorm", maxNorm)
	n := math.Sqrt(SumSquares64(g))
	if s := ClipScale(n, maxNorm); s < 1 {
		ScaleGrads64(g, s)
	}
	return n
}

// ClipGradValue32 clamps every gradient into [-clip, clip] (clip > 0), like
// torch.nn.utils.clip_grad_value_. NaN stays NaN.
func ClipGradValue32(g []float32, clip float64) {
	checkClip("ClipGradValue32", "clip", clip)
	hi := float32(clip)
	lo := -hi
	for i, x := range g {
		if x > hi {
			g[i] = hi
		} else if x < lo {
			g[i] = lo
		}
	}
}

// ClipGradValue64 is ClipGradValue32 on float64.
func ClipGradValue64(g []float64, clip float64) {
	checkClip("ClipGradValue64", "clip", clip)
	lo := -clip
	for i, x := range g {
		if x > clip {
			g[i] = clip
		} else if x < lo {
			g[i] = lo
		}
	}
}

// checkClip panics on a bound that is not > 0: the trainer validates the
// user's setting, so a bad one here is a programming error.
func checkClip(fn, name string, v float64) {
	if !(v > 0) {
		panic(fmt.Sprintf("optim: %s: %s is %v: use a value > 0", fn, name, v))
	}
}
