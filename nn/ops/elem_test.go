package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The AVX-512 loops of elem_amd64.s, and the AVX2 ones of elem_avx2_amd64.s
// where they exist (with AVX-512 off), against the Go loops they replace, on
// every length up to 70 (whole vectors, the half-vector step of the sums,
// masked tails) with NaN, ±0 and ±Inf among the values: the same results
// (within rounding where the kernels fuse multiply-adds or sum in another
// order), NaN where Go gives NaN, and nothing written past the end.
// avx2Ported names the checks of TestElemKernelsMatchGo whose loops have
// AVX2 kernels, the same bits as the AVX-512 ones; the others run the Go
// loops on the AVX2 tier.
var avx2Ported = map[string]bool{"maskPos": true, "addRelu": true, "add": true, "bnAffine relu=false": true, "bnAffine relu=true": true, "bnAdd": true, "bnInputGrad": true}

func TestElemKernelsMatchGo(t *testing.T) {
	has512, has2 := useAVX512, useAVX2
	if !has512 {
		t.Skip("this CPU has no AVX-512: the Go loops run (covered by the op tests)")
	}
	defer func() { useAVX512, useAVX2 = has512, has2 }()
	r := rand.New(rand.NewPCG(5, 6))
	special := []float32{float32(math.NaN()), 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1))}
	gen := func(n int) []float32 {
		s := make([]float32, n+8) // 8 guard elements past the end
		for i := range s {
			s[i] = float32(r.Float64()*4 - 2)
			if r.IntN(10) == 0 {
				s[i] = special[r.IntN(len(special))]
			}
		}
		return s
	}
	same := func(t *testing.T, what string, got, want []float32, tol float64) {
		t.Helper()
		for i := range want {
			g, w := float64(got[i]), float64(want[i])
			if math.IsNaN(w) || math.IsNaN(g) {
				if math.IsNaN(w) != math.IsNaN(g) {
					t.Fatalf("%s[%d] = %v, want %v", what, i, g, w)
				}
				continue
			}
			if g != w && math.Abs(g-w) > tol*(1+math.Abs(w)) {
				t.Fatalf("%s[%d] = %v, want %v", what, i, g, w)
			}
		}
	}
	for n := 0; n <= 70; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			a, b, c, d := gen(n), gen(n), gen(n), gen(n)
			// tier 0: the Go loops; 1: AVX-512; 2: AVX2 (the kernels it has).
			run := func(tier int, f func(out []float32)) []float32 {
				useAVX512, useAVX2 = tier == 1, tier == 2
				out := make([]float32, n+8)
				for i := range out {
					out[i] = 42
				}
				f(out)
				return out
			}
			check := func(what string, tol float64, f func(out []float32)) {
				t.Helper()
				want := run(0, f)
				same(t, what, run(1, f), want, tol)
				if has2 {
					same(t, what+" (AVX2)", run(2, f), want, tol)
					if avx2Ported[what] {
						same(t, what+" (AVX2 against AVX-512)", run(2, f), run(1, f), 0)
					}
				}
			}
			check("maskPos", 0, func(out []float32) { maskPos(a[:n], b[:n], out[:n]) })
			check("addRelu", 0, func(out []float32) { addRelu(a[:n], b[:n], out[:n]) })
			check("add", 0, func(out []float32) { add(a[:n], b[:n], out[:n]) })
			for _, relu := range []bool{false, true} {
				op := &bnOp{c: 1, inner: n, scale: []float64{1.5}, shift: []float64{-0.25}, BatchNormOpts: BatchNormOpts{ReLU: relu}}
				check(fmt.Sprintf("bnAffine relu=%v", relu), 1e-6, func(out []float32) { bnAffine(op, a[:n], out[:n], 0, 1) })
			}
			ba := &bnAddOp{bns: []*bnOp{{n: 1, c: 1, inner: n}}, a: []float64{1.5}, b: []float64{-0.75}, k: []float64{0.25}}
			check("bnAdd", 1e-6, func(out []float32) { bnAdd(ba, a[:n], b[:n], out[:n], 0, 1) })
			op := &bnOp{c: 1, inner: n, ga: []float64{0.75}, gb: []float64{-1.25}, gk: []float64{0.5}}
			check("bnInputGrad", 1e-6, func(out []float32) { bnInputGrad(op, a[:n], b[:n], out[:n], 0, 1) })
			check("shiftedSums", 1e-5, func(out []float32) {
				s, sq := shiftedSums(a[:n], 0.5)
				out[0], out[1] = float32(s), float32(sq)
			})
			check("maskDotSums", 1e-5, func(out []float32) {
				dm := make([]float32, n)
				s, sx := maskDotSums(a[:n], b[:n], c[:n], dm)
				copy(out, dm)
				out[n], out[n+1] = float32(s), float32(sx)
			})
			check("maskAddDotSums", 1e-5, func(out []float32) {
				dm := make([]float32, n)
				s, sx := maskAddDotSums(a[:n], b[:n], d[:n], c[:n], dm)
				copy(out, dm)
				out[n], out[n+1] = float32(s), float32(sx)
			})
			{ // bitwise the AVX-512 add then maskDotSums, the path it replaces
				useAVX512, useAVX2 = true, false
				dm := make([]float32, n+8)
				for i := range dm {
					dm[i] = 42
				}
				s, sx := maskAddDotSums(a[:n], b[:n], d[:n], c[:n], dm[:n])
				want := make([]float32, n+8)
				copy(want[n:], dm[n:])
				add(b[:n], d[:n], want[:n])
				ws, wsx := maskDotSums(a[:n], want[:n], c[:n], want[:n])
				same(t, "maskAddDotSums against the AVX-512 add, maskDotSums", append(dm, float32(s), float32(sx)), append(want, float32(ws), float32(wsx)), 0)
			}
			{ // bitwise the AVX-512 maskPos then dotSums, the path it replaces
				useAVX512, useAVX2 = true, false
				dm := make([]float32, n+8)
				for i := range dm {
					dm[i] = 42
				}
				s, sx := maskDotSums(a[:n], b[:n], c[:n], dm[:n])
				want := make([]float32, n+8)
				copy(want[n:], dm[n:])
				maskPos(a[:n], b[:n], want[:n])
				ws, wsx := dotSums(want[:n], c[:n])
				same(t, "maskDotSums against the AVX-512 maskPos, dotSums", append(dm, float32(s), float32(sx)), append(want, float32(ws), float32(wsx)), 0)
			}
			check("dotSums", 1e-5, func(out []float32) {
				s, sx := dotSums(a[:n], b[:n])
				out[0], out[1] = float32(s), float32(sx)
			})
		})
	}
}

// copyRows (the row moves of the implicit convolutions) against a direct
// loop, on each implementation the CPU has (Go, AVX2, AVX-512): every
// width and gap up to 40 (whole vectors, tails, none), rows further apart
// than a row and gap and exactly that far, one row and several: the rows
// and zeros land where they should and nothing else in dst changes.
func TestCopyRowsMatchesLoop(t *testing.T) {
	defer func(v512, v2 bool) { useAVX512, useAVX2 = v512, v2 }(useAVX512, useAVX2)
	type impl struct{ avx512, avx2 bool }
	impls := []impl{{}}
	if useAVX2 {
		impls = append(impls, impl{avx2: true})
	}
	if useAVX512 {
		impls = append(impls, impl{avx512: true})
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, avx := range impls {
		useAVX512, useAVX2 = avx.avx512, avx.avx2
		for w := 0; w <= 40; w++ {
			for gap := 0; gap <= 40; gap += 1 + gap/8 {
				for _, rows := range []int{1, 3} {
					for _, extra := range []int{0, 5} {
						ldd, lds := w+gap+extra, w+2*extra+1
						src := randF32(r, (rows-1)*lds+w)
						dst := make([]float32, rows*ldd+3)
						for i := range dst {
							dst[i] = 42
						}
						want := append([]float32(nil), dst...)
						for y := 0; y < rows; y++ {
							for j := 0; j < w; j++ {
								want[y*ldd+j] = src[y*lds+j]
							}
							for j := 0; j < gap; j++ {
								want[y*ldd+w+j] = 0
							}
						}
						copyRows(dst, ldd, src, lds, w, gap, rows)
						for i := range want {
							if dst[i] != want[i] {
								t.Fatalf("avx=%v w=%d gap=%d rows=%d ldd=%d lds=%d: dst[%d] = %v, want %v", avx, w, gap, rows, ldd, lds, i, dst[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}
