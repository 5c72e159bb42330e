package ops

import "unsafe"

// Implicit convolutions: a stride-1 convolution whose output is as large as
// its input (same(): 3x3 with padding 1, say) multiplies straight from a
// zero-padded copy of its input, with no column matrix. Lay each channel's
// image out on an Hp×Wp plane (the image in the middle, zeros around it):
// the output at grid position q = oy·Wp + ox reads, for kernel offset
// (ki, kj), the plane at q + ki·dh·Wp + kj·dw, so row (c, ki, kj) of the
// column matrix is the plane itself shifted by a fixed offset. The kernels
// of sgemm.go read B rows through a table of such offsets. The grid has Wp
// columns a row where the image has W (the extra ones are computed and
// dropped: 7% more work at 28x28, 14% at 14x14) and the copy in and out is
// about twice the image instead of KH·KW times it (im2col). A chunk of
// images sits side by side in each channel's row of planes, so that one
// multiply covers them all.

// implicitRows is whether a float32 multiply with rows rows on a same()
// geometry g can run implicit: this package's kernels are in use and take
// that many rows (a multiple of multiple), and the padded grid wastes no more
// than implicitWaste of the multiply.
func implicitRows[T float](g *convGeom, rows, multiple int) bool {
	var z T
	if !useAVX512 || unsafe.Sizeof(z) != 4 || !g.same() || g.x1() || rows%multiple != 0 {
		return false
	}
	nb := g.chunk()
	wp, p := g.padded()
	q := (nb-1)*p + g.h*wp
	return float64(nb*g.ohw()) >= (1-implicitWaste)*float64(q)
}

// implicitWaste is the largest share of a multiply's columns the padded grid
// may waste for the implicit path to be taken. resnet8's stages waste 7%
// (28x28), 18% (14x14, 2 images a chunk) and 38% (7x7, 8 images), and each
// still ran faster than through the column matrix, forward and backward:
// 7.0-7.6 against 8.7-10.3, 6.7-7.6 against 8.0-9.2 and 8.1-9.0 against
// 8.8-9.7 CPU ms (go test ./nn/ops -run '^$' -bench Conv3x3 -benchtime 60x,
// GOMAXPROCS=1, three runs, load 17-19).
var implicitWaste = 0.5

// padded is the grid of the implicit path: Wp, and the plane size Hp·Wp.
func (g *convGeom) padded() (wp, plane int) {
	wp = g.w + 2*g.pw
	return wp, (g.h + 2*g.ph) * wp
}

// padStride is how far apart the channels of a chunk's padded input lie: nb
// planes and (KW-1)·DW elements of zeros that the last grid columns read.
func (g *convGeom) padStride() int {
	_, p := g.padded()
	return g.chunk()*p + (g.kw-1)*g.dw
}

// implicitOffsets sets s.ioff to the offset of row (c, ki, kj) of the
// virtual column matrix in the padded input.
func implicitOffsets(g *convGeom, s *convScratch) []int32 {
	wp, _ := g.padded()
	stride := g.padStride()
	s.ioff = grow32(s.ioff, g.ckk())
	for c := 0; c < g.c; c++ {
		for ki := 0; ki < g.kh; ki++ {
			for kj := 0; kj < g.kw; kj++ {
				s.ioff[(c*g.kh+ki)*g.kw+kj] = int32(c*stride + ki*g.dh*wp + kj*g.dw)
			}
		}
	}
	return s.ioff
}

// padChunk writes images n0..n0+m of x into xp (channel c of image i on the
// plane at c·padStride + i·plane) with zeros around each image and in the
// tail each channel's last grid columns read.
func padChunk[T float](g *convGeom, x, xp []T, n0, m int) {
	wp, p := g.padded()
	stride, hw, in := g.padStride(), g.h*g.w, g.in()
	for c := 0; c < g.c; c++ {
		base := c * stride
		for i := 0; i < m; i++ {
			plane := xp[base+i*p : base+(i+1)*p]
			src := x[(n0+i)*in+c*hw : (n0+i)*in+(c+1)*hw]
			at := g.ph*wp + g.pw
			clear(plane[:at])
			for y := 0; y < g.h; y++ {
				copy(plane[at:at+g.w], src[y*g.w:(y+1)*g.w])
				next := at + wp
				clear(plane[at+g.w : min(next, p)])
				at = next
			}
			clear(plane[min(at-g.pw, p):])
		}
		clear(xp[base+m*p : base+m*p+(g.kw-1)*g.dw])
	}
}

// convForwardImplicit is convForward for images [lo, hi) on the implicit
// path: y = w ⊛ x, one multiply a chunk into the grid, then the grid's
// image columns into y.
func convForwardImplicit[T float](g *convGeom, x, w, y []T, s *convScratch, lo, hi int) {
	nb, ckk, ohw, out := g.chunk(), g.ckk(), g.ohw(), g.out()
	wp, p := g.padded()
	xp := scratch[float32](&s.cols, g.c*g.padStride())
	grid := scratch[float32](&s.tmp, g.oc*((nb-1)*p+g.h*wp))
	off := implicitOffsets(g, s)
	x32, y32 := f32s(x), f32s(y)
	for n0 := lo; n0 < hi; n0 += nb {
		m := min(nb, hi-n0)
		q := (m-1)*p + g.h*wp
		padChunk(g, x32, xp, n0, m)
		sgemmNN(&s.mm, false, g.oc, q, ckk, f32s(w), ckk, xp, off, grid, q, false)
		for i := 0; i < m; i++ {
			for o := 0; o < g.oc; o++ {
				dst := y32[(n0+i)*out+o*ohw : (n0+i)*out+(o+1)*ohw]
				src := grid[o*q+i*p:]
				for r := 0; r < g.h; r++ {
					copy(dst[r*g.w:(r+1)*g.w], src[r*wp:r*wp+g.w])
				}
			}
		}
	}
}

// convGradWeightImplicit is convGradWeightRange on the implicit path: dw =
// Σ over chunks of dy (laid on the grid, zero in the columns and rows
// outside the image) times the shifted planes of the padded input.
func convGradWeightImplicit[T float](g *convGeom, x, dy, dw []T, s *convScratch, lo, hi int) {
	nb, ckk, ohw, out := g.chunk(), g.ckk(), g.ohw(), g.out()
	wp, p := g.padded()
	xp := scratch[float32](&s.cols, g.c*g.padStride())
	grid := scratch[float32](&s.tmp, g.oc*((nb-1)*p+g.h*wp))
	off := implicitOffsets(g, s)
	x32, dy32, dw32 := f32s(x), f32s(dy), f32s(dw)
	acc := false
	for n0 := lo; n0 < hi; n0 += nb {
		m := min(nb, hi-n0)
		q := (m-1)*p + g.h*wp
		padChunk(g, x32, xp, n0, m)
		for o := 0; o < g.oc; o++ {
			row := grid[o*q : (o+1)*q]
			for i := 0; i < m; i++ {
				src := dy32[(n0+i)*out+o*ohw : (n0+i)*out+(o+1)*ohw]
				dst := row[i*p:]
				for r := 0; r < g.h; r++ {
					copy(dst[r*wp:r*wp+g.w], src[r*g.w:(r+1)*g.w])
					clear(dst[r*wp+g.w : (r+1)*wp])
				}
				if i < m-1 {
					clear(dst[g.h*wp : p])
				}
			}
		}
		sgemmNT(&s.mm, g.oc, ckk, q, grid, q, xp, off, dw32, ckk, acc)
		acc = true
	}
}
