package ops

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A grouped convolution (Conv2dOpts.Groups > 1, PyTorch's groups) is one op
// that runs, group by group, the ungrouped convolution of this package on
// the group's channels: its forward, input gradient and weight gradient
// ops, each with every path it has (implicit, Winograd, phases), on the
// group's input channels gathered into a contiguous [N, C/G, H, W] buffer
// and its rows of the weight. The group's output is scattered into the
// output's channels. The weight gradient reuses the forward's gathered
// input (and the padding the forward kept of it). A depthwise convolution
// (G = C) would be C small convolutions, each multiply's inner dimension
// only KH·KW: groups of four input channels or fewer take the direct path
// (conv_direct.go) instead. The
// gathered copies (input, output gradient) and the per-group results cost
// about twice the layer's activations in memory again.

// groupConv holds one group's ungrouped ops and its gathered operands.
type groupConv struct {
	fwd    *convOp
	dx     *convGradInputOp
	dw     *convGradWeightOp
	x, w   buffer // the group's input channels, weight rows
	b      buffer // the group's bias
	dy, wd buffer // backward: the group's output gradient, weight rows
}

type groupConvOp struct {
	base
	convSig
	g      convGeom // whole: c is the input's channels, oc the output's
	groups int
	parts  []groupConv
	out    buffer
}

// newGroupConv returns the grouped convolution of geometry g (whole
// input and output channels) in groups.
func newGroupConv(g convGeom, groups int, bias, noInputGrad bool) *groupConvOp {
	op := &groupConvOp{base: newBase("Conv2d"), g: g, groups: groups, convSig: convSig{bias: bias, noInputGrad: noInputGrad}}
	gg := g
	gg.c, gg.oc = g.c/groups, g.oc/groups
	gg.idx, gg.sub, gg.spread = nil, nil, nil
	gg.buildIndex()
	op.parts = make([]groupConv, groups)
	for k := range op.parts {
		p := &op.parts[k]
		p.fwd = &convOp{base: newBase("Conv2d"), g: gg, convSig: op.convSig}
		p.dx = &convGradInputOp{base: newBase("Conv2dGradInput"), g: gg}
		p.dw = &convGradWeightOp{base: newBase("Conv2dGradWeight"), g: gg, fwd: p.fwd}
	}
	return op
}

// group is one group's geometry.
func (op *groupConvOp) group() *convGeom { return &op.parts[0].fwd.g }

func (op *groupConvOp) wShape() tensor.Shape {
	return tensor.Shape{op.g.oc, op.g.c / op.groups, op.g.kh, op.g.kw}
}

func (op *groupConvOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.g.yShape(), nil }

func (op *groupConvOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[1].Dtype()
	x, w, b, err := op.args(op, v, op.g.xShape(), op.wShape(), op.g.oc)
	if err != nil {
		return nil, err
	}
	y := op.out.get(dt, op.g.yShape())
	gg := op.group()
	for k := range op.parts {
		p := &op.parts[k]
		xg := p.x.get(dt, gg.xShape())
		wg := p.w.get(dt, gg.wShape())
		moveGroup(dt, x, xg, op.g.n, op.g.c, gg.c, k, op.g.h*op.g.w, true)
		moveGroup(dt, w, wg, 1, op.g.oc, gg.oc, k, gg.ckk(), true)
		args := []G.Value{xg, wg}
		if op.bias {
			bg := p.b.get(dt, tensor.Shape{gg.oc})
			moveGroup(dt, b, bg, 1, op.g.oc, gg.oc, k, 1, true)
			args = append(args, bg)
		}
		yg, err := p.fwd.Do(args...)
		if err != nil {
			return nil, err
		}
		moveGroup(dt, y, yg.(*tensor.Dense), op.g.n, op.g.oc, gg.oc, k, op.g.ohw(), false)
	}
	return y, nil
}

// moveGroup copies group k's channels (cg of c per each of n items, inner
// values a channel) from whole into part (gather) or back (scatter).
func moveGroup(dt tensor.Dtype, whole, part *tensor.Dense, n, c, cg, k, inner int, gather bool) {
	if dt == tensor.Float32 {
		moveGroupT(data[float32](whole), data[float32](part), n, c, cg, k, inner, gather)
	} else {
		moveGroupT(data[float64](whole), data[float64](part), n, c, cg, k, inner, gather)
	}
}

func moveGroupT[T float](whole, part []T, n, c, cg, k, inner int, gather bool) {
	m := cg * inner
	for i := 0; i < n; i++ {
		w := whole[(i*c+k*cg)*inner:][:m]
		p := part[i*m:][:m]
		if gather {
			copy(p, w)
		} else {
			copy(w, p)
		}
	}
}

func (op *groupConvOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	res := make(G.Nodes, len(inputs))
	var err error
	if !op.noInputGrad {
		if res[0], err = apply(&groupConvGradOp{base: newBase("Conv2dGradInput"), fwd: op}, grad, inputs[1]); err != nil {
			return nil, err
		}
	}
	for k := range op.parts {
		op.parts[k].fwd.pad.keep = true
	}
	if res[1], err = apply(&groupConvGradOp{base: newBase("Conv2dGradWeight"), fwd: op, weight: true}, inputs[0], grad); err != nil {
		return nil, err
	}
	if op.bias {
		if res[2], err = apply(&channelSumOp{base: newBase("Conv2dGradBias"), shape: op.g.yShape()}, grad); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// groupConvGradOp is a grouped convolution's input gradient, (dy, w) → dx,
// or with weight its weight gradient, (x, dy) → dw, group by group. The
// weight gradient reads the forward's gathered input of each group
// (taking x as input orders it after the forward that filled them).
type groupConvGradOp struct {
	base
	noDiff
	fwd    *groupConvOp
	weight bool
	out    buffer
}

func (op *groupConvGradOp) Arity() int         { return 2 }
func (op *groupConvGradOp) Type() hm.Type      { return fnType(4, 4, 4) }
func (op *groupConvGradOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *groupConvGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	if op.weight {
		return op.fwd.wShape(), nil
	}
	return op.fwd.g.xShape(), nil
}

func (op *groupConvGradOp) Do(v ...G.Value) (G.Value, error) {
	f := op.fwd
	g, gg := &f.g, f.group()
	dt := v[0].Dtype()
	var dy, w *tensor.Dense
	var err error
	if op.weight {
		if _, err = dense(op, "input", v[0], dt, g.xShape()); err != nil {
			return nil, err
		}
		dy, err = dense(op, "output gradient", v[1], dt, g.yShape())
	} else {
		if dy, err = dense(op, "output gradient", v[0], dt, g.yShape()); err != nil {
			return nil, err
		}
		w, err = dense(op, "weight", v[1], dt, f.wShape())
	}
	if err != nil {
		return nil, err
	}
	var out *tensor.Dense
	if op.weight {
		out = op.out.get(dt, f.wShape())
	} else {
		out = op.out.get(dt, g.xShape())
	}
	for k := range f.parts {
		p := &f.parts[k]
		dyg := p.dy.get(dt, gg.yShape())
		moveGroup(dt, dy, dyg, g.n, g.oc, gg.oc, k, g.ohw(), true)
		if op.weight {
			xg := p.x.get(dt, gg.xShape())
			dwg, err := p.dw.Do(xg, dyg)
			if err != nil {
				return nil, err
			}
			moveGroup(dt, out, dwg.(*tensor.Dense), 1, g.oc, gg.oc, k, gg.ckk(), false)
			continue
		}
		wg := p.wd.get(dt, gg.wShape())
		moveGroup(dt, w, wg, 1, g.oc, gg.oc, k, gg.ckk(), true)
		dxg, err := p.dx.Do(dyg, wg)
		if err != nil {
			return nil, fmt.Errorf("%v: group %d: %w", op, k, err)
		}
		moveGroup(dt, out, dxg.(*tensor.Dense), g.n, g.c, gg.c, k, g.h*g.w, false)
	}
	return out, nil
}
