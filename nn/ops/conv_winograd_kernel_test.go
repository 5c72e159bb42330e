package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// The kernel's transforms, forward (winogradKernel, of the kernel as it is
// and, for the input gradient, flipped and transposed) and gradient
// (winogradKernelGrad), give the bits of the definitions computed a
// channel pair at a time (U[ξ][o][c] = (G g Gᵀ)[ξ] by wgG in float32; dw =
// Gᵀ dU G by wgGT in float64), whatever order and blocking they run in,
// at channel counts that leave a partial block of pairs and at resnet8's.
func TestWinogradKernelTransformsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	for _, s := range []struct{ oc, c int }{{8, 16}, {16, 16}, {8, 17}, {24, 16}, {32, 32}, {64, 64}, {16, 33}} {
		t.Run(fmt.Sprintf("%dx%d", s.oc, s.c), func(t *testing.T) {
			g := &convGeom{oc: s.oc, c: s.c}
			occ, us := s.oc*s.c, winogradStride(s.oc*s.c)
			w := make([]float32, 9*occ)
			for i := range w {
				w[i] = float32(r.NormFloat64())
			}
			for _, flip := range []bool{false, true} {
				var buf []float32
				u := winogradKernel(&buf, g, w, flip)
				for o := 0; o < s.oc; o++ {
					for c := 0; c < s.c; c++ {
						k := slices.Clone(w[(o*s.c+c)*9 : (o*s.c+c)*9+9])
						if flip { // w is [C, OC, 3, 3]: kernel (c, o), flipped
							k = slices.Clone(w[(c*s.oc+o)*9 : (c*s.oc+o)*9+9])
							slices.Reverse(k)
						}
						want := kernelRef(k)
						at := (o/8)*8*s.c + c*8 + o%8 // packA's layout
						for xi, v := range want {
							if got := u[xi*us+at]; math.Float32bits(got) != math.Float32bits(v) {
								t.Fatalf("flip %v: U[%d] output %d input %d = %v, want %v", flip, xi, o, c, got, v)
							}
						}
					}
				}
			}
			du := make([]float32, 36*occ)
			for i := range du {
				du[i] = float32(r.NormFloat64())
			}
			dw := make([]float32, 9*occ)
			for i := range dw {
				dw[i] = float32(math.NaN())
			}
			winogradKernelGrad(g, du, dw)
			for p := 0; p < occ; p++ {
				var d [36]float32
				for xi := range d {
					d[xi] = du[xi*occ+p]
				}
				want := kernelGradRef(d)
				for j, v := range want {
					if got := dw[p*9+j]; math.Float32bits(got) != math.Float32bits(v) {
						t.Fatalf("dw pair %d tap %d = %v, want %v", p, j, got, v)
					}
				}
			}
		})
	}
}

// winogradKernel at any output channel count: U[ξ] packed in whole blocks
// of 8 rows (packA's layout), the rows past OC in the last block +0, the
// 36 matrices a stride apart that holds the whole blocks, and nothing
// written past its buffer (whose spare capacity is checked untouched);
// on each kernel tier and in Go, serial and shared between workers
// (wgKernelJob), the same bits as the definition.
func TestWinogradKernelAnyOutputChannels(t *testing.T) {
	defer func(w func() int, sp int, a512, a2 bool) {
		imageWorkers, wgKernelSplitPairs, useAVX512, useAVX2 = w, sp, a512, a2
	}(imageWorkers, wgKernelSplitPairs, useAVX512, useAVX2)
	wgKernelSplitPairs = 1
	tiers := []struct {
		name         string
		avx512, avx2 bool
	}{{"go", false, false}}
	if useAVX512 {
		tiers = append(tiers, struct {
			name         string
			avx512, avx2 bool
		}{"avx512", true, false})
	}
	if useAVX2 {
		tiers = append(tiers, struct {
			name         string
			avx512, avx2 bool
		}{"avx2", false, true})
	}
	r := rand.New(rand.NewPCG(5, 11))
	for _, s := range []struct{ oc, c int }{{1, 3}, {7, 2}, {9, 16}, {12, 5}, {20, 17}, {8, 3}, {63, 64}} {
		g := &convGeom{oc: s.oc, c: s.c}
		w := make([]float32, 9*s.oc*s.c)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		for _, tier := range tiers {
			useAVX512, useAVX2 = tier.avx512, tier.avx2
			for _, workers := range []int{1, 3} {
				SetImageWorkers(workers)
				for _, flip := range []bool{false, true} {
					name := fmt.Sprintf("%dx%d %s workers=%d flip=%v", s.oc, s.c, tier.name, workers, flip)
					buf := make([]float32, 36*(s.oc+8)*s.c+64*36)
					for i := range buf {
						buf[i] = float32(math.NaN())
					}
					var j wgKernelJob
					u := j.transform(&buf, g, w, flip)
					if &u[0] != &buf[:1][0] {
						t.Fatalf("%s: the transform did not use the buffer it was given", name)
					}
					rows := (s.oc + 7) &^ 7
					us := len(u) / 36
					if len(u)%36 != 0 || us < rows*s.c {
						t.Fatalf("%s: %d values, not 36 matrices of %d rows by %d", name, len(u), rows, s.c)
					}
					for i, v := range buf[len(u):cap(buf)] {
						if !math.IsNaN(float64(v)) {
							t.Fatalf("%s: wrote %v at %d, past its %d values", name, v, len(u)+i, len(u))
						}
					}
					for o := 0; o < rows; o++ {
						for c := 0; c < s.c; c++ {
							var want [36]float32 // +0 past OC
							if o < s.oc {
								k := slices.Clone(w[(o*s.c+c)*9 : (o*s.c+c)*9+9])
								if flip {
									k = slices.Clone(w[(c*s.oc+o)*9 : (c*s.oc+o)*9+9])
									slices.Reverse(k)
								}
								want = kernelRef(k)
							}
							at := (o/8)*8*s.c + c*8 + o%8
							for xi, v := range want {
								if got := u[xi*us+at]; math.Float32bits(got) != math.Float32bits(v) {
									t.Fatalf("%s: U[%d] output %d input %d = %v, want %v", name, xi, o, c, got, v)
								}
							}
						}
					}
				}
			}
		}
	}
}

// kernelRef is G k Gᵀ for one 3x3 kernel k (row-major): (G k) column by
// column, then each of its rows times Gᵀ.
func kernelRef(k []float32) (u [36]float32) {
	var gk [6][3]float32
	for j := 0; j < 3; j++ {
		gk[0][j], gk[1][j], gk[2][j], gk[3][j], gk[4][j], gk[5][j] = wgG(k[j], k[3+j], k[6+j])
	}
	for a := 0; a < 6; a++ {
		r := u[6*a : 6*a+6]
		r[0], r[1], r[2], r[3], r[4], r[5] = wgG(gk[a][0], gk[a][1], gk[a][2])
	}
	return u
}

// kernelGradRef is Gᵀ d G for one pair's 36 values d (ξ = 6a+b), in
// float64.
func kernelGradRef(d [36]float32) (k [9]float32) {
	var t [3][6]float64
	for b := 0; b < 6; b++ {
		col := func(a int) float64 { return float64(d[6*a+b]) }
		t[0][b], t[1][b], t[2][b] = wgGT(col(0), col(1), col(2), col(3), col(4), col(5))
	}
	for i := 0; i < 3; i++ {
		r0, r1, r2 := wgGT(t[i][0], t[i][1], t[i][2], t[i][3], t[i][4], t[i][5])
		k[3*i], k[3*i+1], k[3*i+2] = float32(r0), float32(r1), float32(r2)
	}
	return k
}

// BenchmarkWinogradKernel times the kernel's transforms, forward and
// gradient, once a call each (and the forward again for the input
// gradient) at resnet8's channel counts and wider ones, batch-independent
// work of every Winograd convolution; forward-split is the forward shared
// between GOMAXPROCS image workers (wgKernelJob), as the convolutions run
// it:
//
//	GOMAXPROCS=1 go test ./nn/ops -run '^$' -bench WinogradKernel
func BenchmarkWinogradKernel(b *testing.B) {
	defer func(w func() int) { imageWorkers = w }(imageWorkers)
	SetImageWorkers(runtime.GOMAXPROCS(0))
	for _, c := range []int{16, 32, 64, 128, 256} {
		g := &convGeom{oc: c, c: c}
		w := make([]float32, 9*c*c)
		du := make([]float32, 36*c*c)
		for i := range du {
			du[i] = float32(i%13) * 0.1
		}
		copy(w, du)
		var buf []float32
		b.Run(fmt.Sprintf("forward/%d", c), func(b *testing.B) {
			for b.Loop() {
				winogradKernel(&buf, g, w, false)
			}
		})
		b.Run(fmt.Sprintf("forward-split/%d", c), func(b *testing.B) {
			var j wgKernelJob
			for b.Loop() {
				j.transform(&buf, g, w, false)
			}
		})
		b.Run(fmt.Sprintf("grad/%d", c), func(b *testing.B) {
			for b.Loop() {
				winogradKernelGrad(g, du, w)
			}
		})
	}
}

// The kernel-gradient transform of a range of channel pairs (the pieces
// of the weight gradient's join) gives each pair the bits of the whole
// call, however the ranges cut the blocks of 16 and 8 pairs the kernels
// take.
func TestWinogradKernelGradPairsAnyRange(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for _, s := range []struct{ oc, c int }{{8, 17}, {16, 16}, {64, 64}} {
		occ := s.oc * s.c
		du := make([]float32, 36*occ)
		for i := range du {
			du[i] = float32(r.NormFloat64())
		}
		want := make([]float32, 9*occ)
		winogradKernelGrad(&convGeom{oc: s.oc, c: s.c}, du, want)
		for _, cuts := range [][]int{{0, occ}, {0, 5, 37, occ}, {0, 16, 17, 40, 128, occ - 3, occ}} {
			got := make([]float32, 9*occ)
			for i := range got {
				got[i] = float32(math.NaN())
			}
			for k := 0; k+1 < len(cuts); k++ {
				winogradKernelGradPairs(du, got, occ, cuts[k], cuts[k+1])
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%dx%d cut at %v: dw[%d] = %v, want %v", s.oc, s.c, cuts, i, got[i], want[i])
				}
			}
		}
	}
}

// The kernel's transform shared between 2, 3 and 4 image workers, eight
// output channels a piece (wgKernelJob), gives the serial transform's bits,
// forward and flipped, with one block of rows, an odd input channel count, at resnet8's
// and wider channel counts; below wgKernelSplitPairs it stays serial.
func TestWinogradKernelSplitMatchesSerial(t *testing.T) {
	defer func(w func() int, p int) { imageWorkers, wgKernelSplitPairs = w, p }(imageWorkers, wgKernelSplitPairs)
	wgKernelSplitPairs = 1
	r := rand.New(rand.NewPCG(3, 5))
	for _, s := range []struct{ oc, c int }{{8, 16}, {16, 16}, {24, 17}, {64, 64}, {256, 32}} {
		g := &convGeom{oc: s.oc, c: s.c}
		w := make([]float32, 9*s.oc*s.c)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		for _, flip := range []bool{false, true} {
			var serial []float32
			want := winogradKernel(&serial, g, w, flip)
			for _, workers := range []int{1, 2, 3, 4} {
				SetImageWorkers(workers)
				var buf []float32
				var j wgKernelJob
				got := j.transform(&buf, g, w, flip)
				for i := range want {
					// Padding between the 36 matrices is never written:
					// both buffers hold zeros there.
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%dx%d flip %v workers=%d: U value %d = %v, want %v", s.oc, s.c, flip, workers, i, got[i], want[i])
					}
				}
			}
		}
	}
}
