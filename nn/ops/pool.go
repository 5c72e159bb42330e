package ops

import (
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// PoolOpts are the window of MaxPool2d and AvgPool2d. A zero Stride means
// the kernel size (PyTorch's default); padding must be at most half the
// kernel.
type PoolOpts struct {
	Kernel, Stride, Padding [2]int // (height, width)
	// ExcludePad leaves padded positions out of AvgPool2d's divisor
	// (PyTorch's count_include_pad=False); by default they count.
	ExcludePad bool
	// CeilMode rounds the output size up rather than down (PyTorch's
	// ceil_mode=True), so a last partial window is kept, as long as it
	// starts inside the input or its left padding (PyTorch's rule). Such a
	// window is cut at the input's edge (AvgPool2d's divisor at the far
	// padding too: count_include_pad counts only padding it covers).
	CeilMode bool
}

type poolGeom struct {
	n, c, h, w     int
	kh, kw, sh, sw int
	ph, pw, oh, ow int
}

func (g *poolGeom) xShape() tensor.Shape { return tensor.Shape{g.n, g.c, g.h, g.w} }
func (g *poolGeom) yShape() tensor.Shape { return tensor.Shape{g.n, g.c, g.oh, g.ow} }

func newPoolGeom(kind string, x *G.Node, o PoolOpts) (poolGeom, error) {
	if err := checkFloat(kind+" input", x); err != nil {
		return poolGeom{}, err
	}
	xs := x.Shape()
	if len(xs) != 4 {
		return poolGeom{}, fmt.Errorf("%s input has shape %v: want [batch, channels, height, width]", kind, xs)
	}
	g := poolGeom{n: xs[0], c: xs[1], h: xs[2], w: xs[3], kh: o.Kernel[0], kw: o.Kernel[1],
		sh: o.Stride[0], sw: o.Stride[1], ph: o.Padding[0], pw: o.Padding[1]}
	if g.sh == 0 {
		g.sh = g.kh
	}
	if g.sw == 0 {
		g.sw = g.kw
	}
	if g.kh < 1 || g.kw < 1 || g.sh < 1 || g.sw < 1 || g.ph < 0 || g.pw < 0 || 2*g.ph > g.kh || 2*g.pw > g.kw {
		return g, fmt.Errorf("%s kernel %v, stride %v, padding %v: kernel and stride must be ≥ 1 and padding at most half the kernel", kind, o.Kernel, o.Stride, o.Padding)
	}
	if g.h+2*g.ph < g.kh || g.w+2*g.pw < g.kw {
		return g, fmt.Errorf("%s input %v is too small for a %dx%d window with padding (%d, %d)", kind, xs, g.kh, g.kw, g.ph, g.pw)
	}
	g.oh = poolOut(g.h, g.kh, g.sh, g.ph, o.CeilMode)
	g.ow = poolOut(g.w, g.kw, g.sw, g.pw, o.CeilMode)
	return g, nil
}

// poolOut is the output size along one axis, as PyTorch's
// pooling_output_shape (dilation 1): with ceil, the size rounded up, less
// one when the last window would start past the input and its left
// padding.
func poolOut(in, k, stride, pad int, ceil bool) int {
	span := in + 2*pad - k
	if !ceil {
		return span/stride + 1
	}
	out := (span+stride-1)/stride + 1
	if (out-1)*stride >= in+pad {
		out--
	}
	return out
}

// MaxPool2d takes the maximum over each window of x [N, C, H, W] (padding
// counts as -∞), as PyTorch's max_pool2d (ceil_mode as o.CeilMode).
func MaxPool2d(x *G.Node, o PoolOpts) (*G.Node, error) {
	g, err := newPoolGeom("MaxPool2d", x, o)
	if err != nil {
		return nil, err
	}
	return apply(&maxPoolOp{base: newBase("MaxPool2d"), g: g}, x)
}

type maxPoolOp struct {
	base
	g      poolGeom
	out    buffer
	argmax []int32 // per output element, the index of its maximum in its input plane
}

func (op *maxPoolOp) Arity() int                                     { return 1 }
func (op *maxPoolOp) Type() hm.Type                                  { return fnType(4, 4) }
func (op *maxPoolOp) DiffWRT(int) []bool                             { return []bool{true} }
func (op *maxPoolOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.g.yShape(), nil }

func (op *maxPoolOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	x, err := dense(op, "input", v[0], dt, op.g.xShape())
	if err != nil {
		return nil, err
	}
	y := op.out.get(dt, op.g.yShape())
	op.argmax = grow(op.argmax, op.g.yShape().TotalSize())
	if dt == tensor.Float32 {
		poolPar(loopMaxPool, &op.g, data[float32](x), data[float32](y), op.argmax, nil)
	} else {
		poolPar(loopMaxPool, &op.g, data[float64](x), data[float64](y), op.argmax, nil)
	}
	return y, nil
}

// poolPar runs a pooling loop (kind: loopMaxPool, loopMaxPoolGrad,
// loopAvgPool or loopAvgPoolGrad) from a to b over every plane, the planes
// split between the loop workers when they are large (each plane is done
// whole by one goroutine, in the serial order: the same bits).
func poolPar[T float](kind loopKind, g *poolGeom, a, b []T, arg []int32, div []float64) {
	planes := g.n * g.c
	if w := workers(planes, g.h*g.w); w > 1 {
		parallelLoop(kind, w, planes, a, nil, b, loopArgs{pool: g, arg: arg, d: div})
		return
	}
	switch kind {
	case loopMaxPool:
		maxPool(g, a, b, arg, 0, planes)
	case loopMaxPoolGrad:
		maxPoolGrad(g, a, b, arg, 0, planes)
	case loopAvgPool:
		avgPool(g, div, a, b, 0, planes)
	case loopAvgPoolGrad:
		avgPoolGrad(g, div, a, b, 0, planes)
	}
}

// pool2 reports a 2x2 window of stride 2 without padding whose windows
// all lie inside the input (the commonest max pooling), which maxPool2
// takes.
func (g *poolGeom) pool2() bool {
	return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 &&
		2*g.oh <= g.h && 2*g.ow <= g.w
}

// maxPool writes planes [lo, hi)'s maxima and their indices.
func maxPool[T float](g *poolGeom, x, y []T, argmax []int32, lo, hi int) {
	hw, ohw := g.h*g.w, g.oh*g.ow
	two := g.pool2()
	for p := lo; p < hi; p++ {
		plane, out, arg := x[p*hw:(p+1)*hw], y[p*ohw:(p+1)*ohw], argmax[p*ohw:(p+1)*ohw]
		if two {
			maxPool2(g, plane, out, arg)
		} else {
			maxPoolPlane(g, plane, out, arg)
		}
	}
}

// maxPoolPlane is maxPool's loop for one plane of any window.
func maxPoolPlane[T float](g *poolGeom, plane, out []T, arg []int32) {
	for oy := 0; oy < g.oh; oy++ {
		y0 := oy*g.sh - g.ph
		ylo, yhi := max(y0, 0), min(y0+g.kh, g.h)
		for ox := 0; ox < g.ow; ox++ {
			x0 := ox*g.sw - g.pw
			xlo, xhi := max(x0, 0), min(x0+g.kw, g.w)
			best, bi := T(math.Inf(-1)), int32(ylo*g.w+xlo)
			for iy := ylo; iy < yhi; iy++ {
				row := plane[iy*g.w:]
				for ix := xlo; ix < xhi; ix++ {
					// NaN propagates, as in PyTorch.
					if v := row[ix]; v > best || v != v {
						best, bi = v, int32(iy*g.w+ix)
						if v != v {
							goto done
						}
					}
				}
			}
		done:
			out[oy*g.ow+ox], arg[oy*g.ow+ox] = best, bi
		}
	}
}

// maxPool2 is maxPool's loop for one plane of a 2x2 window of stride 2
// (pool2): the same maximum and index, the window read in the same order
// (the first of equal maxima, the first NaN). Which of four values is the
// largest is a coin toss on a network's activations, so nothing here
// branches on it (a branch mispredicted every other window made the
// general loop cost about 20 ns an output): the maximum m is Go's max
// (NaN when any is), and the index that of the first value equal to m,
// or NaN, found from a bit mask.
func maxPool2[T float](g *poolGeom, plane, out []T, arg []int32) {
	w, ow := g.w, g.ow
	for oy := 0; oy < g.oh; oy++ {
		top := 2 * oy * w
		r0 := plane[top:][:2*ow]
		r1 := plane[top+w:][:2*ow]
		o, a := out[oy*ow:][:ow], arg[oy*ow:][:ow]
		for ox := range o {
			i := 2 * ox
			v0, v1, v2, v3 := r0[i], r0[i+1], r1[i], r1[i+1]
			m := max(max(v0, v1), max(v2, v3))
			mask := (b2u(v0 == m) | b2u(v0 != v0)) | (b2u(v1 == m)|b2u(v1 != v1))<<1 |
				(b2u(v2 == m)|b2u(v2 != v2))<<2 | 8
			j := bits.TrailingZeros8(mask) // 3 when none of the first three
			k := i + int(j&1) + int(j>>1)*w
			o[ox], a[ox] = plane[top+k], int32(top+k)
		}
	}
}

// b2u is 1 for true, 0 for false, without a branch.
func b2u(b bool) uint8 { return *(*uint8)(unsafe.Pointer(&b)) }

func (op *maxPoolOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := apply(&maxPoolGradOp{base: newBase("MaxPool2dGrad"), fwd: op}, output, grad)
	return G.Nodes{d}, err
}

// maxPoolGradOp routes each output gradient to its window's maximum:
// (y, dy) → [N, C, H, W], from the forward op's argmax cache.
type maxPoolGradOp struct {
	base
	noDiff
	fwd *maxPoolOp
	out buffer
}

func (op *maxPoolGradOp) Arity() int         { return 2 }
func (op *maxPoolGradOp) Type() hm.Type      { return fnType(4, 4, 4) }
func (op *maxPoolGradOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *maxPoolGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.fwd.g.xShape(), nil
}

func (op *maxPoolGradOp) Do(v ...G.Value) (G.Value, error) {
	g := &op.fwd.g
	dt := v[1].Dtype()
	dy, err := dense(op, "output gradient", v[1], dt, g.yShape())
	if err != nil {
		return nil, err
	}
	dx := op.out.get(dt, g.xShape())
	if dt == tensor.Float32 {
		poolPar(loopMaxPoolGrad, g, data[float32](dy), data[float32](dx), op.fwd.argmax, nil)
	} else {
		poolPar(loopMaxPoolGrad, g, data[float64](dy), data[float64](dx), op.fwd.argmax, nil)
	}
	return dx, nil
}

// maxPoolGrad writes planes [lo, hi) of dx: each output gradient added to
// its window's maximum.
func maxPoolGrad[T float](g *poolGeom, dy, dx []T, argmax []int32, lo, hi int) {
	hw, ohw := g.h*g.w, g.oh*g.ow
	clear(dx[lo*hw : hi*hw])
	for p := lo; p < hi; p++ {
		plane, arg := dx[p*hw:(p+1)*hw], argmax[p*ohw:(p+1)*ohw]
		for i, d := range dy[p*ohw : (p+1)*ohw] {
			plane[arg[i]] += d
		}
	}
}

// AvgPool2d averages each window of x [N, C, H, W], as PyTorch's avg_pool2d
// (ceil_mode as o.CeilMode).
func AvgPool2d(x *G.Node, o PoolOpts) (*G.Node, error) {
	g, err := newPoolGeom("AvgPool2d", x, o)
	if err != nil {
		return nil, err
	}
	op := &avgPoolOp{base: newBase("AvgPool2d"), g: g}
	// The divisor of each output position, fixed by the geometry.
	op.div = make([]float64, g.oh*g.ow)
	for oy := 0; oy < g.oh; oy++ {
		for ox := 0; ox < g.ow; ox++ {
			y0, x0 := oy*g.sh-g.ph, ox*g.sw-g.pw
			cnt := g.kh * g.kw
			if o.ExcludePad {
				cnt = (min(y0+g.kh, g.h) - max(y0, 0)) * (min(x0+g.kw, g.w) - max(x0, 0))
			} else {
				// Windows may hang past the padding only on the far side.
				cnt = (min(y0+g.kh, g.h+g.ph) - y0) * (min(x0+g.kw, g.w+g.pw) - x0)
			}
			op.div[oy*g.ow+ox] = 1 / float64(cnt)
		}
	}
	return apply(op, x)
}

type avgPoolOp struct {
	base
	g   poolGeom
	div []float64
	out buffer
}

func (op *avgPoolOp) Arity() int                                     { return 1 }
func (op *avgPoolOp) Type() hm.Type                                  { return fnType(4, 4) }
func (op *avgPoolOp) DiffWRT(int) []bool                             { return []bool{true} }
func (op *avgPoolOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.g.yShape(), nil }

func (op *avgPoolOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	x, err := dense(op, "input", v[0], dt, op.g.xShape())
	if err != nil {
		return nil, err
	}
	y := op.out.get(dt, op.g.yShape())
	if dt == tensor.Float32 {
		poolPar(loopAvgPool, &op.g, data[float32](x), data[float32](y), nil, op.div)
	} else {
		poolPar(loopAvgPool, &op.g, data[float64](x), data[float64](y), nil, op.div)
	}
	return y, nil
}

// avgPool writes planes [lo, hi)'s window averages.
func avgPool[T float](g *poolGeom, div []float64, x, y []T, lo, hi int) {
	hw, ohw := g.h*g.w, g.oh*g.ow
	for p := lo; p < hi; p++ {
		plane, out := x[p*hw:(p+1)*hw], y[p*ohw:(p+1)*ohw]
		for oy := 0; oy < g.oh; oy++ {
			y0 := oy*g.sh - g.ph
			ylo, yhi := max(y0, 0), min(y0+g.kh, g.h)
			for ox := 0; ox < g.ow; ox++ {
				x0 := ox*g.sw - g.pw
				xlo, xhi := max(x0, 0), min(x0+g.kw, g.w)
				var s T
				for iy := ylo; iy < yhi; iy++ {
					for _, v := range plane[iy*g.w+xlo : iy*g.w+xhi] {
						s += v
					}
				}
				out[oy*g.ow+ox] = s * T(div[oy*g.ow+ox])
			}
		}
	}
}

func (op *avgPoolOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := apply(&avgPoolGradOp{base: newBase("AvgPool2dGrad"), fwd: op}, grad)
	return G.Nodes{d}, err
}

// avgPoolGradOp spreads each output gradient evenly over its window:
// (dy) → [N, C, H, W].
type avgPoolGradOp struct {
	base
	noDiff
	fwd *avgPoolOp
	out buffer
}

func (op *avgPoolGradOp) Arity() int         { return 1 }
func (op *avgPoolGradOp) Type() hm.Type      { return fnType(4, 4) }
func (op *avgPoolGradOp) DiffWRT(int) []bool { return []bool{false} }
func (op *avgPoolGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.fwd.g.xShape(), nil
}

func (op *avgPoolGradOp) Do(v ...G.Value) (G.Value, error) {
	g := &op.fwd.g
	dt := v[0].Dtype()
	dy, err := dense(op, "output gradient", v[0], dt, g.yShape())
	if err != nil {
		return nil, err
	}
	dx := op.out.get(dt, g.xShape())
	if dt == tensor.Float32 {
		poolPar(loopAvgPoolGrad, g, data[float32](dy), data[float32](dx), nil, op.fwd.div)
	} else {
		poolPar(loopAvgPoolGrad, g, data[float64](dy), data[float64](dx), nil, op.fwd.div)
	}
	return dx, nil
}

// avgPoolGrad writes planes [lo, hi) of dx: each output gradient spread
// over its window.
func avgPoolGrad[T float](g *poolGeom, div []float64, dy, dx []T, lo, hi int) {
	hw, ohw := g.h*g.w, g.oh*g.ow
	clear(dx[lo*hw : hi*hw])
	for p := lo; p < hi; p++ {
		plane, d := dx[p*hw:(p+1)*hw], dy[p*ohw:(p+1)*ohw]
		for oy := 0; oy < g.oh; oy++ {
			y0 := oy*g.sh - g.ph
			ylo, yhi := max(y0, 0), min(y0+g.kh, g.h)
			for ox := 0; ox < g.ow; ox++ {
				x0 := ox*g.sw - g.pw
				xlo, xhi := max(x0, 0), min(x0+g.kw, g.w)
				v := d[oy*g.ow+ox] * T(div[oy*g.ow+ox])
				for iy := ylo; iy < yhi; iy++ {
					row := plane[iy*g.w+xlo : iy*g.w+xhi]
					for i := range row {
						row[i] += v
					}
				}
			}
		}
	}
}

// GlobalAvgPool2d averages x [N, C, H, W] over height and width into
// [N, C] (PyTorch's adaptive_avg_pool2d to 1x1, then flatten). It replaces
// Gorgonia v0.9.17's GlobalAveragePool2D, which has no gradient (Grad fails
// on it; DESIGN.md, known defects).
func GlobalAvgPool2d(x *G.Node) (*G.Node, error) {
	if err := checkFloat("GlobalAvgPool2d input", x); err != nil {
		return nil, err
	}
	xs := x.Shape()
	if len(xs) != 4 {
		return nil, fmt.Errorf("GlobalAvgPool2d input has shape %v: want [batch, channels, height, width]", xs)
	}
	return apply(&gapOp{base: newBase("GlobalAvgPool2d"), in: xs.Clone(), outS: tensor.Shape{xs[0], xs[1]}}, x)
}

type gapOp struct {
	base
	in, outS tensor.Shape
	out      buffer
}

func (op *gapOp) Arity() int                                     { return 1 }
func (op *gapOp) Type() hm.Type                                  { return fnType(2, 4) }
func (op *gapOp) DiffWRT(int) []bool                             { return []bool{true} }
func (op *gapOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.outS.Clone(), nil }

func (op *gapOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	x, err := dense(op, "input", v[0], dt, op.in)
	if err != nil {
		return nil, err
	}
	y := op.out.get(dt, op.outS)
	hw := op.in[2] * op.in[3]
	if dt == tensor.Float32 {
		gap(data[float32](x), data[float32](y), hw)
	} else {
		gap(data[float64](x), data[float64](y), hw)
	}
	return y, nil
}

func gap[T float](x, y []T, hw int) {
	for p := range y {
		y[p] = T(sum(x[p*hw:(p+1)*hw]) / float64(hw))
	}
}

func (op *gapOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := apply(&gapGradOp{base: newBase("GlobalAvgPool2dGrad"), fwd: op}, grad)
	return G.Nodes{d}, err
}

// gapGradOp spreads dy [N, C] evenly over each plane: → [N, C, H, W].
type gapGradOp struct {
	base
	noDiff
	fwd *gapOp
	out buffer
}

func (op *gapGradOp) Arity() int         { return 1 }
func (op *gapGradOp) Type() hm.Type      { return fnType(4, 2) }
func (op *gapGradOp) DiffWRT(int) []bool { return []bool{false} }
func (op *gapGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.fwd.in.Clone(), nil
}

func (op *gapGradOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	dy, err := dense(op, "output gradient", v[0], dt, op.fwd.outS)
	if err != nil {
		return nil, err
	}
	dx := op.out.get(dt, op.fwd.in)
	hw := op.fwd.in[2] * op.fwd.in[3]
	if dt == tensor.Float32 {
		gapGrad(data[float32](dy), data[float32](dx), hw)
	} else {
		gapGrad(data[float64](dy), data[float64](dx), hw)
	}
	return dx, nil
}

func gapGrad[T float](dy, dx []T, hw int) {
	inv := 1 / T(hw)
	for p, d := range dy {
		v := d * inv
		row := dx[p*hw : (p+1)*hw]
		for i := range row {
			row[i] = v
		}
	}
}
