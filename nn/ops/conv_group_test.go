package ops

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

// convGrads runs Σ conv(x, w, b)·r and returns the output and the
// gradients of x, w and b.
func convGrads(t *testing.T, x, w, b, r *tensor.Dense, o Conv2dOpts) (y, dx, dw, db []float64) {
	t.Helper()
	return layerGrads(t, x, w, b, r, func(x, w, b *G.Node) (*G.Node, error) { return Conv2d(x, w, b, o) })
}

// layerGrads runs Σ layer(x, w, b)·r and returns the output and the
// gradients of x, w and b.
func layerGrads(t *testing.T, x, w, b, r *tensor.Dense, layer func(x, w, b *G.Node) (*G.Node, error)) (y, dx, dw, db []float64) {
	t.Helper()
	g := G.NewGraph()
	xn, wn, bn := node(g, x, "x"), node(g, w, "w"), node(g, b, "b")
	out, err := layer(xn, wn, bn)
	if err != nil {
		t.Fatal(err)
	}
	rn := node(g, r, "r")
	if _, err := G.Grad(G.Must(G.Sum(G.Must(G.HadamardProd(out, rn)))), xn, wn, bn); err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	grad := func(n *G.Node) []float64 {
		v, err := n.Grad()
		if err != nil {
			t.Fatal(err)
		}
		return vals(v)
	}
	return vals(out.Value()), grad(xn), grad(wn), grad(bn)
}

// channels returns group k's cg of c channels (inner values each) of the
// n items of v, as a tensor of shape.
func channels(dt tensor.Dtype, v []float64, n, c, cg, k, inner int, shape ...int) *tensor.Dense {
	var out []float64
	for i := 0; i < n; i++ {
		out = append(out, v[(i*c+k*cg)*inner:][:cg*inner]...)
	}
	return fromF64(dt, out, shape...)
}

// TestGroupedConvIsConvPerGroup checks a grouped convolution's output and
// its input, weight and bias gradients against the ungrouped Conv2d run on
// each group's channels alone, in both dtypes, for geometries that take
// the kernels' different paths per group (float32 3x3 same with 16
// channels a group: Winograd on AVX-512; strided: the phase-split input
// gradient; 1x1 stride 2; depthwise), and with enough images for the
// weight gradient's kept padding to be read.
func TestGroupedConvIsConvPerGroup(t *testing.T) {
	for _, c := range []struct {
		n, c, oc, h, w, k, groups int
		o                         Conv2dOpts
	}{
		{6, 32, 32, 8, 8, 3, 2, Conv2dOpts{Padding: [2]int{1, 1}}},
		{3, 8, 16, 9, 7, 3, 8, Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
		{4, 12, 6, 6, 6, 1, 3, Conv2dOpts{Stride: [2]int{2, 2}}},
		{2, 6, 6, 5, 5, 3, 6, Conv2dOpts{Dilation: [2]int{2, 1}, Padding: [2]int{2, 1}}},
		// The direct path (conv_direct.go): depthwise with a depth
		// multiplier, 2 to 4 channels a group, large kernels, strides
		// 2 and 3 on either axis with dilation, no padding, and enough
		// (image, group) pairs for several workers.
		{3, 4, 8, 7, 9, 5, 4, Conv2dOpts{Stride: [2]int{1, 2}, Padding: [2]int{2, 2}}},
		{2, 6, 6, 11, 10, 7, 3, Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{3, 3}}},
		{2, 8, 12, 10, 11, 3, 2, Conv2dOpts{Stride: [2]int{3, 1}, Dilation: [2]int{1, 2}, Padding: [2]int{0, 2}}},
		{2, 3, 6, 6, 6, 2, 3, Conv2dOpts{}},
		{5, 16, 16, 16, 16, 3, 16, Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
		{4, 24, 24, 15, 13, 3, 24, Conv2dOpts{Padding: [2]int{1, 1}}},
	} {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			name := fmt.Sprintf("%v %d groups %v", tensor.Shape{c.n, c.c, c.h, c.w}, c.groups, dt)
			cg, ocg := c.c/c.groups, c.oc/c.groups
			x := randT(dt, 1, -1, 1, c.n, c.c, c.h, c.w)
			w := randT(dt, 2, -1, 1, c.oc, cg, c.k, c.k)
			b := randT(dt, 3, -1, 1, c.oc)
			o := c.o
			def := func(v int) int { return max(v, 1) }
			oh := (c.h+2*o.Padding[0]-def(o.Dilation[0])*(c.k-1)-1)/def(o.Stride[0]) + 1
			ow := (c.w+2*o.Padding[1]-def(o.Dilation[1])*(c.k-1)-1)/def(o.Stride[1]) + 1
			r := randT(dt, 4, -1, 1, c.n, c.oc, oh, ow)
			o.Groups = c.groups
			y, dx, dw, db := convGrads(t, x, w, b, r, o)
			o.Groups = 1
			tl := tol(dt)
			for k := 0; k < c.groups; k++ {
				yk, dxk, dwk, dbk := convGrads(t,
					channels(dt, vals(x), c.n, c.c, cg, k, c.h*c.w, c.n, cg, c.h, c.w),
					channels(dt, vals(w), 1, c.oc, ocg, k, cg*c.k*c.k, ocg, cg, c.k, c.k),
					channels(dt, vals(b), 1, c.oc, ocg, k, 1, ocg),
					channels(dt, vals(r), c.n, c.oc, ocg, k, oh*ow, c.n, ocg, oh, ow), o)
				what := fmt.Sprintf("%s group %d", name, k)
				assertClose(t, what+" output", vals(channels(dt, y, c.n, c.oc, ocg, k, oh*ow, c.n*ocg*oh*ow)), yk, tl)
				assertClose(t, what+" input gradient", vals(channels(dt, dx, c.n, c.c, cg, k, c.h*c.w, c.n*cg*c.h*c.w)), dxk, tl)
				assertClose(t, what+" weight gradient", vals(channels(dt, dw, 1, c.oc, ocg, k, cg*c.k*c.k, ocg*cg*c.k*c.k)), dwk, tl)
				assertClose(t, what+" bias gradient", vals(channels(dt, db, 1, c.oc, ocg, k, 1, ocg)), dbk, tl)
			}
		}
	}
}

// TestGroupedConvErrors: a weight that does not fit the groups is an error
// naming the shapes and the groups.
func TestGroupedConvErrors(t *testing.T) {
	for _, c := range []struct {
		x, w   tensor.Shape
		groups int
		want   string
	}{
		{tensor.Shape{1, 6, 5, 5}, tensor.Shape{4, 3, 3, 3}, 4, "Conv2d groups is 4 but the input has 6 channels and the weight (4, 3, 3, 3) 4 outputs: both must be multiples of the groups"},
		{tensor.Shape{1, 6, 5, 5}, tensor.Shape{4, 2, 3, 3}, 2, "weight (4, 2, 3, 3) in 2 groups wants 4 (2 a group)"},
		{tensor.Shape{1, 6, 5, 5}, tensor.Shape{4, 6, 3, 3}, -1, "Conv2d groups is -1: want 1 or more"},
	} {
		g := G.NewGraph()
		x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(c.x...), G.WithName("x"))
		w := G.NewTensor(g, tensor.Float32, 4, G.WithShape(c.w...), G.WithName("w"))
		_, err := Conv2d(x, w, nil, Conv2dOpts{Groups: c.groups})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v * %v in %d groups: %v, want %q", c.x, c.w, c.groups, err, c.want)
		}
	}
}

// TestGroupedConvNoInputGrad: without the input gradient (a first layer),
// a grouped convolution's weight gradient is the one computed with it.
func TestGroupedConvNoInputGrad(t *testing.T) {
	x := randT(tensor.Float64, 1, -1, 1, 2, 4, 5, 5)
	w := randT(tensor.Float64, 2, -1, 1, 6, 2, 3, 3)
	b := randT(tensor.Float64, 3, -1, 1, 6)
	r := randT(tensor.Float64, 4, -1, 1, 2, 6, 5, 5)
	o := Conv2dOpts{Padding: [2]int{1, 1}, Groups: 2}
	_, _, want, _ := convGrads(t, x, w, b, r, o)

	g := G.NewGraph()
	xn, wn, bn := node(g, x, "x"), node(g, w, "w"), node(g, b, "b")
	o.NoInputGrad = true
	y, err := Conv2d(xn, wn, bn, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := G.Grad(G.Must(G.Sum(G.Must(G.HadamardProd(y, node(g, r, "r"))))), wn); err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	dw, _ := wn.Grad()
	assertClose(t, "weight gradient without the input's", vals(dw), want, 1e-12)
	if d := y.Op().(G.SDOp).DiffWRT(3); !slices.Equal(d, []bool{false, true, true}) {
		t.Errorf("DiffWRT %v: the input gets a gradient", d)
	}
}

// TestGroupedConvGrad checks a grouped and a depthwise convolution's
// gradients numerically, in both dtypes.
func TestGroupedConvGrad(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, c := range []struct {
			c, oc, groups int
			o             Conv2dOpts
		}{
			{4, 6, 2, Conv2dOpts{Padding: [2]int{1, 1}}},
			{3, 6, 3, Conv2dOpts{Stride: [2]int{2, 1}, Padding: [2]int{1, 0}}},
		} {
			o := c.o
			o.Groups = c.groups
			ins := []*tensor.Dense{randT(dt, 1, -1, 1, 2, c.c, 5, 4), randT(dt, 2, -1, 1, c.oc, c.c/c.groups, 3, 3), randT(dt, 3, -1, 1, c.oc)}
			check(t, gradcheck.Case{Name: fmt.Sprintf("%d groups/%v", c.groups, dt), Inputs: ins, Seed: 9,
				Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return Conv2d(in[0], in[1], in[2], o) }})
		}
	}
}
