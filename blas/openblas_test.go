package blas_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/blas/blastest"
)

func openBLAS(t testing.TB) *blas.Native {
	t.Helper()
	o, err := blas.LoadOpenBLAS()
	if errors.Is(err, blas.ErrNoOpenBLAS) {
		t.Skipf("OpenBLAS is not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// blisLib loads BLIS as Choose would (BLIS_ARCH_TYPE for this processor
// when unset).
func blisLib(t testing.TB) *blas.Native {
	t.Helper()
	o, err := blas.LoadBLISForTest()
	if errors.Is(err, blas.ErrNoBLIS) || errors.Is(err, blas.ErrSlowBLIS) {
		t.Skipf("BLIS is not usable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestOpenBLASConformance(t *testing.T) { blastest.Run(t, openBLAS(t)) }

func TestBLISConformance(t *testing.T) { blastest.Run(t, blisLib(t)) }

// The shapes of the mlp workload's multiplies (batch 64, 784-256-128-10),
// forward and backward, against gonum.
func TestOpenBLASMatchesGonum(t *testing.T) { matchesGonum(t, openBLAS(t)) }

func TestBLISMatchesGonum(t *testing.T) { matchesGonum(t, blisLib(t)) }

func matchesGonum(t *testing.T, o *blas.Native) {
	cases := []struct {
		name    string
		tA, tB  bool
		m, n, k int
		beta    float64
	}{
		{"fc1 forward", false, true, 64, 256, 784, 1},
		{"fc3 forward", false, true, 64, 10, 128, 1},
		{"fc2 grad input", false, false, 64, 256, 128, 0},
		{"fc1 grad weight", true, false, 256, 784, 64, 0},
		{"fc3 grad weight", true, false, 10, 128, 64, 0},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lda, ldb := c.k, c.n
			if c.tA {
				lda = c.m
			}
			if c.tB {
				ldb = c.k
			}
			a64 := randn(r, c.m*c.k)
			b64 := randn(r, c.k*c.n)
			c64 := randn(r, c.m*c.n)
			want64 := append([]float64(nil), c64...)
			got64 := append([]float64(nil), c64...)
			blas.Gonum{}.Dgemm(c.tA, c.tB, c.m, c.n, c.k, 1, a64, lda, b64, ldb, c.beta, want64, c.n)
			o.Dgemm(c.tA, c.tB, c.m, c.n, c.k, 1, a64, lda, b64, ldb, c.beta, got64, c.n)
			if d := maxRel(want64, got64); d > 1e-12 {
				t.Errorf("float64: max relative difference %.3g, want ≤ 1e-12", d)
			}
			a32, b32, c32 := to32(a64), to32(b64), to32(c64)
			want32 := append([]float32(nil), c32...)
			got32 := append([]float32(nil), c32...)
			blas.Gonum{}.Sgemm(c.tA, c.tB, c.m, c.n, c.k, 1, a32, lda, b32, ldb, float32(c.beta), want32, c.n)
			o.Sgemm(c.tA, c.tB, c.m, c.n, c.k, 1, a32, lda, b32, ldb, float32(c.beta), got32, c.n)
			// float32 sums of up to 784 products in different orders:
			// relative to the row's magnitude, 1e-5 is ~100 ulps.
			if d := maxRel(to64(want32), to64(got32)); d > 1e-5 {
				t.Errorf("float32: max relative difference %.3g, want ≤ 1e-5", d)
			}
		})
	}
}

func TestOpenBLASCallsDoNotAllocate(t *testing.T) { noAllocs(t, openBLAS(t)) }

func TestBLISCallsDoNotAllocate(t *testing.T) { noAllocs(t, blisLib(t)) }

func noAllocs(t *testing.T, o *blas.Native) {
	a, b, c := make([]float32, 64*128), make([]float32, 128*10), make([]float32, 64*10)
	a64, b64, c64 := make([]float64, 64*128), make([]float64, 128*10), make([]float64, 64*10)
	n := testing.AllocsPerRun(50, func() {
		o.Sgemm(false, false, 64, 10, 128, 1, a, 128, b, 10, 0, c, 10)
		o.Dgemm(false, true, 64, 128, 10, 1, c64, 10, b64, 10, 0, a64, 128)
	})
	if n != 0 {
		t.Fatalf("%v allocations per pair of calls, want 0", n)
	}
}

func TestOpenBLASThreads(t *testing.T) {
	o := openBLAS(t)
	before := o.Threads()
	defer o.SetThreads(before)
	for _, n := range []int{1, 2} {
		if err := o.SetThreads(n); err != nil {
			t.Fatal(err)
		}
		if got := o.Threads(); got != n {
			t.Errorf("after SetThreads(%d), Threads() = %d", n, got)
		}
	}
	if err := o.SetThreads(0); err == nil {
		t.Error("SetThreads(0) succeeded")
	}
}

func randn(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = r.NormFloat64()
	}
	return v
}

func to32(v []float64) []float32 {
	o := make([]float32, len(v))
	for i, x := range v {
		o[i] = float32(x)
	}
	return o
}

func to64(v []float32) []float64 {
	o := make([]float64, len(v))
	for i, x := range v {
		o[i] = float64(x)
	}
	return o
}

// maxRel is max |a-b| / max(1, max |a|).
func maxRel(a, b []float64) float64 {
	scale := 1.0
	for _, x := range a {
		scale = math.Max(scale, math.Abs(x))
	}
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d / scale
}

func BenchmarkSgemmMLP(b *testing.B) {
	impls := []blas.Impl{blas.Gonum{}}
	if o, err := blas.LoadOpenBLAS(); err == nil {
		o.SetThreads(1)
		impls = append(impls, o)
	}
	if o, err := blas.LoadBLISForTest(); err == nil {
		o.SetThreads(1)
		impls = append(impls, o)
	}
	// Random values: gonum skips zero elements, so zeros would flatter it.
	r := rand.New(rand.NewPCG(3, 4))
	x, w, y := to32(randn(r, 64*784)), to32(randn(r, 784*256)), make([]float32, 64*256)
	for _, impl := range impls {
		b.Run(strings.Fields(impl.Name())[0], func(b *testing.B) {
			b.SetBytes(int64(2 * 64 * 784 * 256 * 4 / 8)) // not bytes: FLOP/8, so MB/s×8 ≈ MFLOP/s
			for b.Loop() {
				impl.Sgemm(false, false, 64, 256, 784, 1, x, 784, w, 256, 0, y, 256)
			}
		})
	}
}

// BenchmarkMLPShapes times every multiply of one mlp training step (batch
// 64, 784-256-128-10) on OpenBLAS with one thread and on gonum, reporting
// GFLOP/s per shape: the step's time is mostly these.
func BenchmarkMLPShapes(b *testing.B) {
	shapes := []struct {
		name    string
		tA, tB  bool
		m, n, k int
	}{
		{"fwd1", false, false, 64, 256, 784},
		{"fwd2", false, false, 64, 128, 256},
		{"fwd3", false, false, 64, 10, 128},
		{"dW1", true, false, 784, 256, 64},
		{"dW2", true, false, 256, 128, 64},
		{"dW3", true, false, 128, 10, 64},
		{"dX2", false, true, 64, 256, 128},
		{"dX3", false, true, 64, 128, 10},
	}
	impls := []blas.Impl{}
	if o, err := blas.LoadOpenBLAS(); err == nil {
		o.SetThreads(1)
		impls = append(impls, o)
	}
	if o, err := blas.LoadBLISForTest(); err == nil {
		o.SetThreads(1)
		impls = append(impls, o)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, impl := range impls {
		for _, s := range shapes {
			lda, ldb := s.k, s.n
			if s.tA {
				lda = s.m
			}
			if s.tB {
				ldb = s.k
			}
			a, bb, c := to32(randn(r, s.m*s.k)), to32(randn(r, s.k*s.n)), make([]float32, s.m*s.n)
			b.Run(strings.Fields(impl.Name())[0]+"/"+s.name, func(b *testing.B) {
				for b.Loop() {
					impl.Sgemm(s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkConvShapes compares the resnet8 stage-1 convolution multiply done
// per image (m = 16 output channels, n = 28·28 pixels, k = 16·9) with the
// same work as one multiply over the whole batch of 64 (n = 64·28·28). Both
// run well below the mlp shapes' rate: with 16 output channels each element
// of the im2col matrix feeds only 16 products, so streaming that matrix
// (9× the input) bounds the multiply, batched or not.
func BenchmarkConvShapes(b *testing.B) {
	var impls []blas.Impl
	if o, err := blas.LoadOpenBLAS(); err == nil {
		o.SetThreads(1)
		impls = append(impls, o)
	}
	if o, err := blas.LoadBLISForTest(); err == nil {
		o.SetThreads(1)
		impls = append(impls, o)
	}
	r := rand.New(rand.NewPCG(7, 8))
	const oc, k, hw, batch = 16, 16 * 9, 28 * 28, 64
	w := to32(randn(r, oc*k))
	cols := to32(randn(r, k*hw*batch))
	out := make([]float32, oc*hw*batch)
	for _, impl := range impls {
		lib := strings.Fields(impl.Name())[0]
		b.Run(lib+"/per-image", func(b *testing.B) {
			for b.Loop() {
				for i := 0; i < batch; i++ {
					impl.Sgemm(false, false, oc, hw, k, 1, w, k, cols[i*k*hw:(i+1)*k*hw], hw, 0, out[i*oc*hw:(i+1)*oc*hw], hw)
				}
			}
			b.ReportMetric(2*float64(oc*hw*k*batch)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run(lib+"/batched", func(b *testing.B) {
			for b.Loop() {
				impl.Sgemm(false, false, oc, hw*batch, k, 1, w, k, cols, hw*batch, 0, out, hw*batch)
			}
			b.ReportMetric(2*float64(oc*hw*k*batch)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
