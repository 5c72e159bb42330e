package ops

import "unsafe"

// The input gradient of a convolution that is not same() (strided ones
// above all: resnet8's 3x3 stride-2 stage entries) without col2im's
// scatter-add. Split dx into its SH·SW phases (rows
// ≡ py mod SH, columns ≡ px mod SW): input row iy = a·SH + py receives
// output row oy through tap ki exactly when oy·SH - PH + ki·DH = iy, that is
// for the taps ki with (py + PH - ki·DH) ≡ 0 (mod SH), from oy = a + dy(ki),
// dy(ki) = (py + PH - ki·DH)/SH. So each phase of dx is a dense stride-1
// correlation of dy with a subset of the taps, and it runs on the implicit
// kernels as the forward does: dy zero-padded, a chunk's images side by
// side in slots of Wp columns on one plane of Hp rows a channel (channels
// pstride apart), row (o, tap) of the virtual column matrix the plane
// shifted by a fixed offset, one multiply a phase and chunk into a grid, then the
// grid's image columns written (not added) into every SH-th row and SW-th
// column of dx. Every dx element is one dot product in a fixed order: the
// bits depend on the geometry only, never on the worker count.

// dxPhases is the plan of one phase-split input gradient, built from the
// geometry and weight of each call (build), read-only while the image
// workers run.
type dxPhases struct {
	top, left int // rows and columns of zeros above and left of dy in its slot
	hp, wp    int // rows of the plane, columns of an image's slot
	row       int // columns of the plane: a chunk's slots
	pstride   int // a channel's planes of a chunk and the tail the grids read
	ph        []dxPhase
	w         []float32 // every phase's weight, back to back
	boff      []int32   // every phase's row offsets, back to back
}

// dxPhase is one phase (py, px) of dx: ha×wa pixels, fed by k = OC·taps rows.
type dxPhase struct {
	py, px, ha, wa int
	k              int
	w              []float32 // [C, k], packed (packA): w[c, (o, t)] = weight[o, c, tap t]
	boff           []int32   // row (o, t) of dy's padded planes
}

// phaseTap is a kernel row (or column) index and the output shift it reads.
type phaseTap struct{ k, d int }

// phaseShift is whether tap i reaches phase p (stride s, dilation dl,
// padding pad) and the output shift d it reads from: p + pad - i·dl = d·s.
func phaseShift(p, i, s, dl, pad int) (d int, ok bool) {
	v := p + pad - i*dl
	return v / s, v%s == 0
}

// phaseTaps is, for each phase p < s, the kernel taps i < n (dilation dl,
// padding pad) that reach it and their shifts d: (p + pad - i·dl) = d·s.
func phaseTaps(dst [][]phaseTap, s, n, dl, pad int) [][]phaseTap {
	for len(dst) < s {
		dst = append(dst, nil)
	}
	dst = dst[:s]
	for p := range dst {
		taps := dst[p][:0]
		for i := 0; i < n; i++ {
			if d, ok := phaseShift(p, i, s, dl, pad); ok {
				taps = append(taps, phaseTap{i, d})
			}
		}
		dst[p] = taps
	}
	return dst
}

// usePhases is whether the input gradient of g runs phase-split: float32 on
// this package's kernels (AVX-512, or AVX2 with FMA, where the rows merge
// without the permutes), which take the input channels as rows (a multiple
// of 8), and a tap reaches every phase. Where none reaches some (a 1x1
// stride-2 shortcut: three quarters of dx are zero), col2im, which clears dx
// and adds only what the taps reach, moves less: 0.35 against 0.55 ms for
// resnet8's 28x28 shortcut when the phase split took it (one core, batch
// 64). On a Zen 3 (AVX2) the split took resnet8's 28x28 stride-2 input
// gradient from 7.2-7.8 CPU ms through col2im to 3.9-4.3, and the 14x14
// one from 4.7 to 4.0-4.1 (one core, batch 64, BenchmarkConvGradInputStrided).
func usePhases[T float](g *convGeom) bool {
	var z T
	return phaseSplit && mmKernels() && unsafe.Sizeof(z) == 4 && !g.x1() && g.c%8 == 0 && g.sw <= maxPhaseCols &&
		everyPhaseTapped(g.sh, g.kh, g.dh, g.ph) && everyPhaseTapped(g.sw, g.kw, g.dw, g.pw)
}

// everyPhaseTapped is whether each of the s phases has a tap (see phaseTaps).
func everyPhaseTapped(s, n, dl, pad int) bool {
	for p := 0; p < s; p++ {
		hit := false
		for i := 0; i < n && !hit; i++ {
			_, hit = phaseShift(p, i, s, dl, pad)
		}
		if !hit {
			return false
		}
	}
	return true
}

// phaseSplit turns the phase split on; a variable so that benchmarks can
// compare it with col2im.
var phaseSplit = true

// build fills p for geometry g and weight w (float32, [OC, C, KH, KW]), or
// reports false when dy's padded planes are too large for the kernels'
// 32-bit row offsets. It allocates only when a slice has to grow.
func (p *dxPhases) build(g *convGeom, w []float32, ty, tx *[][]phaseTap) bool {
	*ty = phaseTaps(*ty, g.sh, g.kh, g.dh, g.ph)
	*tx = phaseTaps(*tx, g.sw, g.kw, g.dw, g.pw)
	// The plane holds dy with zeros wherever a phase reads outside it.
	span := func(taps [][]phaseTap, s, in, out int) (lo, size int) {
		lo, hi := 0, out // rows [lo, hi) relative to dy's first
		for q, ts := range taps {
			n := phaseSize(in, q, s)
			for _, t := range ts {
				if n > 0 {
					lo, hi = min(lo, t.d), max(hi, n-1+t.d+1)
				}
			}
		}
		return -lo, hi - lo
	}
	p.top, p.hp = span(*ty, g.sh, g.h, g.oh)
	p.left, p.wp = span(*tx, g.sw, g.w, g.ow)
	p.row = g.chunk() * p.wp
	p.ph = p.ph[:0]
	tail, nw := 0, 0
	for py, tys := range *ty {
		for px, txs := range *tx {
			ph := dxPhase{py: py, px: px, ha: phaseSize(g.h, py, g.sh), wa: phaseSize(g.w, px, g.sw)}
			ph.k = g.oc * len(tys) * len(txs)
			if ph.ha == 0 || ph.wa == 0 {
				ph.k = 0
			}
			p.ph = append(p.ph, ph)
			nw += ph.k
			if ph.k > 0 {
				off := 0
				for _, t := range tys {
					for _, u := range txs {
						off = max(off, (p.top+t.d)*p.row+p.left+u.d)
					}
				}
				tail = max(tail, (ph.ha-p.hp)*p.row+off)
			}
		}
	}
	// The last slot's rows end left columns into the row below (its zeros
	// left of the first slot): in the tail when no row lies below.
	p.pstride = p.hp*p.row + max(tail, p.left)
	if int64(g.oc)*int64(p.pstride) >= 1<<31 {
		return false
	}
	if cap(p.w) < nw*g.c {
		p.w = make([]float32, nw*g.c)
	}
	if cap(p.boff) < nw {
		p.boff = make([]int32, nw)
	}
	w0, b0 := p.w[:nw*g.c], p.boff[:nw]
	khw := g.kh * g.kw
	for i := range p.ph {
		ph := &p.ph[i]
		tys, txs := (*ty)[ph.py], (*tx)[ph.px]
		ph.w, ph.boff = w0[:ph.k*g.c], b0[:ph.k]
		w0, b0 = w0[ph.k*g.c:], b0[ph.k:]
		if ph.k == 0 {
			continue
		}
		r := 0
		for o := 0; o < g.oc; o++ {
			for _, t := range tys {
				for _, u := range txs {
					ph.boff[r] = int32(o*p.pstride + (p.top+t.d)*p.row + p.left + u.d)
					tap := t.k*g.kw + u.k
					for c := 0; c < g.c; c++ { // packed as packA does
						ph.w[c/8*8*ph.k+r*8+c%8] = w[(o*g.c+c)*khw+tap]
					}
					r++
				}
			}
		}
	}
	return true
}

// phaseSize is how many of n positions are ≡ p (mod s).
func phaseSize(n, p, s int) int { return max(0, (n-p+s-1)/s) }

// grid is the columns of a phase's multiply: its rows of every slot.
func (p *dxPhases) grid(ph *dxPhase) int { return ph.ha * p.row }

// padDy writes images n0..n0+m of dy (float32 [N, OC, OH, OW]) onto the
// planes of yp: channel o's at o·pstride, image i's rows in slot i at
// (top, left), zeros around them, in the slots past m and in the tail.
func (p *dxPhases) padDy(g *convGeom, dy, yp []float32, n0, m int) {
	ohw, out := g.ohw(), g.out()
	at := p.top*p.row + p.left
	for o := 0; o < g.oc; o++ {
		plane := yp[o*p.pstride : (o+1)*p.pstride]
		clear(plane[:at])
		for i := 0; i < m; i++ {
			// Each row followed by zeros up to the next slot's first pixel.
			src := dy[(n0+i)*out+o*ohw : (n0+i)*out+(o+1)*ohw]
			copyRows(plane[at+i*p.wp:], p.row, src, g.ow, g.ow, p.wp-g.ow, g.oh)
		}
		// Only grid columns that are dropped read the slots past m: zeros
		// there keep stale values (NaN, denormals) out of the multiply.
		for i := m; i < g.chunk(); i++ {
			for r := 0; r < g.oh; r++ {
				clear(plane[at+r*p.row+i*p.wp : at+r*p.row+(i+1)*p.wp])
			}
		}
		clear(plane[(p.top+g.oh)*p.row:])
	}
}

// convGradInputPhases sets dx for images [lo, hi) (whole chunks) phase by
// phase (see the top of this file): for each row phase, the multiplies of
// its SW column phases into grids side by side, then every dx row of that
// phase written once, its columns interleaved from those grids.
func convGradInputPhases(g *convGeom, p *dxPhases, dy, dx []float32, s *convScratch, lo, hi int) {
	nb, in, hw := g.chunk(), g.in(), g.h*g.w
	yp := scratch[float32](&s.cols, g.oc*p.pstride)
	gsz := g.c * p.grid(&dxPhase{ha: p.hp}) // one column phase's grid
	grids := scratch[float32](&s.tmp, g.sw*gsz)
	var src [maxPhaseCols][]float32
	var merge permPlan // SW = 2: a row's column phases merged by one permutation
	for n0 := lo; n0 < hi; n0 += nb {
		m := min(nb, hi-n0)
		p.padDy(g, dy, yp, n0, m)
		for py := 0; py < g.sh; py++ {
			row := p.ph[py*g.sw : (py+1)*g.sw]
			ha := row[0].ha
			if ha == 0 {
				continue
			}
			q := p.grid(&row[0])
			mp := &merge
			if g.sw != 2 || !useAVX512 || !mergePlan(mp, g.w, row[0].k > 0 && row[0].wa > 0, row[1].k > 0 && row[1].wa > 0) {
				mp = nil
			}
			for px := range row {
				ph := &row[px]
				if ph.k == 0 || ph.wa == 0 {
					continue // no tap reaches it: zeros
				}
				sgemmNNPacked(g.c, q, ph.k, ph.w, yp, ph.boff, grids[px*gsz:], q, false)
			}
			for j := 0; j < m; j++ {
				for c := 0; c < g.c; c++ {
					plane := dx[(n0+j)*in+c*hw : (n0+j)*in+(c+1)*hw]
					for px := range row {
						src[px] = nil
						if row[px].k > 0 && row[px].wa > 0 {
							src[px] = grids[px*gsz+c*q+j*p.wp:]
						}
					}
					writePhaseRows(plane, g.w, g.sh, py, ha, src[:g.sw], p.row, mp)
				}
			}
		}
	}
}

// maxPhaseCols is the most column phases (the width stride) the phase
// split takes; wider strides go through col2im.
const maxPhaseCols = 8

// writePhaseRows writes rows py, py+SH, ... (ha of them) of one dx plane (w
// a row): column b·SW + px from src[px][a·ld + b], or 0 where src[px] is nil.
// merge, when not nil, is mergePlan's permutation for SW = 2 and these
// sources: one permutation a row.
func writePhaseRows(plane []float32, w, sh, py, ha int, src [][]float32, ld int, merge *permPlan) {
	sw := len(src)
	if merge != nil {
		a, b := src[0], src[1]
		if a == nil {
			a = plane
		}
		if b == nil {
			b = plane
		}
		permRows(plane[py*w:], sh*w, a, b, ld, ha, merge)
		return
	}
	for a := 0; a < ha; a++ {
		row := plane[(a*sh+py)*w : (a*sh+py+1)*w]
		if sw == 2 {
			interleave2(row, src[0], src[1], a*ld)
			continue
		}
		for px, sp := range src {
			n := phaseSize(w, px, sw)
			if sp == nil {
				for b := 0; b < n; b++ {
					row[b*sw+px] = 0
				}
				continue
			}
			for b, v := range sp[a*ld : a*ld+n] {
				row[b*sw+px] = v
			}
		}
	}
}

// interleave2 sets row[2b] = e[at+b] and row[2b+1] = o[at+b], a zero for a
// nil e or o.
func interleave2(row, e, o []float32, at int) {
	n := len(row) / 2
	switch {
	case e != nil && o != nil:
		e, o = e[at:at+(len(row)+1)/2], o[at:at+n]
		if useAVX2 && n >= 4 {
			interleave2AVX2(unsafe.SliceData(row), unsafe.SliceData(e), unsafe.SliceData(o), n)
		} else {
			for b, v := range o {
				row[2*b] = e[b]
				row[2*b+1] = v
			}
		}
		if len(row)%2 == 1 {
			row[len(row)-1] = e[n]
		}
	case e != nil:
		e = e[at : at+(len(row)+1)/2]
		for b := 0; b < n; b++ {
			row[2*b] = e[b]
			row[2*b+1] = 0
		}
		if len(row)%2 == 1 {
			row[len(row)-1] = e[n]
		}
	case o != nil:
		o = o[at : at+n]
		for b, v := range o {
			row[2*b] = 0
			row[2*b+1] = v
		}
		if len(row)%2 == 1 {
			row[len(row)-1] = 0
		}
	default:
		clear(row)
	}
}
