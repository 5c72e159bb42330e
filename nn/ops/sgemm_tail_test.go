//go:build amd64 && !purego && linux

package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// atPageEnd is a copy of s that ends where a mapped page ends, the next page
// inaccessible (pageEnd).
func atPageEnd(t *testing.T, s []float32) []float32 {
	p := pageEnd(t, len(s))
	copy(p, s)
	return p
}

// sameF32 fails unless got and want hold the same bits.
func sameF32(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %v with the operands at a page end, %v on the heap", what, i, got[i], want[i])
		}
	}
}

// The multiply kernels read a row's last partial vector of B, of c (when
// adding to it) and, transposed, of A through VMASKMOVPS with AVX2: a row
// that ends where a page ends, the next unmapped, is read without touching
// that page (qemu's TCG faults on masked-off lanes there), and every
// product has the bits it has on heap copies. Shapes: partial column
// blocks (n not a multiple of 32; q not of 16), one and several row
// blocks, ragged rows, set and accumulated.
func TestAVX2MultiplyAtAPageEnd(t *testing.T) {
	if !mmKernels() {
		t.Skip("no AVX-512 or AVX2: the multiplies run on package blas")
	}
	r := rand.New(rand.NewPCG(3, 4))
	type shape struct {
		tA, tB  bool
		m, n, k int
	}
	var shapes []shape
	for _, m := range []int{8, 16, 12} {
		for _, n := range []int{1, 7, 17, 40, 49} {
			for _, k := range []int{1, 3, 9} {
				shapes = append(shapes, shape{false, false, m, n, k}, shape{true, false, m, n, k})
			}
		}
	}
	for _, m := range []int{4, 8, 6} {
		for _, n := range []int{1, 5, 6, 7, 13} {
			for _, k := range []int{1, 7, 16, 17, 33} {
				shapes = append(shapes, shape{false, true, m, n, k})
			}
		}
	}
	for _, s := range shapes {
		lda, ldb := s.k, s.n
		if s.tA {
			lda = s.m
		}
		if s.tB {
			ldb = s.k
		}
		a, b := randF32(r, s.m*s.k), randF32(r, s.k*s.n)
		for _, beta := range []float32{0, 1} {
			name := fmt.Sprintf("tA=%v tB=%v %dx%dx%d beta=%v", s.tA, s.tB, s.m, s.n, s.k, beta)
			c := randF32(r, s.m*s.n)
			want := append([]float32(nil), c...)
			var sc mmScratch
			mm(&sc, s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, b, ldb, beta, want, s.n)
			// Each operand alone at a page end, then all three.
			for _, at := range []string{"a", "b", "c", "abc"} {
				pa, pb, pc := a, b, append([]float32(nil), c...)
				if strings.Contains(at, "a") {
					pa = atPageEnd(t, a)
				}
				if strings.Contains(at, "b") {
					pb = atPageEnd(t, b)
				}
				if strings.Contains(at, "c") {
					pc = atPageEnd(t, c)
				}
				mm(&sc, s.tA, s.tB, s.m, s.n, s.k, 1, pa, lda, pb, ldb, beta, pc, s.n)
				sameF32(t, name+" "+at+" at a page end", pc, want)
			}
		}
	}
	// Several segments (the weight gradient's image chunks), the last rows
	// of a and b at a page end.
	for _, s := range []struct{ m, n, q, segs int }{{4, 6, 17, 2}, {8, 7, 5, 3}, {12, 13, 33, 2}} {
		astride, bstride := s.m*s.q, s.n*s.q
		a, b := randF32(r, s.segs*astride), randF32(r, s.segs*bstride)
		boff := make([]int32, s.n)
		for j := range boff {
			boff[j] = int32(j * s.q)
		}
		for _, acc := range []bool{false, true} {
			c := randF32(r, s.m*s.n)
			want := append([]float32(nil), c...)
			var sc mmScratch
			sgemmNTSegs(&sc, s.m, s.n, s.q, s.segs, a, s.q, astride, b, boff, bstride, want, s.n, acc)
			for _, at := range []string{"a", "b"} {
				pa, pb, pc := a, b, append([]float32(nil), c...)
				if at == "a" {
					pa = atPageEnd(t, a)
				} else {
					pb = atPageEnd(t, b)
				}
				sgemmNTSegs(&sc, s.m, s.n, s.q, s.segs, pa, s.q, astride, pb, boff, bstride, pc, s.n, acc)
				sameF32(t, fmt.Sprintf("sgemmNTSegs %+v acc=%v %s at a page end", s, acc, at), pc, want)
			}
		}
	}
}

// A convolution whose input, output or output gradient ends at a page end,
// the next page unmapped, gives the bits it gives on the heap: a 1x1
// convolution multiplies the input and output gradient in place (the
// partial vector of a 7x7 plane's last row read masked), the Winograd path
// writes a partial tile's outputs through VMASKMOVPS.
func TestAVX2ConvAtAPageEnd(t *testing.T) {
	if !mmKernels() {
		t.Skip("no AVX-512 or AVX2: the convolutions multiply on package blas")
	}
	pad := Conv2dOpts{Padding: [2]int{1, 1}}
	for _, tc := range []struct {
		c    convCase
		wino bool
	}{
		{convCase{n: 2, c: 8, h: 7, w: 7, oc: 8, kh: 1, kw: 1}, false},
		{convCase{n: 3, c: 16, h: 5, w: 5, oc: 24, kh: 1, kw: 1}, false},
		{convCase{n: 2, c: 16, h: 7, w: 7, oc: 16, kh: 3, kw: 3, o: pad}, true},
		{convCase{n: 1, c: 16, h: 14, w: 14, oc: 16, kh: 3, kw: 3, o: pad}, true},
		{convCase{n: 2, c: 8, h: 7, w: 7, oc: 8, kh: 3, kw: 3, o: pad}, false},
	} {
		c := tc.c
		t.Run(c.String(), func(t *testing.T) {
			op, gi, gw, in, dy := convOps(t, c, tensor.Float32)
			if winogradFits[float32](&op.g) != tc.wino {
				t.Fatalf("winogradFits is %v, want %v", !tc.wino, tc.wino)
			}
			onPage := func(v G.Value) *tensor.Dense {
				d := v.(*tensor.Dense)
				return tensor.New(tensor.WithShape(d.Shape().Clone()...), tensor.WithBacking(atPageEnd(t, d.Data().([]float32))))
			}
			outOnPage := func(shape tensor.Shape) *tensor.Dense {
				return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(pageEnd(t, shape.TotalSize())))
			}
			run := func(f func(...G.Value) (G.Value, error), v ...G.Value) []float32 {
				t.Helper()
				r, err := f(v...)
				if err != nil {
					t.Fatal(err)
				}
				return append([]float32(nil), r.Data().([]float32)...)
			}
			y, dx, dw := run(op.Do, in...), run(gi.Do, dy, in[1]), run(gw.Do, in[0], dy)
			px, pdy := onPage(in[0]), onPage(dy)
			into := func(b *buffer, shape tensor.Shape, f func(...G.Value) (G.Value, error), v ...G.Value) []float32 {
				t.Helper()
				p := outOnPage(shape)
				b.prealloc(p)
				defer b.release()
				r, err := f(v...)
				if err != nil {
					t.Fatal(err)
				}
				if r != G.Value(p) {
					t.Fatal("the op did not write into the tensor at a page end")
				}
				return p.Data().([]float32)
			}
			sameF32(t, "y", into(&op.out, op.g.yShape(), op.Do, px, in[1]), y)
			sameF32(t, "dx", into(&gi.out, op.g.xShape(), gi.Do, pdy, in[1]), dx)
			sameF32(t, "dw", run(gw.Do, px, pdy), dw)
		})
	}
}
