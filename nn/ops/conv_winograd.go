package ops

import (
	"slices"
	"unsafe"
)

// Winograd convolutions: a float32 3x3 convolution of stride 1 and padding
// 1 (resnet's) computed as Lavin and Gray's F(4x4, 3x3). The output is cut
// into 4x4 tiles; tile (ty, tx) reads the 6x6 input patch at rows
// 4ty-1 .. 4ty+4, columns 4tx-1 .. 4tx+4 (zeros outside the image), and
//
//	Y = Aᵀ [ Σ_c (G g_oc,c Gᵀ) ⊙ (Bᵀ d_c B) ] A
//
// so the 36 products of the transform domain are 36 independent multiplies
// U[ξ] (OC×C) · V[ξ] (C×tiles), run on the implicit path's kernel
// (sgemmNNPacked): 36·OC·C multiply-adds a tile where the direct
// convolution does 144·OC·C, at the cost of the transforms of the input
// (Bᵀ d B, a tile and channel; read from a zero-padded copy) and of the
// output (Aᵀ m A, a tile and output channel), 16 tiles at a time in
// AVX-512 (conv_winograd_amd64.s) or 8 in AVX2 and FMA
// (conv_winograd_avx2_amd64.s, the same bits), and of the kernel (G g Gᵀ,
// once a call, 16 channel pairs at a time in AVX-512,
// conv_winograd_kernel_amd64.s, 8 in AVX2,
// conv_winograd_kernel_avx2_amd64.s, else in Go, the same bits). On AVX2 the
// products run on that tier's multiply kernels, as the direct paths'. The input gradient of such a convolution
// is one too (convGradInput's transposed geometry, the kernel flipped as
// its transform reads it), so it takes
// the same path. So does the weight gradient, by the chain rule through
// the same identity:
//
//	dg_oc,c = Gᵀ [ Σ_tiles (A dy_o Aᵀ) ⊙ (Bᵀ d_c B) ] G
//
// 36 products dU[ξ] (OC×C) = dM[ξ] (OC×tiles) · V[ξ]ᵀ summed over the
// tiles of every image (sgemmNTSegs): 36·OC·C multiply-adds a tile where
// the implicit path does 144·OC·C (measured: a fifth of its time), the
// input's transform V computed again from the padding the forward kept
// (its own, so that the forward pads once), the output gradient's dM
// (A dy Aᵀ, a tile and output channel) 16 tiles at a time in AVX-512, and
// Gᵀ dU G once a call (of the parts' dU summed, when image workers split
// the call: convDwJob; small images split by channels instead,
// conv_winograd_dw.go), in float64, 16 channel pairs at a time in AVX-512
// or in AVX2 (four a register), the same bits.
//
// Rounding: the transforms add and scale by at most 8 (Aᵀ) and 5 (Bᵀ), and
// G by fractions down to 1/24, so a float32 result differs from the exact
// one by a few 1e-6 of Σ|w||x| (the direct path by about 1e-7); see
// TestConv2dWinogradMatchesReference. The weight gradient, at resnet8's
// batch of 64 (3136 tiles summed at 28x28), by 0.7-2.2e-7 of Σ|dy||x|
// (the implicit path by 0.4-1.9e-8), or 0.9-1.5e-6 of its norm (the
// implicit path 1.5e-7); see TestConv2dWinogradWeightGradMatchesReference.

// winogradOn switches the path off for tests and benchmarks comparing it
// with the implicit path.
var winogradOn = true

// winogradMinChannels is the least input and output channel count taking
// the Winograd path: below it the transforms, whose cost grows with the
// channels where the multiplies' grows with their product, outweigh the
// multiplies saved. At batch 64, CPU ms, Winograd against implicit, three
// rounds each at GOMAXPROCS 1 and 2, load 11-15 on 2 cores (go test
// ./nn/ops -run '^$' -bench ConvWinograd -benchtime 50x): 28x28x16
// forward 2.49-2.89 against 2.81-3.10, input gradient 2.46-2.61 against
// 2.76-2.94; 14x14x32 and 7x7x64 are further ahead (1.7 and 1.4 against
// 2.8 and 2.6, forward, GOMAXPROCS=1). 16 channels are resnet8's least
// but its stem's one.
var winogradMinChannels = 16

// winogradMaxWaste is the most output the tiles may compute for each
// output pixel: resnet8's 28x28 waste nothing, its 14x14 and 7x7 compute
// 16x16 and 8x8 (1.31), where Winograd was measured faster; a 5x5 image's
// tiles would compute 2.6 times its output, unmeasured.
var winogradMaxWaste = 1.35

// winogradFits is whether the convolution g of element type T runs on the
// Winograd path (y = w ⊛ x, as convForward).
func winogradFits[T float](g *convGeom) bool {
	var z T
	return winogradOn && (useAVX512 || useAVX2) && unsafe.Sizeof(z) == 4 &&
		g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 &&
		g.ph == 1 && g.pw == 1 && g.same() && g.oc%8 == 0 &&
		min(g.c, g.oc) >= winogradMinChannels &&
		float64(16*((g.oh+3)/4)*((g.ow+3)/4)) <= winogradMaxWaste*float64(g.ohw())
}

// winogradChunk is chunk()'s images for a convolution on the Winograd
// path, nb those it would take otherwise: the fewest images whose tiles,
// at most winogradChunkTiles, fill the products' 32-column blocks but for
// a seventeenth (the transforms take 16 tiles), else nb. At 28x28 an
// image's 49 tiles filled 64 columns, 5 images' 245 fill 256: CPU ms,
// batch 64, the forward 1.78 against 2.28-2.69 and the input gradient
// 1.77-1.79 against 2.15-2.25 in one run (4 images: 1.80-2.03, 8:
// 1.77-1.90, 16: 1.85-2.04), 1.94-2.28 against 2.15-2.34 and 1.97-2.05
// against 2.17-2.18 alternating with the previous binary (go test
// ./nn/ops -run '^$' -bench 'ConvWinograd/stage1/(forward|dx)/winograd'
// -benchtime 40x, GOMAXPROCS=1, load 4.7-5.2 on 2 cores). 14x14 and 7x7
// (16 and 4 tiles an image) keep their 2 and 8 images.
func (g *convGeom) winogradChunk(nb int) int {
	th, tw, _, _ := g.winogradTiles()
	tpi := th * tw
	for k := 1; k <= g.n && k*tpi <= winogradChunkTiles; k++ {
		if t := k * tpi; 16*((t+31)&^31) <= 17*t {
			return k
		}
	}
	return nb
}

// winogradChunkTiles is the most tiles winogradChunk puts in a chunk.
const winogradChunkTiles = 512

// winogradTiles is the tile rows and columns of g's output, and the padded
// input plane the tiles read (rows 4·th+2 of wp = 4·tw+2 columns).
func (g *convGeom) winogradTiles() (th, tw, hp, wp int) {
	th, tw = (g.oh+3)/4, (g.ow+3)/4
	return th, tw, 4*th + 2, 4*tw + 2
}

// winogradKernel writes U = G g Gᵀ for every (output, input) channel pair of
// w [OC, C, 3, 3] into *buf (grown when short): U[ξ] for ξ = 6a+b is an
// OC×C matrix packed as packA packs (8 rows at a time, k-major; the last
// block's rows past OC are zero when OC is not a multiple of 8), at
// ξ·winogradKernelStride(). Once a call, shared read-only by the image workers.
// With flip, g is an input gradient's transposed geometry (see
// convGradInput) and w the forward's kernel [C, OC, 3, 3]: pair (o, c)
// takes w's kernel (c, o) flipped in space, as flipKernel would have
// written it. The pairs go eight output channels (a packed group of rows)
// at a time, input channel by input channel, so that each of the 36
// matrices takes 8 adjacent values in a row, with AVX-512 16 pairs (two
// input channels) at a time (wgKernel16), with AVX2 8 (wgKernel8AVX2, from
// the taps laid out tap-major; 64x64 channels 0.33 ms a call in Go on a
// Zen 3 core, 0.08 ms so), the same bits. It runs before the images split,
// shared between the image workers eight output channels at a time
// (wgKernelJob) when large.
func winogradKernel(buf *[]float32, g *convGeom, w []float32, flip bool) []float32 {
	u := winogradKernelBuf(buf, g)
	winogradKernelRows(u, g, w, flip, 0, g.oc)
	return u
}

// winogradKernelBuf is *buf (grown when short) cut to the kernel's
// transform of g (winogradKernel).
func winogradKernelBuf(buf *[]float32, g *convGeom) []float32 {
	n := 36 * g.winogradKernelStride()
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	return (*buf)[:n]
}

// winogradKernelStride is how far apart winogradKernel's 36 matrices lie:
// room for OC rows rounded up to whole packed blocks of 8 (winogradStride(OC·C)
// when OC is a multiple of 8, as on the Winograd path: winogradFits).
func (g *convGeom) winogradKernelStride() int { return winogradStride((g.oc + 7) &^ 7 * g.c) }

// winogradKernelRows is winogradKernel for output channels [lo, hi) (lo a
// multiple of 8; hi a multiple of 8 or OC) into u: each pair's values are
// the same whichever range holds it.
func winogradKernelRows(u []float32, g *convGeom, w []float32, flip bool, lo, hi int) {
	oc, c, us := g.oc, g.c, g.winogradKernelStride()
	w = w[:oc*c*9]
	// Where pair (o, c)'s kernel starts in w (floats), and the offsets of
	// the 16 pairs of wgKernel16 from its first: lane l is output channel
	// l%8, input channel l/8.
	at := func(o, ci int) int { return (o*c + ci) * 9 }
	if flip {
		at = func(o, ci int) int { return (ci*oc + o) * 9 }
	}
	var idx [16]int32
	for l := range idx {
		idx[l] = int32(at(l%8, l/8) - at(0, 0))
	}
	var k [9]float32
	for o0 := lo; o0 < hi; o0 += 8 {
		ci := 0
		if useAVX512 && o0+8 <= oc {
			for ; ci+2 <= c; ci += 2 {
				wgKernel16(&w[at(o0, ci)], &idx[0], &u[o0*c+ci*8], us, &wgGConst[0], flip)
			}
		} else if useAVX2 && o0+8 <= oc {
			var kt [72]float32
			var tmp [144]float32
			for ; ci < c; ci++ {
				for l := 0; l < 8; l++ {
					src := w[at(o0+l, ci) : at(o0+l, ci)+9 : at(o0+l, ci)+9]
					for j := range 9 {
						if flip {
							kt[8*j+l] = src[8-j]
						} else {
							kt[8*j+l] = src[j]
						}
					}
				}
				wgKernel8AVX2(&kt[0], &u[o0*c+ci*8], us, &wgGConst[0], &tmp[0])
			}
		}
		for ; ci < c; ci++ {
			for o := o0; o < min(o0+8, oc); o++ {
				copy(k[:], w[at(o, ci):at(o, ci)+9])
				if flip {
					slices.Reverse(k[:])
				}
				winogradKernelPair(u[o0*c+ci*8+o-o0:], us, k[:])
			}
			for xi := 0; xi < 36 && o0+8 > oc; xi++ { // the rows past OC
				clear(u[xi*us+o0*c+ci*8+oc-o0 : xi*us+o0*c+ci*8+8])
			}
		}
	}
}

// wgKernelJob is the kernel's transform split between the image workers,
// eight output channels (a packed group of rows) a piece, before the
// images split: run on the caller alone, it was serial time in every
// forward and input gradient on the path (0.08 ms at 64x64 channels with
// AVX2 on a Zen 3 core, 1.3 ms at 256x256). Each pair's bits are those of
// the serial transform, whichever worker does it.
type wgKernelJob struct {
	g    *convGeom
	w, u []float32
	flip bool
	pr   partRun
}

// wgKernelSplitPairs is the least channel pairs (OC·C) whose transform is
// split: below it the hand-off costs about what the second worker saves.
// Tests lower it.
var wgKernelSplitPairs = 2048

func (j *wgKernelJob) run(int, int) {
	blocks := (j.g.oc + 7) / 8
	for b := j.pr.claim(); b < blocks; b = j.pr.claim() {
		winogradKernelRows(j.u, j.g, j.w, j.flip, 8*b, min(j.g.oc, 8*b+8))
	}
}

// transform is winogradKernel, split between the image workers when the
// kernel has wgKernelSplitPairs pairs or more.
func (j *wgKernelJob) transform(buf *[]float32, g *convGeom, w []float32, flip bool) []float32 {
	blocks := (g.oc + 7) / 8
	n := 1
	if g.oc*g.c >= wgKernelSplitPairs {
		n = min(imageWorkers(), blocks)
	}
	if n < 2 {
		return winogradKernel(buf, g, w, flip)
	}
	j.g, j.w, j.u, j.flip = g, w, winogradKernelBuf(buf, g), flip
	runParts(j, n, &j.pr)
	u := j.u
	j.g, j.w, j.u = nil, nil, nil
	return u
}

// wgGConst is wgG's constants for wgKernel16.
var wgGConst = [5]float32{1.0 / 24, 1.0 / 6, 1.0 / 12, 0.25, -1.0 / 6}

// winogradKernelPair writes G k Gᵀ of one 3x3 kernel k at u[ξ·us].
func winogradKernelPair(u []float32, us int, k []float32) {
	k = k[:9:9]
	// t = G k (6x3), column by column.
	var t [18]float32
	for j := 0; j < 3; j++ {
		t[j], t[3+j], t[6+j], t[9+j], t[12+j], t[15+j] = wgG(k[j], k[3+j], k[6+j])
	}
	for a := 0; a < 6; a++ {
		r0, r1, r2, r3, r4, r5 := wgG(t[3*a], t[3*a+1], t[3*a+2])
		p := u[a*6*us:]
		p[0], p[us], p[2*us], p[3*us], p[4*us], p[5*us] = r0, r1, r2, r3, r4, r5
	}
}

// wgG is G (6x3) times (g0, g1, g2).
// The conversions round each product before a sum, as wgKernel16 does: a
// compiler may otherwise fuse them (Go's GOAMD64=v3 does).
func wgG(g0, g1, g2 float32) (t0, t1, t2, t3, t4, t5 float32) {
	s, q, h := g0+g2, float32(g0*(1.0/24))+float32(g2*(1.0/6)), float32(g1*(1.0/12))
	return g0 * 0.25, (s + g1) * (-1.0 / 6), (s - g1) * (-1.0 / 6), q + h, q - h, g2
}

// convForwardWinograd is convForward for images [lo, hi) on the Winograd
// path, u the kernel's transform (winogradKernel): a chunk of images at a
// time, each channel padded and transformed into v, 36 multiplies into m,
// m transformed back into y. Each chunk is padded into keep
// (winogradPadSize apart) when it is not nil, for the weight gradient
// (keptPad), else into scratch.
// Each tile's result depends on nothing but its own inputs (the kernel's
// columns are independent), so the bits are the same however the images
// are split.
func convForwardWinograd(g *convGeom, x, u, y, keep []float32, s *convScratch, lo, hi int) {
	nb, in, out, hw := g.chunk(), g.in(), g.out(), g.h*g.w
	th, tw, hp, wp := g.winogradTiles()
	tpi, plane := th*tw, hp*wp
	rs := winogradRow(nb * tpi)
	// The chunk's padded channels (channel c, image i at (c·nb + i)·plane),
	// the transforms' scratch, and the input's transform V (value ξ,
	// channel c at ξ·vs + c·rs); the products M (value ξ, output channel o
	// at ξ·ms + o·rs).
	vs, ms, ps := winogradStride(g.c*rs), winogradStride(g.oc*rs), g.winogradPadSize()
	xps := ps
	if keep != nil {
		xps = 0
	}
	buf := scratch[float32](&s.cols, xps+576+36*vs)
	xp, buf := buf[:xps], buf[xps:]
	tmp, v := buf[:576], buf[576:]
	m := scratch[float32](&s.tmp, 36*ms)
	us := winogradStride(g.oc * g.c)
	for n0 := lo; n0 < hi; n0 += nb {
		k := min(nb, hi-n0)
		if keep != nil {
			xp = keep[n0/nb*ps : (n0/nb+1)*ps]
		}
		nt := k * tpi
		// The tiles' patches in xp, places in y and masks (winogradPatches),
		// kept between calls under a key implicitOffsets never uses (its
		// wq is at least 1).
		if key := (ioffKey{g, -1, k}); s.ioffOf != key || cap(s.ioff) < 6*rs {
			s.ioff, s.ioffOf = grow32(s.ioff, 6*rs), key
			winogradPatches(g, k, s.ioff[:rs], s.ioff[rs:2*rs], s.ioff[2*rs:6*rs], g.out(), g.w)
		}
		xoff, yoff, mask := s.ioff[:rs], s.ioff[rs:2*rs], s.ioff[2*rs:6*rs]
		for i := 0; i < k; i++ {
			for c := 0; c < g.c; c++ {
				winogradPad(xp[(c*nb+i)*plane:(c*nb+i+1)*plane], wp, hp, x[(n0+i)*in+c*hw:(n0+i)*in+(c+1)*hw], g.h, g.w)
			}
		}
		for c := 0; c < g.c; c++ {
			for t0 := 0; t0 < nt; t0 += 16 {
				wgInputTiles(&xp[c*nb*plane], &xoff[t0], wp, &v[c*rs+t0], vs, &tmp[0])
			}
		}
		boff := s.mm.rows(g.c, rs)
		for xi := 0; xi < 36; xi++ {
			sgemmNNPacked(g.oc, nt, g.c, u[xi*us:xi*us+g.oc*g.c], v[xi*vs:xi*vs+g.c*rs], boff,
				m[xi*ms:xi*ms+g.oc*rs], rs, false)
		}
		yc := y[n0*out : (n0+k)*out]
		for o := 0; o < g.oc; o++ {
			for t0 := 0; t0 < nt; t0 += 16 {
				wgOutputTiles(&m[o*rs+t0], ms, &tmp[0], &yc[o*hw], &yoff[t0], g.w, &mask[4*t0])
			}
		}
	}
}

// winogradPatches sets, for the tiles of k images (tile t of image i is
// i·th·tw + t), xoff[t] to the offset of the tile's patch in a chunk's
// padded channel (images a plane apart), yoff[t] to that of its 4x4
// output in a chunk's first channel (images yi apart, rows yr: the
// output, or in the weight gradient the copy of dy), and, when mask is
// not nil, bit j of mask[64·(t/16) + 16r + t%16] when output (r, j) of
// the tile lies inside the image. Tiles past the last read at offset 0
// and are written nowhere.
func winogradPatches(g *convGeom, k int, xoff, yoff, mask []int32, yi, yr int) {
	th, tw, hp, wp := g.winogradTiles()
	clear(xoff)
	clear(yoff)
	clear(mask)
	for i := 0; i < k; i++ {
		for ty := 0; ty < th; ty++ {
			for tx := 0; tx < tw; tx++ {
				t := (i*th+ty)*tw + tx
				xoff[t] = int32(i*hp*wp + 4*ty*wp + 4*tx)
				yoff[t] = int32(i*yi + 4*ty*yr + 4*tx)
				cols := int32(1)<<min(4, g.w-4*tx) - 1
				for r := 0; mask != nil && r < 4 && 4*ty+r < g.h; r++ {
					mask[t/16*64+16*r+t%16] = cols
				}
			}
		}
	}
}

// winogradPadSize is a chunk's input as the Winograd path pads it: channel
// c of image i on plane c·chunk() + i (winogradPad).
func (g *convGeom) winogradPadSize() int {
	_, _, hp, wp := g.winogradTiles()
	return g.c * g.chunk() * hp * wp
}

// winogradStride is the distance between the 36 transform-domain matrices
// of n values each: n plus 16, so that a tile's 36 values (one in each)
// fall on different cache sets however n is.
func winogradStride(n int) int { return (n+15)&^15 + 16 }

// winogradRow is the row stride of the transform-domain matrices for n
// tiles: n rounded up to the 16 tiles the transforms take at a time.
func winogradRow(n int) int { return (n + 15) &^ 15 }

// winogradPad writes image channel x (h×w) into p (hp×wp, rows wp apart)
// one row and column in, zeros around it.
func winogradPad(p []float32, wp, hp int, x []float32, h, w int) {
	clear(p[:wp+1])
	copyRows(p[wp+1:], wp, x, w, w, wp-w, h)
	clear(p[(h+1)*wp+1 : hp*wp])
}

// wgDwTiles is the tiles a weight-gradient group aims at (whole chunks,
// at least one): few enough that the group's transforms (36 values a tile
// and channel, input and output gradient; 1.2 MB at 28x28x16) stay near
// the core's caches, enough that sgemmNT4x6's final sums across lanes,
// once a product, cost little. 28x28x16, caches emptied first, CPU ms
// (go test ./nn/ops -run '^$' -bench 'ConvWinograd/stage1/dw-cold'
// -benchtime 40x, GOMAXPROCS=1, load 3 on 2 cores): 196 tiles 2.33-2.39,
// 98 2.77-2.88, 294 2.35-2.62, 512 2.41-2.82; the implicit path
// 2.64-2.92.
const wgDwTiles = 196

// convGradWeightWinograd is convGradWeightRange on the Winograd path: dw =
// Σ over images [lo, hi) (whole chunks) of the weight gradient: the
// transform-domain sums dU of the range (winogradDwSums), then dw = Gᵀ dU
// G.
func convGradWeightWinograd(g *convGeom, x, dy, dw, kept []float32, s *convScratch, lo, hi int) {
	winogradKernelGrad(g, winogradDwSums(g, x, dy, nil, kept, s, lo, hi), dw)
}

// winogradDwSums sets du (36 OC×C matrices, OC·C apart) to the
// transform-domain weight gradient of images [lo, hi) (whole chunks; zero
// when empty), groups of whole chunks (about wgDwTiles tiles) at a time:
// each group's tiles transformed, input (V, from the kept padding, or
// padded again when kept is nil) and output gradient (dM), then dU[ξ] +=
// dM[ξ]·V[ξ]ᵀ for the 36 ξ. The groups depend on the geometry and lo only:
// the bits on the image range, as on the other paths. With du nil it sums
// into s's scratch. It returns du.
func winogradDwSums(g *convGeom, x, dy, du, kept []float32, s *convScratch, lo, hi int) []float32 {
	nb := g.chunk()
	th, tw, hp, wp := g.winogradTiles()
	tpi, plane := th*tw, hp*wp
	gi := nb * max(1, wgDwTiles/(nb*tpi)) // images a group
	rs := winogradRow(gi * tpi)
	vs, ms := winogradStride(g.c*rs), winogradStride(g.oc*rs)
	// One channel of the group's images at a time is moved into xc (its
	// padding, planes apart) and dc (its output gradient, images dpl
	// apart, rows dld; zeros past the image where the tiles reach past
	// it) before the transforms read them: reads straight from the batch,
	// long out of the caches, wait on memory.
	dld, dpl := g.wgGradLayout()
	buf := scratch[float32](&s.cols, gi*plane+gi*dpl+576+36*vs)
	xc, buf := buf[:gi*plane], buf[gi*plane:]
	dc, buf := buf[:gi*dpl], buf[gi*dpl:]
	tmp, v := buf[:576], buf[576:]
	occ := g.oc * g.c
	buf = scratch[float32](&s.tmp, 36*ms+36*occ)
	m := buf[:36*ms]
	if du == nil {
		du = buf[36*ms:]
	}
	du = du[:36*occ]
	if lo >= hi {
		clear(du)
		return du
	}
	boff := s.mm.rows(g.c, rs)
	for n0 := lo; n0 < hi; n0 += gi {
		k := min(gi, hi-n0)
		nt := k * tpi
		if key := (ioffKey{g, -2, k}); s.ioffOf != key || cap(s.ioff) < 2*rs {
			s.ioff, s.ioffOf = grow32(s.ioff, 2*rs), key
			winogradPatches(g, k, s.ioff[:rs], s.ioff[rs:2*rs], nil, dpl, dld)
		}
		xoff, doff := s.ioff[:rs], s.ioff[rs:2*rs]
		for c := 0; c < g.c; c++ {
			g.wgInputChannel(c, n0, k, x, kept, xc, xoff, v[c*rs:], vs, tmp)
		}
		for o := 0; o < g.oc; o++ {
			g.wgGradChannel(o, n0, k, dy, dc, dld, dpl, doff, m[o*rs:], ms, tmp)
		}
		for xi := 0; xi < 36; xi++ {
			sgemmNTSegs(&s.mm, g.oc, g.c, nt, 1, m[xi*ms:xi*ms+g.oc*rs], rs, 0, v[xi*vs:xi*vs+g.c*rs], boff, 0,
				du[xi*occ:(xi+1)*occ], g.c, n0 > lo)
		}
	}
	return du
}

// winogradKernelGrad sets dw [OC, C, 3, 3] to Gᵀ dU G for every (output,
// input) channel pair, dU[ξ] an OC×C matrix at ξ·OC·C (in float64: it
// scales by fractions down to 1/24 and sums 36 terms). The pairs go
// wgKgPairs at a time, their 36 values read a line of each matrix at once
// (a pair at a time read 36 values OC·C apart, which at 64x64 channels,
// 16 KB, fall on one L1 set: 0.59 ms a call), with AVX-512 16 at a time
// (wgKernelGrad16, from a copy of their lines) and 8 (wgKernelGrad8), with
// AVX2 16 at a time (wgKernelGrad16AVX2, four a register; 64x64 channels
// 0.53 ms a call in Go on a Zen 3 core, 0.06 ms so), the same bits.
func winogradKernelGrad(g *convGeom, du, dw []float32) {
	winogradKernelGradPairs(du, dw, g.oc*g.c, 0, g.oc*g.c)
}

// winogradKernelGradPairs is winogradKernelGrad for pairs [lo, hi) of the
// occ: each pair's bits are the same whichever range holds it.
func winogradKernelGradPairs(du, dw []float32, occ, lo, hi int) {
	du, dw = du[:36*occ], dw[:9*occ]
	p0 := lo
	if useAVX512 {
		var tmp [36 * 16]float32
		for ; p0+16 <= hi; p0 += 16 {
			wgKernelGrad16(&du[p0], occ, &dw[p0*9], &wgGTConst[0], &tmp[0])
		}
		for ; p0+8 <= hi; p0 += 8 {
			wgKernelGrad8(&du[p0], occ, &dw[p0*9], &wgGTConst[0])
		}
	} else if useAVX2 {
		var tmp [720]float32
		for ; p0+16 <= hi; p0 += 16 {
			wgKernelGrad16AVX2(&du[p0], occ, &dw[p0*9], &wgGTConst[0], &tmp[0])
		}
	}
	var d [36][wgKgPairs]float64
	for ; p0 < hi; p0 += wgKgPairs {
		np := min(wgKgPairs, hi-p0)
		for xi := range d {
			src := du[xi*occ+p0 : xi*occ+p0+np]
			for j, v := range src {
				d[xi][j] = float64(v)
			}
		}
		for j := 0; j < np; j++ {
			// t = Gᵀ dU (3x6), column by column, then t G.
			var t [18]float64
			for b := 0; b < 6; b++ {
				t[b], t[6+b], t[12+b] = wgGT(d[b][j], d[6+b][j], d[12+b][j], d[18+b][j], d[24+b][j], d[30+b][j])
			}
			p := p0 + j
			k := dw[p*9 : p*9+9 : p*9+9]
			for i := 0; i < 3; i++ {
				r0, r1, r2 := wgGT(t[6*i], t[6*i+1], t[6*i+2], t[6*i+3], t[6*i+4], t[6*i+5])
				k[3*i], k[3*i+1], k[3*i+2] = float32(r0), float32(r1), float32(r2)
			}
		}
	}
}

// wgKgPairs is the channel pairs winogradKernelGrad transforms at a time
// in Go: a cache line of each of the 36 matrices.
const wgKgPairs = 16

// wgGTConst is wgGT's constants for wgKernelGrad8.
var wgGTConst = [4]float64{0.25, 1.0 / 6, 1.0 / 24, 1.0 / 12}

// wgGT is Gᵀ (3x6) times (z0, ..., z5): the transpose of wgG.
// As in wgG, the conversions keep a compiler from fusing a product with a
// sum, as wgKernelGrad8 does not.
func wgGT(z0, z1, z2, z3, z4, z5 float64) (r0, r1, r2 float64) {
	s, d, p, q := z1+z2, z2-z1, z3+z4, z3-z4
	return float64(z0*0.25) - float64(s*(1.0/6)) + float64(p*(1.0/24)), float64(d*(1.0/6)) + float64(q*(1.0/12)), float64((p-s)*(1.0/6)) + z5
}

// wgGradLayout is how the Winograd weight gradient stages an output
// gradient plane: rows dld apart, planes dpl apart; the plane as it is
// when whole tiles cover it, else padded to whole tiles (zeros past the
// image where the tiles reach past it).
func (g *convGeom) wgGradLayout() (dld, dpl int) {
	if g.h%4 == 0 && g.w%4 == 0 {
		return g.w, g.h * g.w
	}
	th, tw, _, _ := g.winogradTiles()
	return 4 * tw, 16 * th * tw
}

// wgInputChannel moves channel c of images [n0, n0+k) into stage (each
// padded, planes hp·wp apart: from the forward's kept padding, or padded
// again when kept is nil) and transforms their tiles (xoff) into v, the
// 36 values vs apart.
func (g *convGeom) wgInputChannel(c, n0, k int, x, kept, stage []float32, xoff []int32, v []float32, vs int, tmp []float32) {
	th, tw, hp, wp := g.winogradTiles()
	nb, in, hw, plane, ps := g.chunk(), g.in(), g.h*g.w, hp*wp, g.winogradPadSize()
	for i := 0; i < k; i++ {
		p := stage[i*plane : (i+1)*plane]
		if n := n0 + i; kept != nil {
			at := n/nb*ps + (c*nb+n%nb)*plane
			copy(p, kept[at:at+plane])
		} else {
			winogradPad(p, wp, hp, x[n*in+c*hw:n*in+(c+1)*hw], g.h, g.w)
		}
	}
	for t0 := 0; t0 < k*th*tw; t0 += 16 {
		wgInputTiles(&stage[0], &xoff[t0], wp, &v[t0], vs, &tmp[0])
	}
}

// wgGradChannel moves output channel o of images [n0, n0+k) of dy into
// stage as wgGradLayout lays it out (rows dld apart, planes dpl), zeros
// past the image included, and transforms their tiles (doff) into m, the
// 36 values ms apart. The zeros are written each time: stage may hold
// other planes (the channel split stages the input there too).
func (g *convGeom) wgGradChannel(o, n0, k int, dy, stage []float32, dld, dpl int, doff []int32, m []float32, ms int, tmp []float32) {
	out, hw := g.out(), g.h*g.w
	for i := 0; i < k; i++ {
		p, src := stage[i*dpl:(i+1)*dpl], dy[(n0+i)*out+o*hw:(n0+i)*out+(o+1)*hw]
		if dld == g.w {
			copy(p, src)
		} else {
			copyRows(p, dld, src, g.w, g.w, dld-g.w, g.h)
		}
		clear(p[g.h*dld:])
	}
	th, tw, _, _ := g.winogradTiles()
	for t0 := 0; t0 < k*th*tw; t0 += 16 {
		wgGradTiles(&stage[0], &doff[t0], dld, &m[t0], ms, &tmp[0])
	}
}
