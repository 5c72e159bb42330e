package ops

import (
	"fmt"
	"unsafe"
)

// Implicit convolutions: a convolution larger than 1x1 (3x3 with padding 1,
// say) multiplies straight from a zero-padded copy of its input, with no
// column matrix. Lay each channel's
// image out on an Hp×Wp plane (the image in the middle, zeros around it):
// the output at grid position q = oy·Wp + ox reads, for kernel offset
// (ki, kj), the plane at q + ki·dh·Wp + kj·dw, so row (c, ki, kj) of the
// column matrix is the plane itself shifted by a fixed offset. The kernels
// of sgemm.go read B rows through a table of such offsets. The grid has Wp
// columns a row where the image has W (the extra ones are computed and
// dropped: 7% more work at 28x28, 14% at 14x14) and the copy in and out is
// about twice the image instead of KH·KW times it (im2col). A chunk of
// images sits side by side on each channel's plane, each row holding a row
// of every image (phases), so that one multiply covers them all.

// Strided convolutions split the padded input into SH·SW phase planes
// (rows ≡ a mod SH, columns ≡ b mod SW), each Hq×Wq: tap (ki, kj) of output
// (oy, ox) then reads phase ((ki·dh) mod SH, (kj·dw) mod SW) at row
// oy + ⌊ki·dh/SH⌋, column ox + ⌊kj·dw/SW⌋, again a fixed shift of the grid
// position q = oy·Wq + ox.

// implicitRows is whether a float32 multiply with rows rows on geometry g
// can run implicit: this package's kernels are in use and take that many
// rows (a multiple of multiple), the kernel is larger than 1x1, and the grid
// wastes no more than implicitWaste of the multiply.
func implicitRows[T float](g *convGeom, rows, multiple int) bool {
	var z T
	if !mmKernels() || unsafe.Sizeof(z) != 4 || g.kh*g.kw == 1 || rows%multiple != 0 {
		return false
	}
	if g.sh*g.sw > 1 && g.ohw() < implicitStridedOut {
		return false
	}
	return float64(g.chunk()*g.ohw()) >= (1-implicitWaste)*float64(g.gridCols())
}

// implicitWaste is the largest share of a multiply's columns the grid may
// waste for the implicit path to be taken. resnet8's same-padded stages
// wasted 7% (28x28), 18% (14x14, 2 images a chunk) and 38% (7x7, 8 images)
// before they shared their padding (see phases), and each still ran faster than through the column matrix, forward and
// backward: 7.0-7.6 against 8.7-10.3, 6.7-7.6 against 8.0-9.2 and 8.1-9.0
// against 8.8-9.7 CPU ms (go test ./nn/ops -run '^$' -bench Conv3x3
// -benchtime 60x, GOMAXPROCS=1, three runs, load 17-19).
var implicitWaste = 0.5

// implicitStridedOut is the least output plane (pixels) a strided
// convolution takes the implicit path at: splitting small images into phase
// planes costs more than the column matrix. With the weight gradient reading
// the forward's padding (keptPad) and the phase split copying rows without
// a division per row, resnet8's 28x28 -> 14x14 convolution runs at 7.9-8.2
// CPU ms implicit against 9.5-10.1 through the column matrix, forward and
// backward, and its 14x14 -> 7x7 one at 6.5-6.9 against 7.0-7.1 (go test
// ./nn/ops -run '^$' -bench Conv3x3Down -benchtime 30x, GOMAXPROCS=1, three
// runs, load 5-8; before, 5.6-6.4 against 4.8-5.2 for the second at load
// 14-18).
var implicitStridedOut = 49

// phases is the layout of the implicit path: each channel's padded input
// is SH·SW phase planes pstride apart (the plane, pq elements, and the tail
// the last grid columns read past it), each Hq rows of wq columns. A row
// holds a chunk's images side by side, each in a slot of its own columns
// (slot), so that a multiply's grid is OH rows of every slot and wastes
// only a slot's columns right of the output (gridCols).
//
// A same() convolution shares its padding: a slot is the pw zeros left of
// the image's row then the row (W+pw columns), the zeros left of the next
// slot's row being the zeros right of this one's (and the first slot's
// those right of the last slot of the row before); ph zero rows lie above
// the images, and the rows below are the tail (Hq = H+ph). A tap reads at
// most pw columns left or right of an image and ph rows above or below, so
// every read outside the image finds a zero, and the grid wastes only the
// pw columns a slot: 12.5% at 7x7 (38% with a padded plane an image, 22%
// with such planes stacked sharing rows), 6.7% at 14x14 (18%, 10%), 3.5%
// at 28x28 (7%, 3.5%). Other convolutions pad each image in full:
// Hq = ⌈(H+2ph)/SH⌉ rows, slots of ⌈(W+2pw)/SW⌉ columns.
func (g *convGeom) phases() (hq, pq, wq, pstride int) {
	if g.same() {
		hq = g.h + g.ph
	} else {
		hq = (g.h + 2*g.ph + g.sh - 1) / g.sh
	}
	wq = g.chunk() * g.slot()
	pq = hq * wq
	return hq, pq, wq, pq + g.tail()
}

// slot is the columns of one image's rows on a phase plane (see phases).
func (g *convGeom) slot() int {
	if g.same() {
		return g.w + g.pw
	}
	return (g.w + 2*g.pw + g.sw - 1) / g.sw
}

// tail is how far past its plane the grid reads a phase: the columns right
// of the last row, and for a same() convolution the rows below the images.
// (At stride 1, padding a row writes pw zeros past the last slot: the tail
// holds them where it is shorter.)
func (g *convGeom) tail() int {
	if g.same() {
		return g.ph*g.chunk()*g.slot() + (g.kw-1)*g.dw
	}
	return max((g.kw-1)*g.dw/g.sw, g.pw)
}

// gridCols is the columns of a chunk's multiply: every slot of every
// output row. Channel o's output row r of image i is at column
// (o·OH + r)·wq + imageAt(i) of the multiply's output.
func (g *convGeom) gridCols() int {
	_, _, wq, _ := g.phases()
	return g.oh * wq
}

// imageAt is the grid column of image i's first output pixel in its chunk.
func (g *convGeom) imageAt(i int) int { return i * g.slot() }

// padSize is the padded input of a chunk: every channel's phases.
func (g *convGeom) padSize() int {
	_, _, _, ps := g.phases()
	return g.c * g.sh * g.sw * ps
}

// implicitOffsets sets s.ioff to the offset of row (c, ki, kj) of the
// virtual column matrix in the padded input.
func implicitOffsets(g *convGeom, s *convScratch) []int32 {
	_, _, wq, ps := g.phases()
	if k := (ioffKey{g, wq, ps}); s.ioffOf != k || len(s.ioff) != g.ckk() {
		s.ioff, s.ioffOf = grow32(s.ioff, g.ckk()), k
	} else {
		return s.ioff // computed by an earlier chunk
	}
	for c := 0; c < g.c; c++ {
		for ki := 0; ki < g.kh; ki++ {
			for kj := 0; kj < g.kw; kj++ {
				y, x := ki*g.dh, kj*g.dw
				ph := (c*g.sh+y%g.sh)*g.sw + x%g.sw
				s.ioff[(c*g.kh+ki)*g.kw+kj] = int32(ph*ps + y/g.sh*wq + x/g.sw)
			}
		}
	}
	return s.ioff
}

// padChunk writes images n0..n0+m of x into xp: channel c of image i, padded,
// on its phase planes, zeros around the images, in the slots past m and in
// each phase's tail.
func padChunk(g *convGeom, x, xp []float32, n0, m int) {
	_, _, wq, ps := g.phases()
	hw, in, np, slot := g.h*g.w, g.in(), g.sh*g.sw, g.slot()
	var plans [2]permPlan
	if np > 1 && g.sw == 2 && useAVX512 && splitPlan(&plans[0], g.w, slot, 2, g.pw, 0) && splitPlan(&plans[1], g.w, slot, 2, g.pw, 1) {
		padPermuted(g, x, xp, n0, m, &plans)
		return
	}
	for c := 0; c < g.c; c++ {
		if np == 1 {
			padSlots(g, x, xp[c*ps:(c+1)*ps], c, n0, m)
			continue
		}
		for ph := 0; ph < np; ph++ {
			clearAround(g, xp[(c*np+ph)*ps:(c*np+ph+1)*ps], ph/g.sw, ph%g.sw, m)
		}
		for i := 0; i < m; i++ {
			src := x[(n0+i)*in+c*hw : (n0+i)*in+(c+1)*hw]
			if g.sw == 2 {
				padRows2(g, src, xp[c*np*ps+i*slot:], ps, wq)
				continue
			}
			for b := 0; b < g.sw; b++ {
				// Padded columns X ≡ b (mod SW) from the first inside
				// the image: X = b + t·SW lands at column t. Padded row
				// Y = y + ph is row ry of row phase py.
				t := (max(g.pw-b, 0) + g.sw - 1) / g.sw
				x0 := b + t*g.sw - g.pw
				if x0 >= g.w {
					continue
				}
				n := (g.w - x0 + g.sw - 1) / g.sw
				ry, py := g.ph/g.sh, g.ph%g.sh
				for y := 0; y < g.h; y++ {
					at := ((c*g.sh+py)*g.sw+b)*ps + i*slot + ry*wq + t
					everyNth(xp[at:at+n], src[y*g.w+x0:(y+1)*g.w], g.sw)
					if py++; py == g.sh {
						py, ry = 0, ry+1
					}
				}
			}
		}
	}
}

// padPermuted is padChunk at width stride 2 for rows and slots of at most
// 32 columns: each phase plane's image rows written slot by slot, zeros
// included, by one permutation a row (plans[px] for column phase px), then
// the rows above and below them, the slots past m and the tail cleared.
func padPermuted(g *convGeom, x, xp []float32, n0, m int, plans *[2]permPlan) {
	_, _, wq, ps := g.phases()
	hw, in, slot, nb := g.h*g.w, g.in(), g.slot(), g.chunk()
	for c := 0; c < g.c; c++ {
		for py := 0; py < g.sh; py++ {
			y0 := ((py-g.ph)%g.sh + g.sh) % g.sh // first image row landing here
			rows := 0
			if y0 < g.h {
				rows = (g.h - y0 + g.sh - 1) / g.sh
			}
			r0 := (y0 + g.ph) / g.sh
			for px := 0; px < 2; px++ {
				plane := xp[((c*g.sh+py)*2+px)*ps : ((c*g.sh+py)*2+px+1)*ps]
				if rows == 0 {
					clear(plane)
					continue
				}
				clear(plane[:r0*wq])
				for i := 0; i < m; i++ {
					src := x[(n0+i)*in+c*hw+y0*g.w : (n0+i)*in+(c+1)*hw]
					hi := src
					if g.w > 16 {
						hi = src[16:]
					}
					permRows(plane[r0*wq+i*slot:], wq, src, hi, g.sh*g.w, rows, &plans[px])
				}
				for r := r0; r < r0+rows; r++ {
					clear(plane[r*wq+m*slot : r*wq+nb*slot])
				}
				clear(plane[(r0+rows)*wq:])
			}
		}
	}
}

// clearAround zeroes phase plane (py, px) of a strided padded input's
// channel, tail included, wherever images 0..m do not land: the runs
// between their rows of pixels in memory order, which padChunk writes next.
func clearAround(g *convGeom, plane []float32, py, px, m int) {
	_, _, wq, _ := g.phases()
	slot := g.slot()
	t := (max(g.pw-px, 0) + g.sw - 1) / g.sw // first column with a pixel
	n := 0
	if x0 := px + t*g.sw - g.pw; x0 < g.w {
		n = (g.w - x0 + g.sw - 1) / g.sw
	}
	y0 := ((py-g.ph)%g.sh + g.sh) % g.sh // first image row landing here
	rows := 0
	if y0 < g.h {
		rows = (g.h - y0 + g.sh - 1) / g.sh
	}
	if n == 0 || rows == 0 {
		clear(plane)
		return
	}
	r0, end := (y0+g.ph)/g.sh, 0
	for r := r0; r < r0+rows; r++ {
		for i := 0; i < m; i++ {
			at := r*wq + i*slot + t
			clear(plane[end:at])
			end = at + n
		}
	}
	clear(plane[end:])
}

// padSlots is padChunk's channel c at stride 1: images n0..n0+m side by
// side on plane (see phases), zeros in the padding, in the slots of images
// past m, in the rows below and in the tail.
func padSlots(g *convGeom, x, plane []float32, c, n0, m int) {
	_, _, wq, _ := g.phases()
	slot, hw, in := g.slot(), g.h*g.w, g.in()
	at := g.ph*wq + g.pw
	clear(plane[:at])
	for i := 0; i < m; i++ {
		// Each row followed by zeros up to the next slot's first pixel.
		copyRows(plane[at+i*slot:], wq, x[(n0+i)*in+c*hw:(n0+i)*in+(c+1)*hw], g.w, g.w, slot-g.w, g.h)
	}
	for i, nb := m, g.chunk(); i < nb; i++ {
		for r := 0; r < g.h; r++ {
			clear(plane[at+r*wq+i*slot : at+r*wq+(i+1)*slot])
		}
	}
	clear(plane[(g.ph+g.h)*wq:])
}

// convForwardImplicit is convForward for images [lo, hi) on the implicit
// path: y = w ⊛ x (w packed in ap), one multiply a chunk into the grid,
// then the grid's image columns into y. Each chunk is padded into keep
// (chunk by chunk, padSize apart) when that is not nil, else into scratch.
func convForwardImplicit[T float](g *convGeom, x []T, ap []float32, y []T, keep []float32, s *convScratch, lo, hi int) {
	nb, ckk, out, ps := g.chunk(), g.ckk(), g.out(), g.padSize()
	_, _, wq, _ := g.phases()
	var xp []float32
	if keep == nil {
		xp = scratch[float32](&s.cols, ps)
	}
	q := g.gridCols()
	grid := scratch[float32](&s.tmp, g.oc*q)
	off := implicitOffsets(g, s)
	x32, y32 := f32s(x), f32s(y)
	for n0 := lo; n0 < hi; n0 += nb {
		m := min(nb, hi-n0)
		if keep != nil {
			xp = keep[n0/nb*ps : (n0/nb+1)*ps]
		}
		padChunk(g, x32, xp, n0, m)
		sgemmNNPacked(g.oc, q, ckk, ap, xp, off, grid, q, false)
		for i := 0; i < m; i++ {
			// Channel o's row r is grid row o·OH + r and y row o·OH + r
			// of the image (gridCols): one move for all channels.
			copyRows(y32[(n0+i)*out:(n0+i+1)*out], g.ow, grid[g.imageAt(i):], wq, g.ow, 0, g.oc*g.oh)
		}
	}
}

// convGradWeightImplicit is convGradWeightRange on the implicit path: dw =
// Σ over chunks of dy (laid on the grid, zero in the columns and slots
// outside the images) times the shifted planes of the padded input: kept
// from the forward (kept, chunk by chunk, padSize apart) or padded again.
// One multiply takes dwSegs(g) chunks, summed in the kernel's registers.
func convGradWeightImplicit[T float](g *convGeom, x, dy, dw []T, kept []float32, s *convScratch, lo, hi int) {
	nb, ckk, out, ps, slot := g.chunk(), g.ckk(), g.out(), g.padSize(), g.slot()
	_, _, wq, _ := g.phases()
	segs := dwSegs(g)
	var xp []float32
	if kept == nil {
		xp = scratch[float32](&s.cols, segs*ps)
	}
	q := g.gridCols()
	gs := g.oc * q // one chunk's grid
	grid := scratch[float32](&s.tmp, segs*gs)
	off := implicitOffsets(g, s)
	x32, dy32, dw32 := f32s(x), f32s(dy), f32s(dw)
	acc := false
	for n0 := lo; n0 < hi; n0 += segs * nb {
		k := min(segs, (hi-n0+nb-1)/nb) // chunks in this multiply
		b := xp
		if kept != nil {
			b = kept[n0/nb*ps : (n0/nb+k)*ps]
		}
		for c := 0; c < k; c++ {
			c0 := n0 + c*nb
			m := min(nb, hi-c0)
			if kept == nil {
				padChunk(g, x32, xp[c*ps:(c+1)*ps], c0, m)
			}
			// Each image in its slot, zeros in the slot's columns right
			// of the output and in the slots past m: one move an image
			// for all channels (grid row o·OH + r is channel o's row r).
			cg := grid[c*gs : (c+1)*gs]
			for i := 0; i < m; i++ {
				copyRows(cg[i*slot:], wq, dy32[(c0+i)*out:(c0+i+1)*out], g.ow, g.ow, slot-g.ow, g.oc*g.oh)
			}
			for i := m; i < nb; i++ {
				for r := 0; r < g.oc*g.oh; r++ {
					clear(cg[r*wq+i*slot : r*wq+(i+1)*slot])
				}
			}
		}
		sgemmNTSegs(&s.mm, g.oc, ckk, q, k, grid, q, gs, b, off, ps, dw32, ckk, acc)
		acc = true
	}
}

// dwSegs is how many chunks one weight-gradient multiply sums in its
// registers (sgemmNTSegs): enough for about dwSegCols grid columns, so that
// short chunks (resnet8's 420 to 448 columns) pay the kernel's final sums
// and c's update once for two, while long ones (812 at 28x28) keep their
// grids small. Fixed by the geometry: the bits depend on the image ranges
// only, as before.
func dwSegs(g *convGeom) int { return max(1, min(maxDwSegs, dwSegCols/g.gridCols())) }

// dwSegCols is the grid columns one weight-gradient multiply aims at,
// maxDwSegs the most chunks it takes.
const (
	dwSegCols = 1000
	maxDwSegs = 4
)

// padRows2 is padChunk's row moves for one image channel src at SW = 2:
// both column phases of a row in one pass. Padded column X = x + PW of
// column phase b = X mod 2 lands at column X/2; the phase of x = 0 takes
// the even pixels, the other the odd. ph0 is the channel's first phase
// plane of this image; phases lie ps apart, rows wq.
func padRows2(g *convGeom, src, ph0 []float32, ps, wq int) {
	be, bo := g.pw%2, (g.pw+1)%2 // phases of x = 0 and x = 1
	te, to := g.pw/2, (g.pw+1)/2 // their columns
	ne, no := (g.w+1)/2, g.w/2
	ry, py := g.ph/g.sh, g.ph%g.sh
	for y := 0; y < g.h; y++ {
		row := (py*2)*ps + ry*wq
		e := ph0[row+be*ps+te : row+be*ps+te+ne]
		o := ph0[row+bo*ps+to : row+bo*ps+to+no]
		deinterleave2(e, o, src[y*g.w:(y+1)*g.w])
		if py++; py == g.sh {
			py, ry = 0, ry+1
		}
	}
}

// deinterleave2 sets e[j] = src[2j] and o[j] = src[2j+1].
func deinterleave2(e, o, src []float32) {
	o = o[:len(src)/2]
	e = e[:(len(src)+1)/2]
	if useAVX2 && len(o) >= 4 {
		deinterleave2AVX2(unsafe.SliceData(e), unsafe.SliceData(o), unsafe.SliceData(src), len(o))
	} else {
		for j := range o {
			p := src[2*j : 2*j+2 : 2*j+2]
			e[j], o[j] = p[0], p[1]
		}
	}
	if len(src)%2 == 1 {
		e[len(e)-1] = src[len(src)-1]
	}
}

// everyNth sets dst[j] = src[j·n].
func everyNth(dst, src []float32, n int) {
	if len(dst) == 0 {
		return
	}
	src = src[:(len(dst)-1)*n+1]
	if n == 2 {
		for j := range dst {
			dst[j] = src[2*j]
		}
		return
	}
	for j := range dst {
		dst[j] = src[j*n]
	}
}

// copyRows copies rows rows of w elements from src (rows lds apart) into
// dst (rows ldd apart), zeroing the gap elements after each row in dst: the
// row moves of the implicit path, whose rows (7 to 28 elements at resnet8's
// shapes) are too short for copy's call and clear's to pay.
func copyRows(dst []float32, ldd int, src []float32, lds, w, gap, rows int) {
	if rows <= 0 || w+gap == 0 {
		return
	}
	if w < 0 || gap < 0 || (rows-1)*ldd+w+gap > len(dst) || (rows-1)*lds+w > len(src) {
		panic(fmt.Sprintf("ops: copyRows of %d rows of %d (+%d zeros), %d and %d apart, outside dst (%d) or src (%d)",
			rows, w, gap, ldd, lds, len(dst), len(src)))
	}
	if useAVX512 {
		copyRows32(unsafe.SliceData(dst), ldd, unsafe.SliceData(src), lds, w, gap, rows)
		return
	}
	if useAVX2 {
		copyRowsAVX2(unsafe.SliceData(dst), ldd, unsafe.SliceData(src), lds, w, gap, rows)
		return
	}
	for r := 0; r < rows; r++ {
		d := dst[r*ldd : r*ldd+w+gap]
		copy(d, src[r*lds:r*lds+w])
		clear(d[w:])
	}
}
