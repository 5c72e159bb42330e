package ops

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A grouped convolution with few input channels a group (depthwise: one)
// runs as a direct convolution rather than group by group through the
// ungrouped ops (conv_group.go), whose multiplies have then an inner
// dimension of only C/G·KH·KW and whose gathers and scatters cost as much
// as the arithmetic. Each input plane is copied zero-padded into rows wp =
// W+2pw wide, so that every kernel tap reads one contiguous run of it:
// for the outputs of every row and column up to the last strided one
// (OHd = (OH-1)·sh+1 rows, each written wp wide; the columns past the
// image, and for strides the positions between, are discarded), tap
// (ki, kj) is y' += w[ki, kj]·xp[ki·dh·wp + kj·dw :][:OHd·wp], one vector
// multiply-add over the whole plane; on AVX-512 every tap at once, y' held
// in registers a block at a time (tapsFMA32, conv_direct_amd64.s). A stride thus costs sh·sw times the
// multiply-adds it needs, in exchange for no per-pixel moves but the
// output's: at depthwise sizes the cheaper trade. The input gradient is
// the adjoint (xp's gradient += w·dy' with dy' the output gradient spread
// to those positions, zeros between, then its interior is dx; computed as
// a correlation of dy' with the flipped taps, tapsFMA again), the weight
// gradient a dot product of dy' with the same runs (tapsDot4x32: four
// taps a pass). Forward and input gradient split (image, group) pairs
// between the image workers; the weight gradient splits output channels,
// each summing its images in order, so that its bits do not depend on the
// worker count either.

// directMaxGroupChannels is the most input channels a group may have for
// the direct path: beyond it the ungrouped multiplies win. (A 3x3 training
// step of 64 channels at 28x28, batch 32, on one core: 2 channels a group
// 4.3x faster than group by group, 4 channels 1.6x, 8 channels 1.8x
// slower.)
const directMaxGroupChannels = 4

// useDirect reports whether a convolution of geometry g (whole channels)
// in groups groups and dtype dt takes the direct path: every grouped one
// with few channels a group, and, in float32 on AVX-512, an ungrouped
// stride-1 one with few input channels that no other path of this package
// takes whole: output channels not a multiple of 8 (no implicit path) and
// not same-padded (its column matrix is gathered pixel by pixel). LeNet's
// 1 -> 6 and 3 -> 6 5x5 convolutions, batch 64, one core: 2.7-3.1 and
// 8.3-9.1 ms a training step through the column matrix, 1.0 and 2.9-3.3
// direct; same-padded 3x3 ones of 2 -> 20 and 4 -> 12 channels are as fast
// or faster through it (the direct path computes every column of a padded
// row, and a stride sh·sw times its work).
func useDirect(g *convGeom, groups int, dt tensor.Dtype) bool {
	if g.c/groups > directMaxGroupChannels {
		return false
	}
	if groups > 1 {
		return true
	}
	return directUngrouped && dt == tensor.Float32 && useAVX512 && g.oc%8 != 0 && !g.same() && g.sh == 1 && g.sw == 1
}

// directUngrouped lets ungrouped convolutions take the direct path; tests
// of the other paths clear it.
var directUngrouped = true

// directGeom is the layout of a direct convolution.
type directGeom struct {
	g          convGeom // whole: c and oc are all the channels
	groups     int
	cg, og     int   // input, output channels a group
	wp, plane  int   // a padded plane's row width and size
	l          int   // the dense outputs of a plane: OHd·wp
	off        []int // by tap ki·kw+kj: where its run starts in xp
	roff       []int // by tap: maxOff - off, the input gradient's runs
	maxOff     int   // the last tap's offset
	khw, macsG int   // taps; multiply-adds of one (image, group)
}

func newDirectGeom(g convGeom, groups int) *directGeom {
	d := &directGeom{g: g, groups: groups, cg: g.c / groups, og: g.oc / groups, khw: g.kh * g.kw}
	d.wp = g.w + 2*g.pw
	// The padded rows, and one more: the last tap's run ends up to
	// (kw-1)·dw past the last of them.
	d.plane = d.wp * (g.h + 2*g.ph + 1)
	d.l = ((g.oh-1)*g.sh + 1) * d.wp
	d.off = make([]int, d.khw)
	for ki := 0; ki < g.kh; ki++ {
		for kj := 0; kj < g.kw; kj++ {
			d.off[ki*g.kw+kj] = ki*g.dh*d.wp + kj*g.dw
		}
	}
	d.maxOff = d.off[d.khw-1]
	d.roff = make([]int, d.khw)
	for t, o := range d.off {
		d.roff[t] = d.maxOff - o
	}
	d.macsG = d.og * d.cg * d.khw * d.l
	return d
}

// pad writes input plane x [H, W] zero-padded into p (rows wp apart).
func pad[T float](d *directGeom, x, p []T) {
	g := &d.g
	// Each row is pw zeros, the image row, pw zeros: the zeros after one
	// row run into the next one's.
	top := g.ph*d.wp + g.pw
	clear(p[:top])
	rowCopy(p[top:], d.wp, x, g.w, g.w, d.wp-g.w, g.h-1)
	rowCopy(p[top+(g.h-1)*d.wp:], d.wp, x[(g.h-1)*g.w:], g.w, g.w, g.pw, 1)
	clear(p[(g.h+g.ph)*d.wp : d.plane])
}

// unpad writes dx [H, W] from the padded plane's gradient p.
func unpad[T float](d *directGeom, p, dx []T) {
	g := &d.g
	rowCopy(dx, g.w, p[g.ph*d.wp+g.pw:], d.wp, g.w, 0, g.h)
}

// narrow writes output plane y [OH, OW] from the dense outputs yd.
func narrow[T float](d *directGeom, yd, y []T) {
	g := &d.g
	if g.sw == 1 {
		rowCopy(y, g.ow, yd, g.sh*d.wp, g.ow, 0, g.oh)
		return
	}
	for oy := 0; oy < g.oh; oy++ {
		src, dst := yd[oy*g.sh*d.wp:], y[oy*g.ow:][:g.ow]
		for ox := range dst {
			dst[ox] = src[ox*g.sw]
		}
	}
}

// spread writes output-gradient plane dy [OH, OW] into the dense layout
// dd, zeros elsewhere: the adjoint of narrow.
func spread[T float](d *directGeom, dy, dd []T) {
	g := &d.g
	if g.sh == 1 && g.sw == 1 {
		rowCopy(dd, d.wp, dy, g.ow, g.ow, d.wp-g.ow, g.oh-1)
		rowCopy(dd[(g.oh-1)*d.wp:], d.wp, dy[(g.oh-1)*g.ow:], g.ow, g.ow, 0, 1)
		clear(dd[(g.oh-1)*d.wp+g.ow : d.l])
		return
	}
	clear(dd[:d.l])
	if g.sw == 1 {
		rowCopy(dd, g.sh*d.wp, dy, g.ow, g.ow, 0, g.oh)
		return
	}
	for oy := 0; oy < g.oh; oy++ {
		src, dst := dy[oy*g.ow:][:g.ow], dd[oy*g.sh*d.wp:]
		for ox, v := range src {
			dst[ox*g.sw] = v
		}
	}
}

// rowCopy is copyRows for either float type.
func rowCopy[T float](dst []T, ldd int, src []T, lds, w, gap, rows int) {
	if is32[T]() {
		copyRows(f32s(dst), ldd, f32s(src), lds, w, gap, rows)
		return
	}
	for r := 0; r < rows; r++ {
		d := dst[r*ldd : r*ldd+w+gap]
		copy(d, src[r*lds:r*lds+w])
		clear(d[w:])
	}
}

// tapsFMA sets y to bias + Σ_t w[t]·x[off[t]:][:len(y)], plus y's own
// values when add: the taps of one kernel row after another in one pass
// over y on AVX-512, one multiply-add pass a tap elsewhere. off ascends.
func tapsFMA[T float](y, x []T, off []int, w []T, bias T, add bool) {
	if len(y) == 0 {
		return
	}
	if last := off[len(off)-1]; last+len(y) > len(x) || len(w) < len(off) {
		panic(fmt.Sprintf("ops: tapsFMA of %d over %d taps (last at %d) outside x (%d) or w (%d)", len(y), len(off), last, len(x), len(w)))
	}
	if is32[T]() && useAVX512 {
		a := 0
		if add {
			a = 1
		}
		tapsFMA32(f32p(y), len(y), f32p(x), &off[0], f32p(w), len(off), a, float32(bias))
		return
	}
	switch {
	case !add:
		for i := range y {
			y[i] = bias
		}
	case bias != 0:
		for i := range y {
			y[i] += bias
		}
	}
	for t, o := range off {
		axpy(y, x[o:], w[t])
	}
}

// tapsDot adds Σ_i d[i]·x[off[t]+i] to acc[t] for every tap t: four taps
// a pass over d on AVX-512, one elsewhere. off ascends.
func tapsDot[T float](acc []float64, d, x []T, off []int) {
	if len(d) == 0 {
		return
	}
	if last := off[len(off)-1]; last+len(d) > len(x) {
		panic(fmt.Sprintf("ops: tapsDot of %d over %d taps (last at %d) outside x (%d)", len(d), len(off), last, len(x)))
	}
	if is32[T]() && useAVX512 {
		var o4 [4]int
		var out [4]float32
		for t := 0; t < len(off); t += 4 {
			k := min(4, len(off)-t)
			copy(o4[:], off[t:t+k])
			for i := k; i < 4; i++ {
				o4[i] = off[t] // a repeat, its sum unused
			}
			tapsDot4x32(f32p(d), len(d), f32p(x), &o4[0], &out[0])
			for i := range k {
				acc[t+i] += float64(out[i])
			}
		}
		return
	}
	for t, o := range off {
		acc[t] += dot(d, x[o:])
	}
}

// axpy is y += a·x over y.
func axpy[T float](y, x []T, a T) {
	if len(y) == 0 {
		return
	}
	x = x[:len(y)]
	if is32[T]() {
		if useAVX512 {
			lincomb32(f32p(y), f32p(x), f32p(y), len(y), 1, float32(a), 0)
			return
		}
		if useAVX2 {
			lincomb32AVX2(f32p(y), f32p(x), f32p(y), len(y), 1, float32(a), 0)
			return
		}
	}
	for i, v := range x {
		y[i] += a * v
	}
}

// dot is Σ x·y over x, in float64 (float32 lanes on the vector kernels).
func dot[T float](x, y []T) float64 {
	if len(x) == 0 {
		return 0
	}
	y = y[:len(x)]
	if is32[T]() {
		if useAVX512 {
			_, s := dotSums32(f32p(x), f32p(y), len(x))
			return float64(s)
		}
		if useAVX2 {
			_, s := dotSums32AVX2(f32p(x), f32p(y), len(x))
			return float64(s)
		}
	}
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i] * y[i])
		s1 += float64(x[i+1] * y[i+1])
		s2 += float64(x[i+2] * y[i+2])
		s3 += float64(x[i+3] * y[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i] * y[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// directScratch is one worker's buffers ([]T each).
type directScratch struct{ p, wide any }

// directJob is a direct convolution pass split over workers: pieces of
// (image, group) tasks (forward, input gradient) or output channels
// (weight gradient).
type directJob[T float] struct {
	d        *directGeom
	kind     int // directFwd, directDx, directDw
	a, b, c  []T // fwd: x, w, y; dx: dy, w, dx; dw: x, dy, dw
	bias     []T
	tasks    int // (image, group) pairs, or output channels
	per      int // tasks a piece
	ws       []directScratch
	pr       partRun
	acc      [][]float64 // dw: a worker's sums of one group
	accBytes int
}

const (
	directFwd = iota
	directDx
	directDw
)

func (j *directJob[T]) run(i, n int) {
	s := &j.ws[i]
	pieces := (j.tasks + j.per - 1) / j.per
	for p := j.pr.claim(); p < pieces; p = j.pr.claim() {
		for t := p * j.per; t < min(j.tasks, (p+1)*j.per); t++ {
			switch j.kind {
			case directFwd:
				j.forward(s, t/j.d.groups, t%j.d.groups)
			case directDx:
				j.inputGrad(s, t/j.d.groups, t%j.d.groups)
			default:
				j.weightGrad(s, i, t)
			}
		}
	}
}

// planes returns s's padded planes (one a channel of a group) and dense
// output plane.
func (j *directJob[T]) planes(s *directScratch) (p, dense []T) {
	return scratch[T](&s.p, j.d.cg*j.d.plane), scratch[T](&s.wide, j.d.l)
}

// padGroup pads image n's input channels of group k (of x) into p.
func (j *directJob[T]) padGroup(x, p []T, n, k int) {
	d, g := j.d, &j.d.g
	hw := g.h * g.w
	for c := 0; c < d.cg; c++ {
		pad(d, x[(n*g.c+k*d.cg+c)*hw:][:hw], p[c*d.plane:][:d.plane])
	}
}

// forward writes image n's output channels of group k.
func (j *directJob[T]) forward(s *directScratch, n, k int) {
	d, g := j.d, &j.d.g
	cs, ohw := d.plane, g.ohw()
	p, yw := j.planes(s)
	j.padGroup(j.a, p, n, k)
	for o := 0; o < d.og; o++ {
		oc := k*d.og + o
		var b T
		if j.bias != nil {
			b = j.bias[oc]
		}
		w := j.b[oc*d.cg*d.khw:][:d.cg*d.khw]
		for c := 0; c < d.cg; c++ {
			if c > 0 {
				b = 0
			}
			tapsFMA(yw, p[c*cs:][:cs], d.off, w[c*d.khw:], b, c > 0)
		}
		narrow(d, yw, j.c[(n*g.oc+oc)*ohw:][:ohw])
	}
}

// inputGrad writes image n's input-gradient channels of group k: in
// the padded layout, dxp[j] = Σ_o Σ_t w[o, t]·dy'_o[j - off[t]] over the
// image's rows, with dy' in dz after maxOff zeros (so that every run
// starts inside it: dz[j + roff[t]]).
func (j *directJob[T]) inputGrad(s *directScratch, n, k int) {
	d, g := j.d, &j.d.g
	cs, hw, ohw := d.plane, g.h*g.w, g.ohw()
	p := scratch[T](&s.p, d.cg*cs)
	dz := scratch[T](&s.wide, d.maxOff+d.plane)
	clear(dz[:d.maxOff])
	clear(dz[d.maxOff+d.l:])
	rows := g.ph * d.wp // the image's rows of the padded plane: [rows, rows+H·wp)
	for o := 0; o < d.og; o++ {
		oc := k*d.og + o
		spread(d, j.a[(n*g.oc+oc)*ohw:][:ohw], dz[d.maxOff:])
		w := j.b[oc*d.cg*d.khw:][:d.cg*d.khw]
		for c := 0; c < d.cg; c++ {
			tapsFMA(p[c*cs+rows:][:g.h*d.wp], dz[rows:], d.roff, w[c*d.khw:], 0, o > 0)
		}
	}
	for c := 0; c < d.cg; c++ {
		ci := k*d.cg + c
		unpad(d, p[c*cs:][:cs], j.c[(n*g.c+ci)*hw:][:hw])
	}
}

// weightGrad writes output channel oc's weight gradient, summed over the
// images in order. (A task an output channel rather than a group, so that
// an ungrouped convolution splits too; its group's input is padded again
// for each.)
func (j *directJob[T]) weightGrad(s *directScratch, worker, oc int) {
	d, g := j.d, &j.d.g
	cs, ohw, nw := d.plane, g.ohw(), d.cg*d.khw
	p, dyw := j.planes(s)
	acc := j.acc[worker][:nw]
	clear(acc)
	for n := 0; n < g.n; n++ {
		j.padGroup(j.a, p, n, oc/d.og)
		spread(d, j.b[(n*g.oc+oc)*ohw:][:ohw], dyw)
		for c := 0; c < d.cg; c++ {
			tapsDot(acc[c*d.khw:][:d.khw], dyw[:d.l], p[c*cs:][:cs], d.off)
		}
	}
	dw := j.c[oc*nw:][:nw]
	for i, v := range acc {
		dw[i] = T(v)
	}
}

// runDirect runs job kind of d over workers.
func runDirect[T float](j *directJob[T], ws *[]directScratch, d *directGeom, kind int, a, b, c, bias []T) {
	j.d, j.kind, j.a, j.b, j.c, j.bias = d, kind, a, b, c, bias
	j.tasks, j.per = d.g.n*d.groups, max(1, (1<<15)/max(1, d.macsG))
	macs := d.g.n * d.groups * d.macsG
	if kind == directDw {
		j.tasks, j.per = d.g.oc, 1
	}
	pieces := (j.tasks + j.per - 1) / j.per
	w := imageSplit(pieces, macs)
	j.ws = scratchDirect(ws, w)
	if kind == directDw {
		nw := d.cg * d.khw
		for len(j.acc) < w {
			j.acc = append(j.acc, nil)
		}
		for i := range w {
			j.acc[i] = grow(j.acc[i], nw)
		}
	}
	if w == 1 {
		j.pr.next.Store(0)
		j.run(0, 1)
	} else {
		runParts(j, w, &j.pr)
		// As readyScratch: for a worker that claimed no piece yet.
		var p, wide any
		for i := range j.ws {
			p, wide = largerOf(p, j.ws[i].p), largerOf(wide, j.ws[i].wide)
		}
		for i := range j.ws {
			growLike(&j.ws[i].p, p)
			growLike(&j.ws[i].wide, wide)
		}
	}
	j.a, j.b, j.c, j.bias = nil, nil, nil, nil
}

func scratchDirect(ws *[]directScratch, n int) []directScratch {
	if len(*ws) < n {
		*ws = append(*ws, make([]directScratch, n-len(*ws))...)
	}
	return (*ws)[:n]
}

// directConvOp is the forward of a direct grouped convolution.
type directConvOp struct {
	base
	convSig
	d   *directGeom
	out buffer
	ws  []directScratch
	job any // *directJob[T]
}

func (op *directConvOp) wShape() tensor.Shape {
	return tensor.Shape{op.d.g.oc, op.d.cg, op.d.g.kh, op.d.g.kw}
}

func (op *directConvOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.d.g.yShape(), nil
}

func (op *directConvOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[1].Dtype()
	g := &op.d.g
	x, w, b, err := op.args(op, v, g.xShape(), op.wShape(), g.oc)
	if err != nil {
		return nil, err
	}
	y := op.out.get(dt, g.yShape())
	if dt == tensor.Float32 {
		directDo[float32](&op.job, &op.ws, op.d, directFwd, x, w, y, b)
	} else {
		directDo[float64](&op.job, &op.ws, op.d, directFwd, x, w, y, b)
	}
	return y, nil
}

func directDo[T float](job *any, ws *[]directScratch, d *directGeom, kind int, a, b, c, bias *tensor.Dense) {
	var bs []T
	if bias != nil {
		bs = data[T](bias)
	}
	runDirect(jobFor[directJob[T]](job), ws, d, kind, data[T](a), data[T](b), data[T](c), bs)
}

func (op *directConvOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	res := make(G.Nodes, len(inputs))
	var err error
	if !op.noInputGrad {
		if res[0], err = apply(&directGradOp{base: newBase("Conv2dGradInput"), fwd: op}, grad, inputs[1]); err != nil {
			return nil, err
		}
	}
	if res[1], err = apply(&directGradOp{base: newBase("Conv2dGradWeight"), fwd: op, weight: true}, inputs[0], grad); err != nil {
		return nil, err
	}
	if op.bias {
		if res[2], err = apply(&channelSumOp{base: newBase("Conv2dGradBias"), shape: op.d.g.yShape()}, grad); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// directGradOp is a direct convolution's input gradient, (dy, w) → dx, or
// with weight its weight gradient, (x, dy) → dw.
type directGradOp struct {
	base
	noDiff
	fwd    *directConvOp
	weight bool
	out    buffer
	ws     []directScratch
	job    any
}

func (op *directGradOp) Arity() int         { return 2 }
func (op *directGradOp) Type() hm.Type      { return fnType(4, 4, 4) }
func (op *directGradOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *directGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	if op.weight {
		return op.fwd.wShape(), nil
	}
	return op.fwd.d.g.xShape(), nil
}

func (op *directGradOp) Do(v ...G.Value) (G.Value, error) {
	g := &op.fwd.d.g
	dt := v[0].Dtype()
	var a, b, out *tensor.Dense
	var err error
	kind := directDx
	if op.weight {
		kind = directDw
		if a, err = dense(op, "input", v[0], dt, g.xShape()); err != nil {
			return nil, err
		}
		if b, err = dense(op, "output gradient", v[1], dt, g.yShape()); err != nil {
			return nil, err
		}
		out = op.out.get(dt, op.fwd.wShape())
	} else {
		if a, err = dense(op, "output gradient", v[0], dt, g.yShape()); err != nil {
			return nil, err
		}
		if b, err = dense(op, "weight", v[1], dt, op.fwd.wShape()); err != nil {
			return nil, err
		}
		out = op.out.get(dt, g.xShape())
	}
	if dt == tensor.Float32 {
		directDo[float32](&op.job, &op.ws, op.fwd.d, kind, a, b, out, nil)
	} else {
		directDo[float64](&op.job, &op.ws, op.fwd.d, kind, a, b, out, nil)
	}
	return out, nil
}

// UsePreallocDo is Do writing into p when p fits (see buffer.prealloc).
func (op *directGradOp) UsePreallocDo(p G.Value, v ...G.Value) (G.Value, error) {
	op.out.prealloc(p)
	defer op.out.release()
	return op.Do(v...)
}
