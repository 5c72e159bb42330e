package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/internal/cputime"
)

// refGemm is c = op(a)·op(b) + beta·c in float64, the plain triple loop.
func refGemm(tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				ai, bi := i*lda+p, p*ldb+j
				if tA {
					ai = p*lda + i
				}
				if tB {
					bi = j*ldb + p
				}
				av, bv := a[ai], b[bi]
				s += float64(av) * float64(bv)
			}
			out[i*n+j] = s + float64(beta)*float64(c[i*ldc+j])
		}
	}
	return out
}

// forEachKernelTier runs f once on each tier of multiply kernels this CPU
// and KernelsEnv allow (AVX-512, then AVX2 with AVX-512 off), and skips
// where there is none.
func forEachKernelTier(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	old512, old2 := useAVX512, useAVX2
	defer func() { useAVX512, useAVX2 = old512, old2 }()
	if !old512 && !old2 {
		t.Skip("no AVX-512 or AVX2 kernels on this CPU (or FULGUR_NN_KERNELS=go): the convolutions multiply on package blas")
	}
	for _, tier := range []struct {
		name       string
		on, avx512 bool
	}{{"avx512", old512, true}, {"avx2", old2, false}} {
		if tier.on {
			useAVX512, useAVX2 = tier.avx512, !tier.avx512
			t.Run(tier.name, f)
		}
	}
}

func randF32(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.Float64()*2 - 1)
	}
	return s
}

// TestSgemmKernels checks the AVX-512 kernels against a float64 triple loop
// on the convolutions' shapes and on tails of every width (columns not a
// multiple of 32 or 16, B-row counts not a multiple of 6, rows not a
// multiple of 8 or 4), with and without
// a transposed a and accumulation, and that nothing outside c's rows moves.
func TestSgemmKernels(t *testing.T) { forEachKernelTier(t, testSgemmKernels) }

func testSgemmKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	type shape struct {
		tA, tB  bool
		m, n, k int
		beta    float32
	}
	shapes := []shape{
		{false, false, 16, 784, 144, 0}, {false, false, 32, 392, 288, 0}, {false, false, 64, 392, 576, 0},
		{false, false, 8, 1, 1, 0}, {false, false, 8, 33, 7, 1}, {false, false, 24, 47, 5, 0}, {false, false, 16, 31, 3, 1},
		{true, false, 144, 392, 32, 0}, {true, false, 16, 17, 9, 0},
		{false, true, 16, 144, 784, 0}, {false, true, 32, 288, 392, 1}, {false, true, 64, 32, 392, 0},
		{false, true, 4, 1, 1, 0}, {false, true, 4, 7, 15, 1}, {false, true, 8, 9, 17, 0}, {false, true, 12, 13, 33, 1},
		// Rows not a multiple of 8 (4 with a transposed b): whole blocks,
		// then the rest padded (sgemmNNRagged, sgemmNTRagged).
		{false, false, 33, 61, 153, 0}, {false, false, 9, 17, 5, 1}, {false, false, 15, 40, 27, 0},
		{true, false, 153, 61, 33, 0}, {true, false, 13, 20, 7, 1},
		{false, true, 33, 153, 61, 1}, {false, true, 5, 7, 9, 0}, {false, true, 7, 13, 40, 0},
	}
	for _, s := range shapes {
		t.Run(fmt.Sprintf("tA=%v,tB=%v,%dx%dx%d,beta=%v", s.tA, s.tB, s.m, s.n, s.k, s.beta), func(t *testing.T) {
			lda, ldb, ldc := s.k+3, s.n+5, s.n+2
			if s.tA {
				lda = s.m + 3
			}
			if s.tB {
				ldb = s.k + 5
			}
			arows, brows := s.m, s.k
			if s.tA {
				arows = s.k
			}
			if s.tB {
				brows = s.n
			}
			a, b := randF32(r, (arows-1)*lda+lda), randF32(r, (brows-1)*ldb+ldb)
			c := randF32(r, s.m*ldc)
			want := refGemm(s.tA, s.tB, s.m, s.n, s.k, a, lda, b, ldb, s.beta, c, ldc)
			orig := append([]float32(nil), c...)
			var sc mmScratch
			mm(&sc, s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, b, ldb, s.beta, c, ldc)
			for i := 0; i < s.m; i++ {
				for j := 0; j < ldc; j++ {
					got := c[i*ldc+j]
					if j >= s.n {
						if math.Float32bits(got) != math.Float32bits(orig[i*ldc+j]) {
							t.Fatalf("c[%d][%d] outside the product changed: %v, was %v", i, j, got, orig[i*ldc+j])
						}
						continue
					}
					w := want[i*s.n+j]
					if math.Abs(float64(got)-w) > 1e-5*float64(s.k+1) {
						t.Fatalf("c[%d][%d] = %v, want %v", i, j, got, w)
					}
				}
			}
		})
	}
}

// BenchmarkConvMultiplies times resnet8's convolution multiplies (batch
// chunk shapes, float32) on this package's kernels and on the BLAS programs
// choose, in GFLOP/s on one core (GOMAXPROCS=1): how far each is from a
// core's peak (about 200, BENCHMARKS.md). On a shared machine the best of
// several runs is the figure; others lost the core part of the time.
//
//	go test ./nn/ops -run '^$' -bench ConvMultiplies
func BenchmarkConvMultiplies(b *testing.B) {
	chooseOnce.Do(func() { _, _ = blas.Choose(zerolog.Nop(), blas.ChooseOptions{}) })
	b.Logf("blas: %s", blas.Current().Name())
	type shape struct {
		name    string
		tA, tB  bool
		m, n, k int
	}
	for _, s := range []shape{
		{"fwd-stage1", false, false, 16, 784, 144},
		{"fwd-stage2", false, false, 32, 392, 288},
		{"fwd-stage3", false, false, 64, 392, 576},
		{"dw-stage1", false, true, 16, 144, 784},
		{"dw-stage2", false, true, 32, 288, 392},
		{"dw-stage3", false, true, 64, 576, 392},
		{"dx-col2im-stage3", true, false, 288, 392, 64},
	} {
		r := rand.New(rand.NewPCG(3, 4))
		asz, bsz := s.m*s.k, s.k*s.n
		lda, ldb := s.k, s.n
		if s.tA {
			lda = s.m
		}
		if s.tB {
			ldb = s.k
		}
		a, bb, c := randF32(r, asz), randF32(r, bsz), make([]float32, s.m*s.n)
		flops := 2 * float64(s.m*s.n*s.k)
		for _, impl := range []string{"kernel", "blas"} {
			if impl == "kernel" && !mmKernels() {
				continue
			}
			b.Run(s.name+"/"+impl, func(b *testing.B) {
				var sc mmScratch
				for i := 0; i < b.N; i++ {
					if impl == "kernel" {
						mm(&sc, s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
					} else {
						gemm(s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
					}
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkConvImplicitMultiplies times the forward multiplies of resnet8's
// same-padded 3x3 convolutions as the implicit path runs them (one chunk of
// images, B read from the padded input through row offsets), in GFLOP/s of
// the whole grid and of the image columns it keeps, on one core:
//
//	GOMAXPROCS=1 go test ./nn/ops -run '^$' -bench ConvImplicitMultiplies
func BenchmarkConvImplicitMultiplies(b *testing.B) {
	if !mmKernels() {
		b.Skip("no AVX-512 or AVX2 kernels: no implicit path")
	}
	for _, s := range []struct {
		name      string
		c, oc, hw int
	}{{"stage1", 16, 16, 28}, {"stage2", 32, 32, 14}, {"stage3", 64, 64, 7}} {
		g := convGeom{n: 64, c: s.c, h: s.hw, w: s.hw, oc: s.oc, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, oh: s.hw, ow: s.hw}
		nb, ckk := g.chunk(), g.ckk()
		q := g.gridCols()
		r := rand.New(rand.NewPCG(3, 4))
		x, w := randF32(r, g.n*g.in()), randF32(r, g.oc*ckk)
		var cs convScratch
		xp, grid := make([]float32, g.padSize()), make([]float32, g.oc*q)
		padChunk(&g, x, xp, 0, nb)
		off := implicitOffsets(&g, &cs)
		var buf []float32
		ap := packed(&buf, g.oc, ckk, w)
		b.Run(fmt.Sprintf("%s-%dx%dx%d", s.name, g.oc, q, ckk), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				sgemmNNPacked(g.oc, q, ckk, ap, xp, off, grid, q, false)
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(2*float64(g.oc*q*ckk)*float64(b.N)/sec/1e9, "grid-GFLOP/s")
			b.ReportMetric(2*float64(g.oc*nb*g.ohw()*ckk)*float64(b.N)/sec/1e9, "GFLOP/s")
		})
	}
}

// sgemmNTSegs against the sum of its segments' products by the definition:
// several segments, rows of a and b that do not start at 0, partial last
// tiles (n not a multiple of 6, q not of 16), set and accumulate.
func TestSgemmNTSegs(t *testing.T) { forEachKernelTier(t, testSgemmNTSegs) }

func testSgemmNTSegs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range []struct{ m, n, q, segs int }{{4, 6, 16, 2}, {8, 13, 37, 3}, {16, 144, 420, 2}, {12, 7, 5, 4}, {4, 1, 1, 2},
		{16, 16, 245, 1}, {8, 14, 37, 2}, {4, 4, 9, 3}, {4, 8, 24, 1}} {
		t.Run(fmt.Sprintf("%dx%dx%d/segs=%d", s.m, s.n, s.q, s.segs), func(t *testing.T) {
			lda, ldb, ldc := s.q+3, s.q+5, s.n+2
			astride, bstride := s.m*lda+1, s.n*ldb+2
			a := randF32(r, (s.segs-1)*astride+s.m*lda)
			b := randF32(r, (s.segs-1)*bstride+s.n*ldb)
			boff := make([]int32, s.n)
			for j := range boff {
				boff[j] = int32((s.n - 1 - j) * ldb) // rows in reverse: boff is a table
			}
			for _, acc := range []bool{false, true} {
				c := randF32(r, s.m*ldc)
				want := make([]float64, len(c))
				for i := 0; i < s.m; i++ {
					for j := 0; j < ldc; j++ {
						if acc || j >= s.n {
							want[i*ldc+j] = float64(c[i*ldc+j])
						}
						if j >= s.n {
							continue
						}
						for sg := 0; sg < s.segs; sg++ {
							for p := 0; p < s.q; p++ {
								want[i*ldc+j] += float64(a[sg*astride+i*lda+p]) * float64(b[sg*bstride+int(boff[j])+p])
							}
						}
					}
				}
				var sc mmScratch
				sgemmNTSegs(&sc, s.m, s.n, s.q, s.segs, a, lda, astride, b, boff, bstride, c, ldc, acc)
				for i, w := range want {
					if math.Abs(float64(c[i])-w) > 1e-5*float64(s.q*s.segs+1) {
						t.Fatalf("acc=%v: c[%d][%d] = %v, want %v", acc, i/ldc, i%ldc, c[i], w)
					}
				}
			}
		})
	}
}

// A row of c whose last 4 or 8 columns the AVX2 tier multiplies in tiles
// of 4 (sgemmNT4x4AVX2) gets the bits the tiles of 6 give those columns:
// c of n columns against the first n of n rounded up to a multiple of 6
// (all in tiles of 6), set and
// accumulated, one segment and several, tails of q of every length.
func TestSgemmNTTilesOf4SameBits(t *testing.T) { forEachKernelTier(t, testSgemmNTTilesOf4SameBits) }

func testSgemmNTTilesOf4SameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, s := range []struct{ m, n, q, segs int }{{16, 16, 245, 1}, {8, 64, 256, 1}, {4, 4, 7, 2}, {8, 10, 33, 3}, {4, 14, 16, 1}, {4, 32, 8, 2}} {
		for _, acc := range []bool{false, true} {
			name := fmt.Sprintf("%dx%dx%d/segs=%d/acc=%v", s.m, s.n, s.q, s.segs, acc)
			wide := (s.n + 5) / 6 * 6
			lda, ldb := s.q+1, s.q+3
			astride, bstride := s.m*lda+5, wide*ldb+7
			a := randF32(r, (s.segs-1)*astride+s.m*lda)
			b := randF32(r, (s.segs-1)*bstride+wide*ldb)
			boff := make([]int32, wide)
			for j := range boff {
				boff[j] = int32(j * ldb)
			}
			c0 := randF32(r, s.m*wide)
			got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
			var sc mmScratch
			sgemmNTSegs(&sc, s.m, s.n, s.q, s.segs, a, lda, astride, b, boff[:s.n], bstride, got, wide, acc)
			sgemmNTSegs(&sc, s.m, wide, s.q, s.segs, a, lda, astride, b, boff, bstride, want, wide, acc)
			for i := 0; i < s.m; i++ {
				for j := 0; j < s.n; j++ {
					if g, w := got[i*wide+j], want[i*wide+j]; math.Float32bits(g) != math.Float32bits(w) {
						t.Fatalf("%s: c[%d][%d] = %v, in tiles of 6 %v", name, i, j, g, w)
					}
				}
			}
		}
	}
}

// The AVX2 sgemmNN kernel runs each element's chain of fused multiply-adds
// in the AVX-512 kernel's order: the same bits, on every column count of a
// tile (the partial ones masked), set and accumulated.
func TestSgemmNNAVX2SameBits(t *testing.T) {
	if !useAVX512 || !useAVX2 {
		t.Skip("needs both the AVX-512 and the AVX2 kernels (FULGUR_NN_KERNELS unset on an AVX-512 CPU)")
	}
	defer func() { useAVX512 = true }()
	r := rand.New(rand.NewPCG(5, 6))
	for _, k := range []int{1, 7, 144} {
		for n := 1; n <= 70; n++ {
			m, ldb, ldc := 16, n+3, n+1
			a, b := randF32(r, m*k), randF32(r, k*ldb)
			boff := make([]int32, k)
			for kk := range boff {
				boff[kk] = int32((k - 1 - kk) * ldb)
			}
			c0 := randF32(r, m*ldc)
			var sc mmScratch
			for _, acc := range []bool{false, true} {
				var got [2][]float32
				for i, avx512 := range []bool{true, false} {
					useAVX512 = avx512
					got[i] = append([]float32(nil), c0...)
					sgemmNN(&sc, false, m, n, k, a, k, b, boff, got[i], ldc, acc)
				}
				for i := range got[0] {
					if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
						t.Fatalf("k=%d n=%d acc=%v: c[%d][%d] is %v on AVX2, %v on AVX-512", k, n, acc, i/ldc, i%ldc, got[1][i], got[0][i])
					}
				}
			}
		}
	}
}

// BenchmarkNTMultiplies times sgemmNTSegs on the shapes a resnet8 step
// gives it most (the Winograd weight gradients' products, m×n×q, and the
// implicit path's, segs chunks), in GFLOP/s on one core (warm caches), of
// the wall time and of the process's CPU time (the figure to read on a
// shared machine):
//
//	GOMAXPROCS=1 go test ./nn/ops -run '^$' -bench NTMultiplies
func BenchmarkNTMultiplies(b *testing.B) {
	if !mmKernels() {
		b.Skip("no AVX-512 or AVX2 kernels: sgemmNT is not taken")
	}
	for _, s := range []struct{ m, n, q, segs, lda, astride, bstride int }{
		{16, 16, 245, 1, 256, 0, 0}, {8, 64, 256, 1, 256, 0, 0}, {32, 32, 192, 1, 192, 0, 0},
		{16, 9, 812, 1, 812, 12992, 872}, {32, 144, 420, 2, 420, 13440, 28864}, {64, 288, 448, 2, 448, 28672, 65664},
	} {
		b.Run(fmt.Sprintf("%dx%dx%d/segs=%d", s.m, s.n, s.q, s.segs), func(b *testing.B) {
			r := rand.New(rand.NewPCG(5, 6))
			ldb := s.lda
			bstride := max(s.bstride, s.n*ldb)
			astride := max(s.astride, s.m*s.lda)
			a := randF32(r, (s.segs-1)*astride+s.m*s.lda)
			bb := randF32(r, (s.segs-1)*bstride+s.n*ldb)
			boff := make([]int32, s.n)
			for j := range boff {
				boff[j] = int32(j * ldb)
			}
			c := make([]float32, s.m*s.n)
			var sc mmScratch
			flops := 2 * float64(s.m*s.n*s.q*s.segs) * float64(b.N)
			b.ResetTimer()
			cpu0 := cputime.Now()
			for i := 0; i < b.N; i++ {
				sgemmNTSegs(&sc, s.m, s.n, s.q, s.segs, a, s.lda, astride, bb, boff, bstride, c, s.n, false)
			}
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			if cpu := cputime.Now() - cpu0; cpu > 0 {
				b.ReportMetric(flops/cpu.Seconds()/1e9, "cpu-GFLOP/s")
			}
		})
	}
}
