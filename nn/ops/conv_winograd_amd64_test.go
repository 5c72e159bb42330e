//go:build amd64 && !purego && (linux || darwin)

package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
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
// transforms of one channel of resnet8's chunks (warm caches), loading
// their rows or gathering them (ns per 16 tiles).
func BenchmarkWinogradTransforms(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range []struct {
		name string
		size int
		f    func(*float32, *int32, int, *float32, int, *float32)
	}{
		{"input/load", 6, wgInput16}, {"input/gather", 6, wgInput16Gather},
		{"grad/load", 4, wgGrad16}, {"grad/gather", 4, wgGrad16Gather},
	} {
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
