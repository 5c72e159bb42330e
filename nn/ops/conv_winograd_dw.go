package ops

// The Winograd weight gradient of small images, split by channels rather
// than by images. At 7x7 (four tiles an image) the image split gave each
// of resnet8's two workers two parts of 16 images, 64 tiles: 36 products
// dU[ξ] (OC×C) += dM[ξ]·V[ξ]ᵀ whose sums ran over 64 tiles only (each a
// lane sum and a sum across lanes), four partial dU of 0.6 MB to add up
// (the join), and the weight gradient of 64x64 channels took as long on
// two workers as on one (2.9 ms against 2.9, BenchmarkConvWinograd). Here
// the batch goes a group of wgDwChanTiles tiles at a time (64 images of
// 7x7 in one), in two splits:
//
//   - transforms: pieces of one channel, the input's (its padding copied
//     and Bᵀ d B of every tile of the group into V) or the output
//     gradient's (A dy Aᵀ into dM);
//   - products: pieces of wgDwChanRows output channels, the 36 rows
//     blocks dU[ξ][o0:o0+8] += dM[ξ][o0:o0+8]·V[ξ]ᵀ over all the group's
//     tiles, and after the last group the pieces' own pairs transformed
//     (dw = Gᵀ dU G).
//
// Every value is computed by one piece whose work depends on the geometry
// only (a product element's sum runs over its own rows in tile order,
// whatever rows a call holds), so the bits are the same for any worker
// count and under SetDeterministic: there are no partial sums to order.

// wgDwChanMaxTiles is the most tiles an image may have for its weight
// gradient to split by channels (4: images of 8x8 and less, resnet8's
// third stage); larger images keep the image split (their parts' sums run
// over hundreds of tiles each). At 16 (resnet8's 14x14 stage too, in
// four groups) that stage's weight gradient took 2.4-4.3 ms on two
// workers against the image split's 1.9-2.2 (load 4 on 2 cores).
var wgDwChanMaxTiles = 4

// wgDwChanTiles is the most tiles of a group (whole images, at least one):
// resnet8's 64 images of 7x7 in one, whose V and dM take 2.4 MB each at 64
// channels.
const wgDwChanTiles = 256

// wgDwChanRows is the output channels of a product piece (the kernel's
// rows go 4 at a time; winogradFits wants OC a multiple of 8).
const wgDwChanRows = 8

// wgDwChanFits is whether g's weight gradient (g on the Winograd path)
// splits by channels.
func wgDwChanFits(g *convGeom) bool {
	th, tw, _, _ := g.winogradTiles()
	return th*tw <= wgDwChanMaxTiles
}

// wgDwChan is the channel-split weight gradient's state, held by its op.
type wgDwChan struct {
	g     *convGeom
	x, dy []float32
	dw    []float32
	kept  []float32 // the forward's kept padding of x, or nil
	ws    []convScratch
	v, m  []float32 // the group's transforms: V (input) and dM (output gradient)
	du    []float32 // dU, 36 OC×C matrices OC·C apart
	n0, k int       // the group: images [n0, n0+k)
	last  bool      // the group is the batch's last: transform dU into dw
	phase int       // 0: transforms, 1: products
	pr    partRun
}

// wgDwChanGroup is the images of a group and the row stride of its
// transforms.
func wgDwChanGroup(g *convGeom) (gi, rs int) {
	th, tw, _, _ := g.winogradTiles()
	tpi := th * tw
	gi = min(g.n, max(1, wgDwChanTiles/tpi))
	return gi, winogradRow(gi * tpi)
}

// grad sets dw to the weight gradient of x and dy on up to w workers
// (ws[i] worker i's scratch), kept the forward's padding of x or nil.
func (j *wgDwChan) grad(g *convGeom, x, dy, dw, kept []float32, ws []convScratch, w int) {
	gi, rs := wgDwChanGroup(g)
	vs, ms, occ := winogradStride(g.c*rs), winogradStride(g.oc*rs), g.oc*g.c
	j.v = grow(j.v, 36*vs)
	j.m = grow(j.m, 36*ms)
	j.du = grow(j.du, 36*occ)
	j.g, j.x, j.dy, j.dw, j.kept, j.ws = g, x, dy, dw, kept, ws
	for n0 := 0; n0 < g.n; n0 += gi {
		j.n0, j.k, j.last = n0, min(gi, g.n-n0), n0+gi >= g.n
		for j.phase = 0; j.phase < 2; j.phase++ {
			if w == 1 {
				j.pr.next.Store(0)
				j.run(0, 1)
			} else {
				runParts(j, w, &j.pr)
			}
		}
	}
	j.g, j.x, j.dy, j.dw, j.kept, j.ws = nil, nil, nil, nil, nil, nil
}

func (j *wgDwChan) run(i, _ int) {
	g, s := j.g, &j.ws[i]
	gi, rs := wgDwChanGroup(g)
	th, tw, hp, wp := g.winogradTiles()
	tpi := th * tw
	plane, nt := hp*wp, j.k*tpi
	vs, ms, occ := winogradStride(g.c*rs), winogradStride(g.oc*rs), g.oc*g.c
	if j.phase == 1 {
		boff := s.mm.rows(g.c, rs)
		for q := j.pr.claim(); q*wgDwChanRows < g.oc; q = j.pr.claim() {
			o0, o1 := q*wgDwChanRows, min(g.oc, (q+1)*wgDwChanRows)
			for xi := 0; xi < 36; xi++ {
				sgemmNTSegs(&s.mm, o1-o0, g.c, nt, 1, j.m[xi*ms+o0*rs:xi*ms+o1*rs], rs, 0,
					j.v[xi*vs:xi*vs+g.c*rs], boff, 0, j.du[xi*occ+o0*g.c:xi*occ+o1*g.c], g.c, j.n0 > 0)
			}
			if j.last {
				winogradKernelGradPairs(j.du, j.dw, occ, o0*g.c, o1*g.c)
			}
		}
		return
	}
	// The output gradient's copy: images dpl apart, rows dld, zeros past
	// the image where the tiles reach past it (as winogradDwSums).
	dld, dpl := g.wgGradLayout()
	buf := scratch[float32](&s.cols, gi*max(plane, dpl)+576)
	stage, tmp := buf[:gi*max(plane, dpl)], buf[gi*max(plane, dpl):]
	if key := (ioffKey{g, -3, j.k}); s.ioffOf != key || cap(s.ioff) < 2*rs {
		s.ioff, s.ioffOf = grow32(s.ioff, 2*rs), key
		winogradPatches(g, j.k, s.ioff[:rs], s.ioff[rs:2*rs], nil, dpl, dld)
	}
	xoff, doff := s.ioff[:rs], s.ioff[rs:2*rs]
	for q := j.pr.claim(); q < g.c+g.oc; q = j.pr.claim() {
		if c := q; c < g.c {
			g.wgInputChannel(c, j.n0, j.k, j.x, j.kept, stage, xoff, j.v[c*rs:], vs, tmp)
			continue
		}
		o := q - g.c
		g.wgGradChannel(o, j.n0, j.k, j.dy, stage, dld, dpl, doff, j.m[o*rs:], ms, tmp)
	}
}
