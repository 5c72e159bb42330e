//go:build amd64 && !purego && (linux || darwin)

package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// guarded is n floats whose memory starts and ends on a page the process
// may not read (a load touching either faults), zeros.
func guarded(t testing.TB, n int) []float32 {
	t.Helper()
	ps := syscall.Getpagesize()
	data := (4*n + ps - 1) / ps * ps
	mem, err := syscall.Mmap(-1, 0, data+2*ps, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mmap %d bytes: %v", data+2*ps, err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[:ps], syscall.PROT_NONE); err != nil {
		t.Fatalf("mprotect: %v", err)
	}
	if err := syscall.Mprotect(mem[ps+data:], syscall.PROT_NONE); err != nil {
		t.Fatalf("mprotect: %v", err)
	}
	all := unsafe.Slice((*float32)(unsafe.Pointer(&mem[ps])), data/4)
	return all[len(all)-n:]
}

// wgTileCase is a call of a transform kernel: patches of rows wp apart at
// off (a multiple of 16 tiles) in a buffer of n floats.
type wgTileCase struct {
	name  string
	wp, n int
	off   []int32
}

// wgTileCases are the patches of the Winograd path's chunks at resnet8's
// sizes and at partial tiles, 6x6 (input, rows wp apart) or 4x4 (output
// gradient, as convGradWeightWinograd copies dy), and random ones: the last
// patch of each ends its buffer, and the first starts it.
func wgTileCases(r *rand.Rand, size int) []wgTileCase {
	var cs []wgTileCase
	for _, s := range []struct{ k, h, w int }{{5, 28, 28}, {2, 28, 28}, {2, 14, 14}, {8, 7, 7}, {4, 5, 6}, {2, 3, 3}} {
		g := &convGeom{n: s.k, c: 16, h: s.h, w: s.w, oc: 16, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, oh: s.h, ow: s.w}
		th, tw, hp, wp := g.winogradTiles()
		rs := winogradRow(s.k * th * tw)
		off := make([]int32, rs)
		name := fmt.Sprintf("%dx%dx%d", s.k, s.h, s.w)
		if size == 6 {
			winogradPatches(g, s.k, off, make([]int32, rs), nil, g.out(), g.w)
			cs = append(cs, wgTileCase{name, wp, s.k * hp * wp, off})
			continue
		}
		dld, dpl := s.w, s.h*s.w
		if s.h%4 != 0 || s.w%4 != 0 {
			dld, dpl = 4*tw, 16*th*tw
		}
		winogradPatches(g, s.k, make([]int32, rs), off, nil, dpl, dld)
		cs = append(cs, wgTileCase{name, dld, s.k * dpl, off})
	}
	for i := range 8 {
		wp := size + r.IntN(40)
		n := (size-1)*wp + size + r.IntN(3000)
		off := make([]int32, 64)
		for j := range off {
			off[j] = int32(r.IntN(n - (size-1)*wp - size + 1))
		}
		off[5], off[58] = 0, int32(n-(size-1)*wp-size)
		cs = append(cs, wgTileCase{fmt.Sprintf("random%d", i), wp, n, off})
	}
	return cs
}

// wgInput16 and wgGrad16, which load their tiles' rows, give the bits of
// the kernels that gather them, wherever the tiles lie, and read nothing
// outside the patches: a buffer between unreadable pages, its first and
// last patch touching them.
func TestWinogradTransformsMatchGathers(t *testing.T) {
	if !useAVX512 {
		t.Skip("the Winograd kernels run on AVX-512; this CPU has none")
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, k := range []struct {
		name      string
		size      int
		got, want func(*float32, *int32, int, *float32, int, *float32)
	}{{"wgInput16", 6, wgInput16, wgInput16Gather}, {"wgGrad16", 4, wgGrad16, wgGrad16Gather}} {
		for _, c := range wgTileCases(r, k.size) {
			p := guarded(t, c.n)
			for i := range p {
				p[i] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(20)-10)))
			}
			ld := len(c.off) + 16 // as winogradStride leaves
			got, want := make([]float32, 36*ld), make([]float32, 36*ld)
			tmp := make([]float32, 576)
			for t0 := 0; t0 < len(c.off); t0 += 16 {
				k.got(&p[0], &c.off[t0], c.wp, &got[t0], ld, &tmp[0])
				k.want(&p[0], &c.off[t0], c.wp, &want[t0], ld, &tmp[0])
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s %s: value %d of tile %d = %v, want %v bit for bit", k.name, c.name, i/ld, i%ld, got[i], want[i])
				}
			}
		}
	}
}

// BenchmarkWinogradTransforms times the input and output-gradient
// transforms of one channel of resnet8's chunks (warm caches) on the
// kernels in use, loading their rows, or with AVX-512 gathering them too
// (ns per 16 tiles).
func BenchmarkWinogradTransforms(b *testing.B) {
	if !useAVX512 && !useAVX2 {
		b.Skip("no AVX-512 or AVX2: the Winograd path is never taken")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range []struct {
		name string
		size int
		f    func(*float32, *int32, int, *float32, int, *float32)
	}{
		{"input/load", 6, wgInputTiles}, {"input/gather", 6, wgInput16Gather},
		{"grad/load", 4, wgGradTiles}, {"grad/gather", 4, wgGrad16Gather},
	} {
		if strings.HasSuffix(k.name, "gather") && !useAVX512 {
			continue
		}
		for _, c := range wgTileCases(r, k.size)[:4] {
			b.Run(k.name+"/"+c.name, func(b *testing.B) {
				p := make([]float32, c.n)
				for i := range p {
					p[i] = float32(r.NormFloat64())
				}
				ld := winogradStride(len(c.off))
				v, tmp := make([]float32, 36*ld), make([]float32, 576)
				b.ResetTimer()
				for range b.N {
					for t0 := 0; t0 < len(c.off); t0 += 16 {
						k.f(&p[0], &c.off[t0], c.wp, &v[t0], ld, &tmp[0])
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(c.off)/16), "ns/16tiles")
			})
		}
	}
}

// wgBT and wgAT are Bᵀ (6x6) and Aᵀ (4x6) of F(4x4, 3x3).
var (
	wgBT = [6][6]float64{
		{4, 0, -5, 0, 1, 0},
		{0, -4, -4, 1, 1, 0},
		{0, 4, -4, -1, 1, 0},
		{0, -2, -1, 2, 1, 0},
		{0, 2, -1, -2, 1, 0},
		{0, 4, 0, -5, 0, 1},
	}
	wgAT = [4][6]float64{
		{1, 1, 1, 1, 1, 0},
		{0, 1, -1, 2, -2, 0},
		{0, 1, 1, 4, 4, 0},
		{0, 1, -1, 8, -8, 1},
	}
)

// wgTransformRef is the transform of one tile's patch d (size×size, rows
// wp apart from p[at]) in float64: Bᵀ d B (size 6) or A d Aᵀ (size 4),
// value ξ = 6a+b, and Σ|coefficient||term| of each (its rounding's scale).
func wgTransformRef(p []float32, at, wp, size int) (v, scale [36]float64) {
	coef := func(a, i int) float64 { return wgBT[a][i] }
	if size == 4 {
		coef = func(a, i int) float64 { return wgAT[i][a] }
	}
	for a := range 6 {
		for b := range 6 {
			for i := range size {
				for j := range size {
					c, d := coef(a, i)*coef(b, j), float64(p[at+i*wp+j])
					v[6*a+b] += c * d
					scale[6*a+b] += math.Abs(c * d)
				}
			}
		}
	}
	return v, scale
}

// The AVX2 transforms (wgInputTiles and wgGradTiles without AVX-512: two
// calls of 8 tiles) match the float64 transforms of their patches within
// a few float32 roundings, wherever the tiles lie, read nothing outside
// the patches (a buffer between unreadable pages, its first and last
// patch touching them), and where the CPU has AVX-512 too give the bits of
// its kernels.
func TestWinogradAVX2TransformsMatchReference(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 and FMA on this CPU")
	}
	defer func(v bool) { useAVX512 = v }(useAVX512)
	has512 := useAVX512
	r := rand.New(rand.NewPCG(13, 14))
	for _, k := range []struct {
		name string
		size int
		f    func(*float32, *int32, int, *float32, int, *float32)
	}{{"input", 6, wgInputTiles}, {"grad", 4, wgGradTiles}} {
		for _, c := range wgTileCases(r, k.size) {
			p := guarded(t, c.n)
			for i := range p {
				p[i] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(20)-10)))
			}
			ld := len(c.off) + 16
			got, want := make([]float32, 36*ld), make([]float32, 36*ld)
			tmp := make([]float32, 576)
			for t0 := 0; t0 < len(c.off); t0 += 16 {
				useAVX512 = false
				k.f(&p[0], &c.off[t0], c.wp, &got[t0], ld, &tmp[0])
				useAVX512 = has512
				if has512 {
					k.f(&p[0], &c.off[t0], c.wp, &want[t0], ld, &tmp[0])
				}
			}
			for tile, at := range c.off {
				ref, scale := wgTransformRef(p, int(at), c.wp, k.size)
				for xi := range ref {
					g := float64(got[xi*ld+tile])
					if e := math.Abs(g - ref[xi]); e > 1e-6*scale[xi] || math.IsNaN(g) {
						t.Fatalf("%s %s: value %d of tile %d = %v, want %v (error %.3g of its scale %.3g)", k.name, c.name, xi, tile, g, ref[xi], e/scale[xi], scale[xi])
					}
					if has512 && math.Float32bits(got[xi*ld+tile]) != math.Float32bits(want[xi*ld+tile]) {
						t.Fatalf("%s %s: value %d of tile %d = %v, the AVX-512 kernel's %v", k.name, c.name, xi, tile, got[xi*ld+tile], want[xi*ld+tile])
					}
				}
			}
		}
	}
}

// The AVX2 output transform (wgOutputTiles without AVX-512) writes every
// output of the Winograd path's chunks, resnet8's sizes and partial tiles,
// as the float64 Aᵀ m A within a few float32 roundings, and nothing
// outside the image: the outputs lie between unreadable pages, and where
// the CPU has AVX-512 too, the bits of its kernel.
func TestWinogradAVX2OutputMatchesReference(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 and FMA on this CPU")
	}
	defer func(v bool) { useAVX512 = v }(useAVX512)
	has512 := useAVX512
	r := rand.New(rand.NewPCG(15, 16))
	for _, s := range []struct{ k, h, w int }{{5, 28, 28}, {2, 14, 14}, {8, 7, 7}, {4, 5, 6}, {2, 3, 3}, {3, 8, 8}} {
		g := &convGeom{n: s.k, c: 16, h: s.h, w: s.w, oc: 16, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, oh: s.h, ow: s.w}
		th, tw, _, _ := g.winogradTiles()
		nt := s.k * th * tw
		rs := winogradRow(nt)
		xoff, yoff, mask := make([]int32, rs), make([]int32, rs), make([]int32, 4*rs)
		winogradPatches(g, s.k, xoff, yoff, mask, s.h*s.w, s.w)
		ld := rs + 16
		m := make([]float32, 36*ld)
		for i := range m {
			m[i] = float32(r.NormFloat64())
		}
		y := guarded(t, s.k*s.h*s.w)
		want := make([]float32, len(y))
		tmp := make([]float32, 576)
		for i := range y {
			y[i] = float32(math.NaN())
		}
		for t0 := 0; t0 < nt; t0 += 16 {
			useAVX512 = false
			wgOutputTiles(&m[t0], ld, &tmp[0], &y[0], &yoff[t0], s.w, &mask[4*t0])
			useAVX512 = has512
			if has512 {
				wgOutputTiles(&m[t0], ld, &tmp[0], &want[0], &yoff[t0], s.w, &mask[4*t0])
			}
		}
		name := fmt.Sprintf("%dx%dx%d", s.k, s.h, s.w)
		for tile := 0; tile < nt; tile++ {
			i, ty, tx := tile/(th*tw), tile%(th*tw)/tw, tile%tw
			for rr := 0; rr < 4 && 4*ty+rr < s.h; rr++ {
				for j := 0; j < 4 && 4*tx+j < s.w; j++ {
					ref, scale := 0.0, 0.0
					for a := range 6 {
						for b := range 6 {
							v := wgAT[rr][a] * float64(m[(6*a+b)*ld+tile]) * wgAT[j][b]
							ref += v
							scale += math.Abs(v)
						}
					}
					at := i*s.h*s.w + (4*ty+rr)*s.w + 4*tx + j
					if e := math.Abs(float64(y[at]) - ref); e > 1e-6*scale || math.IsNaN(float64(y[at])) {
						t.Fatalf("%s: output (%d, %d) of tile %d = %v, want %v", name, rr, j, tile, y[at], ref)
					}
					if has512 && math.Float32bits(y[at]) != math.Float32bits(want[at]) {
						t.Fatalf("%s: output (%d, %d) of tile %d = %v, the AVX-512 kernel's %v", name, rr, j, tile, y[at], want[at])
					}
				}
			}
		}
	}
}

// BenchmarkWinogradOutput times the output transform of one output
// channel of resnet8's chunks (warm caches) on the kernels in use (ns per
// 16 tiles): 28x28's tiles all inside the image, 14x14's and 7x7's the
// last row and column partly outside.
func BenchmarkWinogradOutput(b *testing.B) {
	if !useAVX512 && !useAVX2 {
		b.Skip("no AVX-512 or AVX2: the Winograd path is never taken")
	}
	for _, s := range []struct{ k, hw int }{{5, 28}, {2, 14}, {8, 7}} {
		b.Run(fmt.Sprintf("%dx%dx%d", s.k, s.hw, s.hw), func(b *testing.B) {
			g := &convGeom{n: s.k, c: 16, h: s.hw, w: s.hw, oc: 16, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, oh: s.hw, ow: s.hw}
			th, tw, _, _ := g.winogradTiles()
			nt := s.k * th * tw
			rs := winogradRow(nt)
			xoff, yoff, mask := make([]int32, rs), make([]int32, rs), make([]int32, 4*rs)
			winogradPatches(g, s.k, xoff, yoff, mask, s.hw*s.hw, s.hw)
			ld := winogradStride(rs)
			m, y, tmp := make([]float32, 36*ld), make([]float32, s.k*s.hw*s.hw), make([]float32, 576)
			for i := range m {
				m[i] = float32(i%7) - 3
			}
			b.ResetTimer()
			for range b.N {
				for t0 := 0; t0 < nt; t0 += 16 {
					wgOutputTiles(&m[t0], ld, &tmp[0], &y[0], &yoff[t0], s.hw, &mask[4*t0])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*((nt+15)/16)), "ns/16tiles")
		})
	}
}
