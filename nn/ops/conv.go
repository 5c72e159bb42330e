package ops

import (
	"fmt"
	"unsafe"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Conv2dOpts are the geometry and gradient options of Conv2d. Zero values
// mean stride 1, padding 0, dilation 1.
type Conv2dOpts struct {
	Stride, Padding, Dilation [2]int // (height, width)
	// NoInputGrad skips the gradient with respect to the input (a first
	// layer fed straight from the batch).
	NoInputGrad bool
	// Groups splits the input and output channels into that many groups,
	// each convolved with its own weights (PyTorch's groups; 0 means 1):
	// the weight is then [OC, C/Groups, KH, KW], and Groups = C is a
	// depthwise convolution. See conv_direct.go and conv_group.go.
	Groups int
}

// convGeom is everything the kernels need to know about one convolution.
type convGeom struct {
	n, c, h, w     int // input
	oc, kh, kw     int // weight
	sh, sw, ph, pw int
	dh, dw         int
	oh, ow         int // output
	// idx maps, for kernel offset k = ki·kw + kj and output position p,
	// idx[k·OHW + p] to the input position read, or -1 in the padding. Set
	// for geometries that are not same(); read-only, shared by the ops.
	idx []int32
	// sub and spread, for a 1x1 convolution of width stride 2 without
	// padding on rows of at most 32 (resnet8's shortcuts), are im2col's
	// and col2im's row moves as one permutation a row (perm.go): every
	// other pixel of an input row, and a dx row from them with zeros
	// between. Set by buildIndex; read-only, shared.
	sub, spread *permPlan
}

// buildIndex fills g.idx.
func (g *convGeom) buildIndex() {
	if g.same() {
		return
	}
	if g.kh == 1 && g.kw == 1 && g.ph == 0 && g.pw == 0 && g.sw == 2 {
		sub, spread := new(permPlan), new(permPlan)
		if splitPlan(sub, g.w, g.ow, 2, 0, 0) && mergePlan(spread, g.w, true, false) {
			g.sub, g.spread = sub, spread
		}
	}
	ohw := g.ohw()
	g.idx = make([]int32, g.kh*g.kw*ohw)
	for ki := 0; ki < g.kh; ki++ {
		for kj := 0; kj < g.kw; kj++ {
			ix := g.idx[(ki*g.kw+kj)*ohw:]
			for oy := 0; oy < g.oh; oy++ {
				iy := oy*g.sh - g.ph + ki*g.dh
				for ox := 0; ox < g.ow; ox++ {
					jx := ox*g.sw - g.pw + kj*g.dw
					if iy < 0 || iy >= g.h || jx < 0 || jx >= g.w {
						ix[oy*g.ow+ox] = -1
					} else {
						ix[oy*g.ow+ox] = int32(iy*g.w + jx)
					}
				}
			}
		}
	}
}

func (g *convGeom) ckk() int { return g.c * g.kh * g.kw }
func (g *convGeom) ohw() int { return g.oh * g.ow }
func (g *convGeom) in() int  { return g.c * g.h * g.w }
func (g *convGeom) out() int { return g.oc * g.ohw() }
func (g *convGeom) x1() bool {
	return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0
}
func (g *convGeom) xShape() tensor.Shape { return tensor.Shape{g.n, g.c, g.h, g.w} }
func (g *convGeom) wShape() tensor.Shape { return tensor.Shape{g.oc, g.c, g.kh, g.kw} }
func (g *convGeom) yShape() tensor.Shape { return tensor.Shape{g.n, g.oc, g.oh, g.ow} }

// chunk is how many images one multiply covers: enough columns (about
// convColumns) for an efficient multiply when images are small, one image
// when they are large (the multiply then reads and writes the output and its
// gradient in place, with no gather or scatter). An odd number of chunks
// (above one) is evened out with smaller chunks, so that two image workers
// get the same work (64 images of 7x7: 8 chunks of 8, not 6 of 10 and one
// of 4). It depends on the geometry only, never on the worker count: the
// chunks, and so each multiply's bits, are the same serial or split. (A
// geometry the float32 Winograd path takes chunks as winogradChunk says,
// in float64 too.)
func (g *convGeom) chunk() int {
	if g.x1() {
		return 1
	}
	nb := max(1, min(convColumns/g.ohw(), g.n))
	wino := winogradFits[float32](g)
	if wino {
		nb = g.winogradChunk(nb)
	}
	c := (g.n + nb - 1) / nb
	switch {
	case c > 1 && c%2 == 1:
		nb = max(1, (g.n+c)/(c+1))
	case c > 1 && !wino:
		// The implicit and phase paths multiply a whole chunk's grid
		// whatever images it holds: balanced chunks, the same number of
		// them (32 images of 7x7: 4 of 8, not 3 of 10 and one of 2, which
		// costs a tenth more than 8; see TestConvChunksBalanced). The
		// Winograd path multiplies only the tiles a chunk has.
		nb = (g.n + c - 1) / c
	}
	return nb
}

// convColumns is the target width of the column matrix of one multiply.
var convColumns = 512

// same reports a stride-1 convolution whose output is as large as its input
// (3x3 with padding 1, say): every row of the column matrix is then the image
// shifted by a fixed offset, copied (or added back) in one contiguous block.
func (g *convGeom) same() bool {
	return g.sh == 1 && g.sw == 1 && g.oh == g.h && g.ow == g.w
}

// Conv2d is the 2-D cross-correlation of x [N, C, H, W] with w [OC, C, KH, KW]
// plus b [OC] (or no bias when b is nil), as PyTorch's conv2d: im2col into an
// op-held buffer and one matrix multiply per chunk of images.
func Conv2d(x, w, b *G.Node, o Conv2dOpts) (*G.Node, error) {
	for _, c := range []struct {
		what string
		n    *G.Node
	}{{"Conv2d input", x}, {"Conv2d weight", w}} {
		if err := checkFloat(c.what, c.n); err != nil {
			return nil, err
		}
	}
	if err := sameDtype("Conv2d weight", x, w); err != nil {
		return nil, err
	}
	xs, ws := x.Shape(), w.Shape()
	if len(ws) != 4 {
		return nil, fmt.Errorf("Conv2d weight has shape %v: want [out channels, in channels, kh, kw]", ws)
	}
	if len(xs) != 4 {
		return nil, fmt.Errorf("Conv2d input has shape %v: want [batch, %d, height, width]", xs, ws[1])
	}
	groups := max(o.Groups, 1)
	if o.Groups < 0 {
		return nil, fmt.Errorf("Conv2d groups is %d: want 1 or more (0 means 1)", o.Groups)
	}
	if xs[1]%groups != 0 || ws[0]%groups != 0 {
		return nil, fmt.Errorf("Conv2d groups is %d but the input has %d channels and the weight %v %d outputs: both must be multiples of the groups", groups, xs[1], ws, ws[0])
	}
	if xs[1] != ws[1]*groups {
		if groups > 1 {
			return nil, fmt.Errorf("Conv2d input has shape %v with %d channels, but weight %v in %d groups wants %d (%d a group)", xs, xs[1], ws, groups, ws[1]*groups, ws[1])
		}
		return nil, fmt.Errorf("Conv2d input has shape %v with %d channels, but weight %v wants %d", xs, xs[1], ws, ws[1])
	}
	def := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	g := convGeom{n: xs[0], c: xs[1], h: xs[2], w: xs[3], oc: ws[0], kh: ws[2], kw: ws[3],
		sh: def(o.Stride[0], 1), sw: def(o.Stride[1], 1), ph: o.Padding[0], pw: o.Padding[1],
		dh: def(o.Dilation[0], 1), dw: def(o.Dilation[1], 1)}
	if g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1 || g.ph < 0 || g.pw < 0 {
		return nil, fmt.Errorf("Conv2d stride %v, padding %v, dilation %v: stride and dilation must be ≥ 1, padding ≥ 0", o.Stride, o.Padding, o.Dilation)
	}
	g.oh = (g.h+2*g.ph-g.dh*(g.kh-1)-1)/g.sh + 1
	g.ow = (g.w+2*g.pw-g.dw*(g.kw-1)-1)/g.sw + 1
	if g.h+2*g.ph-g.dh*(g.kh-1)-1 < 0 || g.w+2*g.pw-g.dw*(g.kw-1)-1 < 0 {
		return nil, fmt.Errorf("Conv2d input %v is too small for a %dx%d kernel with padding (%d, %d) and dilation (%d, %d): each spatial side needs at least %dx%d after padding",
			xs, g.kh, g.kw, g.ph, g.pw, g.dh, g.dw, g.dh*(g.kh-1)+1, g.dw*(g.kw-1)+1)
	}
	children := []*G.Node{x, w}
	if b != nil {
		if err := sameDtype("Conv2d bias", x, b); err != nil {
			return nil, err
		}
		if bs := b.Shape(); len(bs) != 1 || bs[0] != g.oc {
			return nil, fmt.Errorf("Conv2d bias has shape %v, want [%d] to match weight %v", bs, g.oc, ws)
		}
		children = append(children, b)
	}
	if useDirect(&g, groups, x.Dtype()) {
		return apply(&directConvOp{base: newBase("Conv2d"), d: newDirectGeom(g, groups), convSig: convSig{bias: b != nil, noInputGrad: o.NoInputGrad}}, children...)
	}
	if groups > 1 {
		return apply(newGroupConv(g, groups, b != nil, o.NoInputGrad), children...)
	}
	g.buildIndex()
	return apply(&convOp{base: newBase("Conv2d"), g: g, convSig: convSig{bias: b != nil, noInputGrad: o.NoInputGrad}}, children...)
}

type convOp struct {
	base
	convSig
	g     convGeom
	out   buffer
	ws    []convScratch
	job   any       // *convFwdJob[T], reused
	wpack []float32 // the weight packed for the implicit path
	// pad is the whole batch padded on the implicit path, kept for the
	// weight gradient (set up by SymDiff, which makes that gradient).
	pad keptPad
}

// keptPad is a forward's padded input (every chunk, padSize apart), which
// the weight gradient multiplies by instead of padding the same input
// again. It is valid for the input at x: within one run of a graph the
// input of a convolution cannot change between its forward and its weight
// gradient, which takes the same value as an input and runs after it.
type keptPad struct {
	keep bool      // a weight gradient reads it
	xp   []float32 // chunks() × padSize(), or × winogradPadSize() when wino
	x    *float32  // the input it holds, nil when none
	wino bool      // xp is laid out as the Winograd path pads (winogradPad)
}

// padFor is the kept padding of x in the Winograd path's layout (wino) or
// the implicit path's, or nil when the last forward did not keep one for
// x in that layout.
func (k *keptPad) padFor(x []float32, wino bool) []float32 {
	if k.x == nil || len(x) == 0 || k.x != unsafe.SliceData(x) || k.wino != wino {
		return nil
	}
	return k.xp
}

// convSig is what a convolution op and a grouped one share: operands
// (x, w[, b]), their types, and which of them get a gradient.
type convSig struct {
	bias        bool
	noInputGrad bool
}

func (s convSig) Arity() int {
	if s.bias {
		return 3
	}
	return 2
}

func (s convSig) Type() hm.Type {
	if s.bias {
		return fnType(4, 4, 4, 1)
	}
	return fnType(4, 4, 4)
}

func (s convSig) DiffWRT(int) []bool {
	d := []bool{!s.noInputGrad, true}
	if s.bias {
		d = append(d, true)
	}
	return d
}

// args checks a convolution's operands v against the shapes of x and w
// (and b, [oc], when the op has a bias) and returns them.
func (s convSig) args(op fmt.Stringer, v []G.Value, xs, ws tensor.Shape, oc int) (x, w, b *tensor.Dense, err error) {
	dt := v[1].Dtype()
	if x, err = dense(op, "input", v[0], dt, xs); err != nil {
		return nil, nil, nil, err
	}
	if w, err = dense(op, "weight", v[1], dt, ws); err != nil {
		return nil, nil, nil, err
	}
	if s.bias {
		if b, err = dense(op, "bias", v[2], dt, tensor.Shape{oc}); err != nil {
			return nil, nil, nil, err
		}
	}
	return x, w, b, nil
}

func (op *convOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.g.yShape(), nil }

func (op *convOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[1].Dtype()
	x, w, b, err := op.args(op, v, op.g.xShape(), op.g.wShape(), op.g.oc)
	if err != nil {
		return nil, err
	}
	y := op.out.get(dt, op.g.yShape())
	if dt == tensor.Float32 {
		convFwd[float32](op, x, w, b, y)
	} else {
		convFwd[float64](op, x, w, b, y)
	}
	return y, nil
}

// scratch returns *p as a []T of length n, reallocating when too short.
// Storing into *p boxes the slice header, so it happens only when the
// buffer grows.
func scratch[T float](p *any, n int) []T {
	s, _ := (*p).([]T)
	if cap(s) < n {
		s = make([]T, n)
		*p = s
	}
	return s[:n]
}

// convScratch is one image worker's scratch ([]T each): column matrix,
// chunk result or gathered output gradient, weight-gradient partial sum.
type convScratch struct {
	cols, tmp, acc any
	mm             mmScratch
	ioff           []int32 // row offsets of the implicit path
	ioffOf         ioffKey // what ioff was computed for
}

// ioffKey is the geometry and layout implicitOffsets computed for.
type ioffKey struct {
	g       *convGeom
	wq, pst int
}

// scratchFor returns (*ws)[:n], growing it (the only allocation) when short.
func scratchFor(ws *[]convScratch, n int) []convScratch {
	if len(*ws) < n {
		*ws = append(*ws, make([]convScratch, n-len(*ws))...)
	}
	return (*ws)[:n]
}

// readyScratch grows the scratch of each worker of a split (ws[i] is
// worker i's) to the largest any of them holds; the caller calls it once
// the split is done. The workers claim chunks as they come, so one that
// woke late (a pool goroutine on a loaded machine) may claim none in the
// op's first call and its first one calls later, where it must not
// allocate either (TestConvWorkerScratchReady). The workers of a split
// run the same path on the same geometry: none needs more than the
// largest. A partial sum (acc) belongs to a part, not a worker, and every
// part runs in every call: it is left as it is.
func readyScratch(ws []convScratch) {
	if len(ws) < 2 {
		return
	}
	var big convScratch
	for i := range ws {
		s := &ws[i]
		big.cols, big.tmp = largerOf(big.cols, s.cols), largerOf(big.tmp, s.tmp)
		big.ioff = longerOf(big.ioff, s.ioff)
		big.mm.ap, big.mm.ragA = longerOf(big.mm.ap, s.mm.ap), longerOf(big.mm.ragA, s.mm.ragA)
		big.mm.ragC, big.mm.boff = longerOf(big.mm.ragC, s.mm.ragC), longerOf(big.mm.boff, s.mm.boff)
	}
	for i := range ws {
		s := &ws[i]
		growLike(&s.cols, big.cols)
		growLike(&s.tmp, big.tmp)
		if cap(s.ioff) < cap(big.ioff) {
			s.ioff, s.ioffOf = make([]int32, cap(big.ioff)), ioffKey{}
		}
		if cap(s.mm.boff) < cap(big.mm.boff) {
			s.mm.boff, s.mm.bk, s.mm.bld = make([]int32, cap(big.mm.boff)), 0, 0
		}
		// ap's users check its length, the others' capacity.
		if len(s.mm.ap) < len(big.mm.ap) {
			s.mm.ap = make([]float32, len(big.mm.ap))
		}
		if cap(s.mm.ragA) < cap(big.mm.ragA) {
			s.mm.ragA = make([]float32, cap(big.mm.ragA))
		}
		if cap(s.mm.ragC) < cap(big.mm.ragC) {
			s.mm.ragC = make([]float32, cap(big.mm.ragC))
		}
	}
}

// longerOf is whichever of a and b has the larger capacity.
func longerOf[E any](a, b []E) []E {
	if cap(b) > cap(a) {
		return b
	}
	return a
}

// largerOf is whichever of two scratch buffers (a []float32 or []float64
// in an any, see scratch) has the larger capacity.
func largerOf(a, b any) any {
	if anyCap(b) > anyCap(a) {
		return b
	}
	return a
}

func anyCap(a any) int {
	switch s := a.(type) {
	case []float32:
		return cap(s)
	case []float64:
		return cap(s)
	}
	return 0
}

// growLike makes *p a buffer of like's type and capacity when it holds a
// smaller one.
func growLike(p *any, like any) {
	if anyCap(*p) >= anyCap(like) {
		return
	}
	switch s := like.(type) {
	case []float32:
		*p = make([]float32, cap(s))
	case []float64:
		*p = make([]float64, cap(s))
	}
}

// jobFor returns the *J held in *p, making it on first use.
func jobFor[J any](p *any) *J {
	j, _ := (*p).(*J)
	if j == nil {
		j = new(J)
		*p = j
	}
	return j
}

// chunks is how many image chunks (see chunk) the batch has.
func (g *convGeom) chunks() int {
	nb := g.chunk()
	return (g.n + nb - 1) / nb
}

// macs is the multiply-adds of one multiply pass over the batch.
func (g *convGeom) macs() int { return g.n * g.oc * g.ckk() * g.ohw() }

// imageRange is the images of part i of n: whole chunks, contiguous, the
// same chunks a serial pass multiplies (so each multiply, and its bits, are
// the same whatever n).
func (g *convGeom) imageRange(i, n int) (lo, hi int) {
	nb, c := g.chunk(), g.chunks()
	return min(g.n, i*c/n*nb), min(g.n, (i+1)*c/n*nb)
}

// convFwdJob is the forward pass split over image workers.
type convFwdJob[T float] struct {
	g          *convGeom
	x, w, b, y []T
	ap         []float32 // w packed (packA) on the implicit path, else nil
	keep       []float32 // the batch's padding to keep, or nil
	ws         []convScratch
	pr         partRun
	kj         wgKernelJob // the kernel's transform, split, on the Winograd path
}

func (j *convFwdJob[T]) run(i, n int) { claimChunks(j, &j.pr, j.g, &j.ws[i], n) }

// chunkJob is a split convolution whose image chunks are independent.
type chunkJob interface {
	// images does images [lo, hi) (whole chunks) on scratch s; par lets
	// its loops use the loop workers.
	images(s *convScratch, lo, hi int, par bool)
}

// claimChunks is part of a split of j over n goroutines: it claims g's
// chunks until none is left (all of them, loops in parallel, when n is 1).
func claimChunks(j chunkJob, pr *partRun, g *convGeom, s *convScratch, n int) {
	if n == 1 {
		j.images(s, 0, g.n, true)
		return
	}
	nb := g.chunk()
	for c := pr.claim(); c < g.chunks(); c = pr.claim() {
		j.images(s, c*nb, min(g.n, (c+1)*nb), false)
	}
}

func (j *convFwdJob[T]) images(s *convScratch, lo, hi int, par bool) {
	g := j.g
	convForward(g, j.x, j.w, j.ap, j.y, j.keep, s, lo, hi, par)
	if j.b == nil {
		return
	}
	ohw, out := g.ohw(), g.out()
	for n := lo; n < hi; n++ {
		for o := 0; o < g.oc; o++ {
			row := j.y[n*out+o*ohw : n*out+(o+1)*ohw]
			bo := j.b[o]
			for i := range row {
				row[i] += bo
			}
		}
	}
}

func convFwd[T float](op *convOp, xt, wt, bt, yt *tensor.Dense) {
	g := &op.g
	j := jobFor[convFwdJob[T]](&op.job)
	j.g, j.x, j.w, j.b, j.y = g, data[T](xt), data[T](wt), nil, data[T](yt)
	if bt != nil {
		j.b = data[T](bt)
	}
	op.pad.x, j.keep, j.ap = nil, nil, nil
	if winogradFits[T](g) {
		j.ap = j.kj.transform(&op.wpack, g, f32s(j.w), false)
	} else if implicitRows[T](g, g.oc, 8) {
		j.ap = packed(&op.wpack, g.oc, g.ckk(), f32s(j.w))
	}
	if op.pad.keep {
		// The padding the weight gradient reads: the Winograd path's
		// own, or the implicit path's (its forward pads it as it goes).
		ps, wino := 0, winogradFits[T](g)
		if wino {
			ps = g.winogradPadSize()
		} else if implicitRows[T](g, g.oc, 8) {
			ps = g.padSize()
		}
		if n := g.chunks() * ps; cap(op.pad.xp) < n {
			op.pad.xp = make([]float32, n)
		}
		if ps > 0 {
			j.keep, op.pad.wino = op.pad.xp[:g.chunks()*ps], wino
		}
	}
	w := imageSplit(g.chunks(), g.macs())
	j.ws = scratchFor(&op.ws, w)
	if w == 1 {
		j.run(0, 1)
	} else {
		runParts(j, w, &j.pr)
		readyScratch(j.ws)
	}
	if j.keep != nil {
		op.pad.x = f32p(j.x)
	}
	j.x, j.w, j.b, j.y, j.keep, j.ap = nil, nil, nil, nil, nil, nil
}

// packed returns w (m×k, rows k apart) packed for sgemmNNPacked, in *buf
// (grown when short): once a call, shared read-only by the image workers.
func packed(buf *[]float32, m, k int, w []float32) []float32 {
	if cap(*buf) < m*k {
		*buf = make([]float32, m*k)
	}
	ap := (*buf)[:m*k]
	packA(ap, false, m, k, w, k)
	return ap
}

// convForward is y = w ⊛ x for images [lo, hi) (whole chunks): im2col a
// chunk of images into cols, one multiply, scatter when the chunk has
// several images. par lets the copies use the loop workers (parallelLoop).
// keep, when not nil, is where the implicit path pads the batch (see
// keptPad); ap is w packed for it (packed).
func convForward[T float](g *convGeom, x, w []T, ap []float32, y []T, keep []float32, s *convScratch, lo, hi int, par bool) {
	if winogradFits[T](g) { // ap is then the kernel's transform
		convForwardWinograd(g, f32s(x), ap, f32s(y), keep, s, lo, hi)
		return
	}
	if implicitRows[T](g, g.oc, 8) {
		convForwardImplicit(g, x, ap, y, keep, s, lo, hi)
		return
	}
	ckk, ohw, out := g.ckk(), g.ohw(), g.out()
	nb := g.chunk()
	var cols, tmp []T
	if !g.x1() {
		cols = scratch[T](&s.cols, ckk*nb*ohw)
	}
	if nb > 1 {
		tmp = scratch[T](&s.tmp, g.oc*nb*ohw)
	}
	for n0 := lo; n0 < hi; n0 += nb {
		m := min(nb, hi-n0)
		ld := m * ohw
		src := cols
		if g.x1() {
			src = x[n0*g.in() : (n0+1)*g.in()] // [C, HW] is already the column matrix
		} else {
			im2colChunk(g, x, cols, n0, m, par)
		}
		if m == 1 {
			mm(&s.mm, false, false, g.oc, ohw, ckk, 1, w, ckk, src, ld, 0, y[n0*out:(n0+1)*out], ohw)
		} else {
			mm(&s.mm, false, false, g.oc, ld, ckk, 1, w, ckk, src, ld, 0, tmp, ld)
			moveChunk(g, tmp, y, n0, m, false, par)
		}
	}
}

// transposed is the geometry of the input gradient of a same() convolution
// seen as a convolution itself: dx = w' ⊛ dy with w' the kernel flipped in
// space and its channel axes swapped (valid because same() padding is
// symmetric: 2·pad = dilation·(kernel-1)).
func (g *convGeom) transposed() convGeom {
	t := *g
	t.c, t.oc = g.oc, g.c
	t.h, t.w, t.oh, t.ow = g.oh, g.ow, g.h, g.w
	t.idx = nil
	return t
}

// flipKernel writes w' [C, OC, KH, KW] with w'[c, o, i, j] = w[o, c, KH-1-i, KW-1-j].
func flipKernel[T float](g *convGeom, w, wt []T) {
	khw := g.kh * g.kw
	for o := 0; o < g.oc; o++ {
		for c := 0; c < g.c; c++ {
			src := w[(o*g.c+c)*khw : (o*g.c+c+1)*khw]
			dst := wt[(c*g.oc+o)*khw : (c*g.oc+o+1)*khw]
			for k, v := range src {
				dst[khw-1-k] = v
			}
		}
	}
}

// im2col writes image x [C, H, W] into the column matrix cols (ld columns
// per row, this image's columns starting at off): row (c, ki, kj), column
// (oy, ox) holds x[c, oy·sh - ph + ki·dh, ox·sw - pw + kj·dw], 0 outside.
func im2col[T float](g *convGeom, x, cols []T, ld, off, c0, c1 int) {
	if g.same() {
		im2colSame(g, x, cols, ld, off, c0, c1)
		return
	}
	if g.sub != nil && useAVX512 && is32[T]() {
		hw := g.h * g.w
		for c := c0; c < c1; c++ {
			plane := f32s(x[c*hw : (c+1)*hw])
			permRows(f32s(cols[c*ld+off:c*ld+off+g.ohw()]), g.ow, plane, plane[min(16, hw):], g.sh*g.w, g.oh, g.sub)
		}
		return
	}
	ohw, khw := g.ohw(), g.kh*g.kw
	for c := c0; c < c1; c++ {
		plane := x[c*g.h*g.w : (c+1)*g.h*g.w]
		for k := 0; k < khw; k++ {
			row := cols[(c*khw+k)*ld+off : (c*khw+k)*ld+off+ohw]
			for p, j := range g.idx[k*ohw : (k+1)*ohw] {
				if j >= 0 {
					row[p] = plane[j]
				} else {
					row[p] = 0
				}
			}
		}
	}
}

// col2im adds the column matrix back into image dx [C, H, W]: the adjoint of
// im2col.
func col2im[T float](g *convGeom, cols []T, ld, off int, dx []T, c0, c1 int) {
	if g.same() {
		col2imSame(g, cols, ld, off, dx, c0, c1)
		return
	}
	if g.spread != nil && useAVX512 && is32[T]() {
		// dx is zero (convGradInputCols clears it) and one tap reaches
		// each of its pixels at most: the rows it reaches are written,
		// zeros between the pixels included, the others stay zero.
		hw := g.h * g.w
		for c := c0; c < c1; c++ {
			row := f32s(cols[c*ld+off : c*ld+off+g.ohw()])
			permRows(f32s(dx[c*hw:(c+1)*hw]), g.sh*g.w, row, row, g.ow, g.oh, g.spread)
		}
		return
	}
	ohw, khw := g.ohw(), g.kh*g.kw
	for c := c0; c < c1; c++ {
		plane := dx[c*g.h*g.w : (c+1)*g.h*g.w]
		for k := 0; k < khw; k++ {
			row := cols[(c*khw+k)*ld+off : (c*khw+k)*ld+off+ohw]
			for p, j := range g.idx[k*ohw : (k+1)*ohw] {
				if j >= 0 {
					plane[j] += row[p]
				}
			}
		}
	}
}

// sameShift describes row (ki, kj) of a same() convolution: output position
// p reads input position p + shift for output rows [rowLo, rowHi); output
// columns [0, -sx) or [w-sx, w) of those rows read outside the image.
func sameShift(g *convGeom, ki, kj int) (shift, sx, rowLo, rowHi int) {
	sy := ki*g.dh - g.ph
	sx = kj*g.dw - g.pw
	rowLo, rowHi = max(0, -sy), min(g.h, g.h-sy)
	return sy*g.w + sx, sx, max(rowLo, 0), max(rowHi, rowLo)
}

func im2colSame[T float](g *convGeom, x, cols []T, ld, off, c0, c1 int) {
	hw, w := g.h*g.w, g.w
	for c := c0; c < c1; c++ {
		plane := x[c*hw : (c+1)*hw]
		for ki := 0; ki < g.kh; ki++ {
			for kj := 0; kj < g.kw; kj++ {
				r := (c*g.kh+ki)*g.kw + kj
				dst := cols[r*ld+off : r*ld+off+hw]
				shift, sx, lo, hi := sameShift(g, ki, kj)
				clear(dst[:lo*w])
				clear(dst[hi*w:])
				if lo >= hi || sx >= w || -sx >= w {
					clear(dst[lo*w : hi*w])
					continue
				}
				// One block copy; the few elements it takes from the
				// neighbouring row (or skips at the ends) are the columns
				// outside the image, zeroed next.
				from, to, at := lo*w+shift, hi*w+shift, lo*w
				if from < 0 {
					at -= from
					from = 0
				}
				to = min(to, hw)
				copy(dst[at:], plane[from:to])
				zeroEdges(dst, w, lo, hi, sx)
			}
		}
	}
}

// zeroEdges clears, in rows [lo, hi) of a row-major block of width w, the
// columns a shift of sx moved outside the image.
func zeroEdges[T float](d []T, w, lo, hi, sx int) {
	switch {
	case sx < 0:
		for y := lo; y < hi; y++ {
			clear(d[y*w : y*w-sx])
		}
	case sx > 0:
		for y := lo; y < hi; y++ {
			clear(d[y*w+w-sx : (y+1)*w])
		}
	}
}

func col2imSame[T float](g *convGeom, cols []T, ld, off int, dx []T, c0, c1 int) {
	hw, w := g.h*g.w, g.w
	for c := c0; c < c1; c++ {
		plane := dx[c*hw : (c+1)*hw]
		for ki := 0; ki < g.kh; ki++ {
			for kj := 0; kj < g.kw; kj++ {
				r := (c*g.kh+ki)*g.kw + kj
				src := cols[r*ld+off : r*ld+off+hw]
				shift, sx, lo, hi := sameShift(g, ki, kj)
				if lo >= hi || sx >= w || -sx >= w {
					continue
				}
				// The column matrix is scratch: zero its out-of-image
				// columns, then add the rows back in one block.
				zeroEdges(src, w, lo, hi, sx)
				from, to, at := lo*w+shift, hi*w+shift, lo*w
				if from < 0 {
					at -= from
					from = 0
				}
				to = min(to, hw)
				addTo(plane[from:to], src[at:])
			}
		}
	}
}

// addTo is d += s elementwise over d.
func addTo[T float](d, s []T) {
	s = s[:len(d)]
	for i, v := range s {
		d[i] += v
	}
}

func (op *convOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	res := make(G.Nodes, len(inputs))
	var err error
	if !op.noInputGrad {
		if res[0], err = apply(&convGradInputOp{base: newBase("Conv2dGradInput"), g: op.g}, grad, inputs[1]); err != nil {
			return nil, err
		}
	}
	op.pad.keep = true
	if res[1], err = apply(&convGradWeightOp{base: newBase("Conv2dGradWeight"), g: op.g, fwd: op}, inputs[0], grad); err != nil {
		return nil, err
	}
	if op.bias {
		if res[2], err = apply(&channelSumOp{base: newBase("Conv2dGradBias"), shape: op.g.yShape()}, grad); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// moveChunk copies between the chunk layout [OC, m·OHW] of the multiplies
// and images n0..n0+m of the batch layout [N, OC, OHW]: into the batch
// (scatter) or, with gather, out of it.
func moveChunk[T float](g *convGeom, chunk, batch []T, n0, m int, gather, par bool) {
	tasks := m * g.oc
	if w := workers(tasks, g.ohw()); par && w > 1 {
		parallelLoop(loopMoveRows, w, tasks, chunk, batch, nil, loopArgs{g: g, n0: n0, m: m, gather: gather})
		return
	}
	moveRows(g, chunk, batch, n0, m, gather, 0, tasks)
}

func moveRows[T float](g *convGeom, chunk, batch []T, n0, m int, gather bool, lo, hi int) {
	ohw, ld := g.ohw(), m*g.ohw()
	for t := lo; t < hi; t++ {
		i, o := t/g.oc, t%g.oc
		c := chunk[o*ld+i*ohw : o*ld+(i+1)*ohw]
		b := batch[(n0+i)*g.out()+o*ohw : (n0+i)*g.out()+(o+1)*ohw]
		if gather {
			copy(c, b)
		} else {
			copy(b, c)
		}
	}
}

// im2colChunk writes images n0..n0+m of x into the column matrix, one
// (image, channel) plane per task (on the loop workers when par).
func im2colChunk[T float](g *convGeom, x, cols []T, n0, m int, par bool) {
	tasks := m * g.c
	if w := workers(tasks, g.kh*g.kw*g.ohw()); par && w > 1 {
		parallelLoop(loopIm2col, w, tasks, x, cols, nil, loopArgs{g: g, n0: n0, m: m})
		return
	}
	im2colTasks(g, x, cols, n0, m, 0, tasks)
}

func im2colTasks[T float](g *convGeom, x, cols []T, n0, m, lo, hi int) {
	for t := lo; t < hi; t++ {
		i, c := t/g.c, t%g.c
		im2col(g, x[(n0+i)*g.in():(n0+i+1)*g.in()], cols, m*g.ohw(), i*g.ohw(), c, c+1)
	}
}

// col2imChunk adds the column matrix of images n0..n0+m back into dx.
func col2imChunk[T float](g *convGeom, cols, dx []T, n0, m int, par bool) {
	tasks := m * g.c
	if w := workers(tasks, g.kh*g.kw*g.ohw()); par && w > 1 {
		parallelLoop(loopCol2im, w, tasks, cols, dx, nil, loopArgs{g: g, n0: n0, m: m})
		return
	}
	col2imTasks(g, cols, dx, n0, m, 0, tasks)
}

func col2imTasks[T float](g *convGeom, cols, dx []T, n0, m, lo, hi int) {
	for t := lo; t < hi; t++ {
		i, c := t/g.c, t%g.c
		col2im(g, cols, m*g.ohw(), i*g.ohw(), dx[(n0+i)*g.in():(n0+i+1)*g.in()], c, c+1)
	}
}

// convGradWeightOp is Σ_images dy·colsᵀ: (x, dy) → [OC, C, KH, KW].
type convGradWeightOp struct {
	base
	noDiff
	g   convGeom
	fwd *convOp // whose kept padding it reads, when there is one
	out buffer
	ws  []convScratch
	job any // *convDwJob[T], reused
}

func (op *convGradWeightOp) Arity() int         { return 2 }
func (op *convGradWeightOp) Type() hm.Type      { return fnType(4, 4, 4) }
func (op *convGradWeightOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *convGradWeightOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.g.wShape(), nil
}

func (op *convGradWeightOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	x, err := dense(op, "input", v[0], dt, op.g.xShape())
	if err != nil {
		return nil, err
	}
	dy, err := dense(op, "output gradient", v[1], dt, op.g.yShape())
	if err != nil {
		return nil, err
	}
	dw := op.out.get(dt, op.g.wShape())
	if dt == tensor.Float32 {
		convGradWeight[float32](op, x, dy, dw)
	} else {
		convGradWeight[float64](op, x, dy, dw)
	}
	return dw, nil
}

// convDwJob is the weight gradient split into parts (dwParts) that the
// image workers claim: part p sums the products of images
// imageRange(p, parts) into its own partial sum (part 0 straight into dw),
// then dw += partial 1, += partial 2, ... in part order, so that the bits
// depend on the number of parts only, never on timing or on which worker
// took a part (and under SetDeterministic, on nothing: the count is
// fixed).
//
// On the Winograd path the partial sums are those of the transform domain
// (dU, 36 OC×C matrices, winogradDwSums), and a second split (join) adds
// them up in part order and transforms the sum (dw = Gᵀ dU G) once, a
// block of channel pairs a piece: a transform a part, each on the core
// that summed the part, cost the two workers of resnet8's 64x64-channel
// convolution (four parts) four transforms of 0.5 ms where one, shared,
// does. The Winograd weight gradient of small images (wgDwChanFits) splits
// by channels instead (wgDwChan): no partial sums, no parts.
type convDwJob[T float] struct {
	g         *convGeom
	parts     int // partial sums: part p sums images imageRange(p, parts)
	x, dy, dw []T
	xp        []float32 // the forward's kept padding of x, or nil
	ws        []convScratch
	pr        partRun
	wino      bool     // parts sum dU on the Winograd path (then join)
	join      bool     // the split adds the parts' dU up and transforms it
	ch        wgDwChan // the Winograd path of small images (wgDwChanFits)
}

// wgJoinPairs is the channel pairs a piece of the Winograd weight
// gradient's join adds up and transforms: a few pieces at 16x16 channels
// (256 pairs), 32 at 64x64.
const wgJoinPairs = 128

func (j *convDwJob[T]) run(i, n int) {
	s := &j.ws[i]
	if j.wino {
		j.runWinograd(s)
		return
	}
	for p := j.pr.claim(); p < j.parts; p = j.pr.claim() {
		acc := j.dw
		if p > 0 {
			acc = scratch[T](&j.ws[p].acc, len(j.dw))
		}
		lo, hi := j.g.imageRange(p, j.parts)
		convGradWeightRange(j.g, j.x, j.dy, acc, j.xp, s, lo, hi, n == 1)
	}
}

// runWinograd is run on the Winograd path: part p's dU into part p's
// scratch (acc), or in the join, pieces of wgJoinPairs pairs: dU of part 0
// += dU of part 1, += part 2, ... for the piece's pairs, then their
// transform into dw.
func (j *convDwJob[T]) runWinograd(s *convScratch) {
	g, occ := j.g, j.g.oc*j.g.c
	if !j.join {
		for p := j.pr.claim(); p < j.parts; p = j.pr.claim() {
			lo, hi := g.imageRange(p, j.parts)
			winogradDwSums(g, f32s(j.x), f32s(j.dy), scratch[float32](&j.ws[p].acc, 36*occ), j.xp, s, lo, hi)
		}
		return
	}
	du := j.ws[0].acc.([]float32)[:36*occ]
	for q := j.pr.claim(); q*wgJoinPairs < occ; q = j.pr.claim() {
		lo, hi := q*wgJoinPairs, min(occ, (q+1)*wgJoinPairs)
		for p := 1; p < j.parts; p++ {
			dp := j.ws[p].acc.([]float32)
			for xi := 0; xi < 36; xi++ {
				addTo(du[xi*occ+lo:xi*occ+hi], dp[xi*occ+lo:xi*occ+hi])
			}
		}
		winogradKernelGradPairs(du, f32s(j.dw), occ, lo, hi)
	}
}

func convGradWeight[T float](op *convGradWeightOp, xt, dyt, dwt *tensor.Dense) {
	g := &op.g
	j := jobFor[convDwJob[T]](&op.job)
	j.g, j.x, j.dy, j.dw, j.xp = g, data[T](xt), data[T](dyt), data[T](dwt), nil
	if op.fwd != nil && is32[T]() {
		j.xp = op.fwd.pad.padFor(f32s(j.x), winogradFits[T](g))
	}
	w := imageSplit(g.chunks(), g.macs())
	if is32[T]() && winogradFits[T](g) && wgDwChanFits(g) {
		// Small images: split by channels, the same bits for any w.
		j.ch.grad(g, f32s(j.x), f32s(j.dy), f32s(j.dw), j.xp, scratchFor(&op.ws, w), w)
		j.x, j.dy, j.dw, j.xp = nil, nil, nil, nil
		return
	}
	j.parts = dwParts(g.chunks(), w)
	w = min(w, j.parts)
	j.ws = scratchFor(&op.ws, max(w, j.parts))
	j.wino, j.join = j.parts > 1 && winogradFits[T](g), false
	split := func() {
		if w == 1 {
			j.pr.next.Store(0)
			j.run(0, 1)
		} else {
			runParts(j, w, &j.pr)
			readyScratch(j.ws[:w])
		}
	}
	split()
	if j.wino {
		j.join = true
		split()
	} else {
		for p := 1; p < j.parts; p++ {
			addTo(j.dw, j.ws[p].acc.([]T)[:len(j.dw)])
		}
	}
	j.x, j.dy, j.dw, j.xp = nil, nil, nil, nil
}

// convGradWeightRange sets dw to Σ dy·colsᵀ over images [lo, hi) (whole
// chunks; zero when empty). xp, when not nil, is x padded by the forward
// (keptPad).
func convGradWeightRange[T float](g *convGeom, x, dy, dw []T, xp []float32, s *convScratch, lo, hi int, par bool) {
	if lo < hi && winogradFits[T](g) {
		convGradWeightWinograd(g, f32s(x), f32s(dy), f32s(dw), xp, s, lo, hi)
		return
	}
	if lo < hi && implicitRows[T](g, g.oc, 4) {
		convGradWeightImplicit(g, x, dy, dw, xp, s, lo, hi)
		return
	}
	ckk, ohw, out := g.ckk(), g.ohw(), g.out()
	nb := g.chunk()
	var cols, dyc []T
	if !g.x1() {
		cols = scratch[T](&s.cols, ckk*nb*ohw)
	}
	if nb > 1 {
		dyc = scratch[T](&s.tmp, g.oc*nb*ohw)
	}
	if lo >= hi {
		clear(dw)
		return
	}
	var beta T
	for n0 := lo; n0 < hi; n0 += nb {
		m := min(nb, hi-n0)
		ld := m * ohw
		src := cols
		if g.x1() {
			src = x[n0*g.in() : (n0+1)*g.in()]
		} else {
			im2colChunk(g, x, cols, n0, m, par)
		}
		d := dy[n0*out : (n0+1)*out]
		if m > 1 {
			moveChunk(g, dyc, dy, n0, m, true, par)
			d = dyc
		}
		mm(&s.mm, false, true, g.oc, ckk, ld, 1, d, ld, src, ld, beta, dw, ckk)
		beta = 1
	}
}

// convGradInputOp is the input gradient wᵀ·dy put back in place (col2im, a
// convolution of dy, or phase by phase): (dy, w) → [N, C, H, W].
type convGradInputOp struct {
	base
	noDiff
	g     convGeom
	t     convGeom // same(): the transposed geometry (see convGradInput)
	out   buffer
	ws    []convScratch
	wflip any
	wpack []float32 // the flipped weight packed (mode dxConv)
	job   any       // *convDxJob[T], reused
	// The phase-split plan (conv_phase.go) and its taps, in mode dxPhased.
	phases dxPhases
	ty, tx [][]phaseTap
}

func (op *convGradInputOp) Arity() int                                     { return 2 }
func (op *convGradInputOp) Type() hm.Type                                  { return fnType(4, 4, 4) }
func (op *convGradInputOp) DiffWRT(int) []bool                             { return []bool{false, false} }
func (op *convGradInputOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.g.xShape(), nil }

func (op *convGradInputOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	dy, err := dense(op, "output gradient", v[0], dt, op.g.yShape())
	if err != nil {
		return nil, err
	}
	w, err := dense(op, "weight", v[1], dt, op.g.wShape())
	if err != nil {
		return nil, err
	}
	dx := op.out.get(dt, op.g.xShape())
	if dt == tensor.Float32 {
		convGradInput[float32](op, dy, w, dx)
	} else {
		convGradInput[float64](op, dy, w, dx)
	}
	return dx, nil
}

// dx modes: a convolution of dy, one multiply per image (1x1), phase by
// phase (conv_phase.go), or multiply then col2im.
const (
	dxConv = iota
	dxX1
	dxPhased
	dxCol2im
)

// convDxJob is the input gradient split over image workers; each writes
// only its own images of dx.
type convDxJob[T float] struct {
	g         *convGeom // the transposed geometry in mode dxConv
	mode      int
	phases    *dxPhases // in mode dxPhased
	dy, w, dx []T
	ap        []float32 // w packed, in mode dxConv on the implicit path
	ws        []convScratch
	pr        partRun
	kj        wgKernelJob // the kernel's transform, split, on the Winograd path
}

func (j *convDxJob[T]) run(i, n int) { claimChunks(j, &j.pr, j.g, &j.ws[i], n) }

func (j *convDxJob[T]) images(s *convScratch, lo, hi int, par bool) {
	g := j.g
	switch j.mode {
	case dxConv:
		convForward(g, j.dy, j.w, j.ap, j.dx, nil, s, lo, hi, par)
	case dxX1: // dx_n = wᵀ·dy_n, straight into the output
		ckk, ohw, out, in := g.ckk(), g.ohw(), g.out(), g.in()
		for n := lo; n < hi; n++ {
			mm(&s.mm, true, false, ckk, ohw, g.oc, 1, j.w, ckk, j.dy[n*out:(n+1)*out], ohw, 0, j.dx[n*in:(n+1)*in], ohw)
		}
	case dxPhased:
		convGradInputPhases(g, j.phases, f32s(j.dy), f32s(j.dx), s, lo, hi)
	default:
		convGradInputCols(g, j.dy, j.w, j.dx, s, lo, hi, par)
	}
}

func convGradInput[T float](op *convGradInputOp, dyt, wt, dxt *tensor.Dense) {
	g := &op.g
	j := jobFor[convDxJob[T]](&op.job)
	j.g, j.dy, j.w, j.dx = g, data[T](dyt), data[T](wt), data[T](dxt)
	switch {
	case g.same() && !g.x1() && g.oc <= 2*g.c:
		// A convolution of dy: its multiply has K = OC·KH·KW instead of
		// OC, and no scatter-add (col2im) is needed. (With many more output
		// than input channels, as in a stem, the column matrix of dy would
		// be the larger one: col2im below.)
		op.t = g.transposed()
		j.g, j.mode, j.ap = &op.t, dxConv, nil
		if winogradFits[T](&op.t) {
			// The transform reads the kernel flipped: no flipped copy.
			j.ap = j.kj.transform(&op.wpack, &op.t, f32s(j.w), true)
			break
		}
		wf := scratch[T](&op.wflip, len(j.w))
		flipKernel(g, j.w, wf)
		j.w = wf
		if implicitRows[T](&op.t, op.t.oc, 8) {
			j.ap = packed(&op.wpack, op.t.oc, op.t.ckk(), f32s(wf))
		}
	case g.x1():
		j.mode = dxX1
	case usePhases[T](g) && op.phases.build(g, f32s(j.w), &op.ty, &op.tx):
		// Strided and other non-same convolutions: no scatter-add.
		j.mode, j.phases = dxPhased, &op.phases
	default:
		j.mode = dxCol2im
	}
	w := imageSplit(j.g.chunks(), g.macs())
	j.ws = scratchFor(&op.ws, w)
	if w == 1 {
		j.run(0, 1)
	} else {
		runParts(j, w, &j.pr)
		readyScratch(j.ws)
	}
	j.dy, j.w, j.dx, j.ap = nil, nil, nil, nil
}

// convGradInputCols sets dx for images [lo, hi) (whole chunks) to
// col2im(wᵀ·dy).
func convGradInputCols[T float](g *convGeom, dy, w, dx []T, s *convScratch, lo, hi int, par bool) {
	ckk, ohw, out, in := g.ckk(), g.ohw(), g.out(), g.in()
	nb := g.chunk()
	dcols := scratch[T](&s.cols, ckk*nb*ohw)
	var dyc []T
	if nb > 1 {
		dyc = scratch[T](&s.tmp, g.oc*nb*ohw)
	}
	clear(dx[lo*in : hi*in])
	for n0 := lo; n0 < hi; n0 += nb {
		m := min(nb, hi-n0)
		ld := m * ohw
		d := dy[n0*out : (n0+1)*out]
		if m > 1 {
			moveChunk(g, dyc, dy, n0, m, true, par)
			d = dyc
		}
		mm(&s.mm, true, false, ckk, ld, g.oc, 1, w, ckk, d, ld, 0, dcols, ld)
		col2imChunk(g, dcols, dx, n0, m, par)
	}
}

// channelSumOp sums x [N, C, ...] over every axis but the channel axis: the
// bias gradient of Conv2d. → [C].
type channelSumOp struct {
	base
	noDiff
	shape tensor.Shape
	out   buffer
	acc   []float64
}

func (op *channelSumOp) Arity() int         { return 1 }
func (op *channelSumOp) Type() hm.Type      { return fnType(1, len(op.shape)) }
func (op *channelSumOp) DiffWRT(int) []bool { return []bool{false} }
func (op *channelSumOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.shape[1]}, nil
}

func (op *channelSumOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	x, err := dense(op, "input", v[0], dt, op.shape)
	if err != nil {
		return nil, err
	}
	n, c := op.shape[0], op.shape[1]
	inner := op.shape.TotalSize() / (n * c)
	o := op.out.get(dt, tensor.Shape{c})
	if dt == tensor.Float32 {
		channelSumPar(op, data[float32](x), data[float32](o), n, c, inner)
	} else {
		channelSumPar(op, data[float64](x), data[float64](o), n, c, inner)
	}
	return o, nil
}

// channelSumPar sums each channel over the images in image order: on one
// goroutine image by image (in memory order), or, when x is large, the
// channels split between the loop workers, each summed alone with the
// same additions in the same order (the same bits).
func channelSumPar[T float](op *channelSumOp, x, o []T, n, c, inner int) {
	if w := workers(c, n*inner); w > 1 {
		parallelLoop(loopChannelSum, w, c, x, nil, o, loopArgs{csum: op})
		return
	}
	op.acc = grow(op.acc, c)
	channelSum(x, o, op.acc, n, c, inner)
}

func channelSum[T float](x, o []T, acc []float64, n, c, inner int) {
	clear(acc)
	for i := 0; i < n; i++ {
		for ch := 0; ch < c; ch++ {
			acc[ch] += sum(x[(i*c+ch)*inner : (i*c+ch+1)*inner])
		}
	}
	for ch := range o {
		o[ch] = T(acc[ch])
	}
}

// channelSumRange is channelSum of channels [lo, hi).
func channelSumRange[T float](op *channelSumOp, x, o []T, lo, hi int) {
	n, c := op.shape[0], op.shape[1]
	inner := op.shape.TotalSize() / (n * c)
	for ch := lo; ch < hi; ch++ {
		var acc float64
		for i := 0; i < n; i++ {
			acc += sum(x[(i*c+ch)*inner : (i*c+ch+1)*inner])
		}
		o[ch] = T(acc)
	}
}

// UsePreallocDo is Do writing into p when p fits (see buffer.prealloc).
func (op *convGradWeightOp) UsePreallocDo(p G.Value, v ...G.Value) (G.Value, error) {
	op.out.prealloc(p)
	defer op.out.release()
	return op.Do(v...)
}

// UsePreallocDo is Do writing into p when p fits (see buffer.prealloc).
func (op *channelSumOp) UsePreallocDo(p G.Value, v ...G.Value) (G.Value, error) {
	op.out.prealloc(p)
	defer op.out.release()
	return op.Do(v...)
}
