package blastest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fulgur-ml/fulgur/blas"
)

type shape struct{ m, n, k int }

// Shapes cover the degenerate (1), the odd and the blocked (> 64) cases of
// every transpose combination.
var shapes = []shape{{1, 1, 1}, {1, 7, 3}, {5, 1, 9}, {3, 4, 5}, {17, 13, 11}, {64, 10, 128}, {70, 65, 67}}

// Run checks impl's Sgemm and Dgemm against a direct triple loop, with leading
// dimensions wider than the rows, alpha and beta other than 0 and 1, and
// padding elements that must stay untouched.
func Run(t *testing.T, impl blas.Impl) {
	t.Helper()
	if impl.Name() == "" {
		t.Errorf("%T.Name() is empty: name the implementation for start-up logs", impl)
	}
	for _, s := range shapes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				name := fmt.Sprintf("%dx%dx%d/tA=%v/tB=%v", s.m, s.n, s.k, ta, tb)
				t.Run("f64/"+name, func(t *testing.T) { check64(t, impl, s, ta, tb) })
				t.Run("f32/"+name, func(t *testing.T) { check32(t, impl, s, ta, tb) })
			}
		}
	}
}

const pad = 3       // extra columns in every leading dimension
const sentinel = -7 // value of padding elements, which must survive

type layout struct{ rows, cols, ld int }

func dims(s shape, ta, tb bool) (a, b, c layout) {
	a = layout{s.m, s.k, 0}
	if ta {
		a = layout{s.k, s.m, 0}
	}
	b = layout{s.k, s.n, 0}
	if tb {
		b = layout{s.n, s.k, 0}
	}
	c = layout{s.m, s.n, 0}
	a.ld, b.ld, c.ld = a.cols+pad, b.cols+pad, c.cols+pad
	return
}

func fill(r *rand.Rand, l layout) []float64 {
	v := make([]float64, l.rows*l.ld)
	for i := range v {
		if i%l.ld >= l.cols {
			v[i] = sentinel
		} else {
			v[i] = r.Float64()*2 - 1
		}
	}
	return v
}

// reference computes alpha·op(a)·op(b) + beta·c in float64.
func reference(s shape, ta, tb bool, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) []float64 {
	out := append([]float64(nil), c...)
	for i := 0; i < s.m; i++ {
		for j := 0; j < s.n; j++ {
			var sum float64
			for p := 0; p < s.k; p++ {
				var av, bv float64
				if ta {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if tb {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				sum += av * bv
			}
			out[i*ldc+j] = alpha*sum + beta*c[i*ldc+j]
		}
	}
	return out
}

func check64(t *testing.T, impl blas.Impl, s shape, ta, tb bool) {
	r := rand.New(rand.NewPCG(uint64(s.m), uint64(s.n*100+s.k)))
	la, lb, lc := dims(s, ta, tb)
	a, b, c := fill(r, la), fill(r, lb), fill(r, lc)
	want := reference(s, ta, tb, 1.5, a, la.ld, b, lb.ld, -0.5, c, lc.ld)
	got := append([]float64(nil), c...)
	impl.Dgemm(ta, tb, s.m, s.n, s.k, 1.5, a, la.ld, b, lb.ld, -0.5, got, lc.ld)
	compare(t, lc, want, got, 1e-12)
}

func check32(t *testing.T, impl blas.Impl, s shape, ta, tb bool) {
	r := rand.New(rand.NewPCG(uint64(s.m), uint64(s.n*100+s.k)))
	la, lb, lc := dims(s, ta, tb)
	a, b, c := fill(r, la), fill(r, lb), fill(r, lc)
	to32 := func(v []float64) []float32 {
		o := make([]float32, len(v))
		for i, x := range v {
			o[i] = float32(x)
		}
		return o
	}
	a32, b32, c32 := to32(a), to32(b), to32(c)
	// The reference sees exactly the float32-rounded inputs.
	back := func(v []float32) []float64 {
		o := make([]float64, len(v))
		for i, x := range v {
			o[i] = float64(x)
		}
		return o
	}
	want := reference(s, ta, tb, 1.5, back(a32), la.ld, back(b32), lb.ld, -0.5, back(c32), lc.ld)
	impl.Sgemm(ta, tb, s.m, s.n, s.k, 1.5, a32, la.ld, b32, lb.ld, -0.5, c32, lc.ld)
	compare(t, lc, want, back(c32), 1e-5*math.Sqrt(float64(s.k)))
}

func compare(t *testing.T, l layout, want, got []float64, tol float64) {
	t.Helper()
	for i := range want {
		if i%l.ld >= l.cols {
			if got[i] != sentinel {
				t.Fatalf("padding element %d (row %d, column %d of ld %d) was overwritten: %v", i, i/l.ld, i%l.ld, l.ld, got[i])
			}
			continue
		}
		if d := math.Abs(want[i] - got[i]); d > tol*(1+math.Abs(want[i])) {
			t.Fatalf("c[%d][%d] = %v, want %v (|diff| %.3g > tol %.3g)", i/l.ld, i%l.ld, got[i], want[i], d, tol)
		}
	}
}
