package ops

import (
	"fmt"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

type convCase struct {
	n, c, h, w, oc, kh, kw int
	o                      Conv2dOpts
	bias                   bool
}

func (c convCase) String() string {
	return fmt.Sprintf("x%dx%dx%dx%d_w%dx%dx%d_s%v_p%v_d%v_b%v", c.n, c.c, c.h, c.w, c.oc, c.kh, c.kw, c.o.Stride, c.o.Padding, c.o.Dilation, c.bias)
}

var convCases = []convCase{
	{n: 1, c: 1, h: 5, w: 5, oc: 1, kh: 3, kw: 3},
	{n: 2, c: 3, h: 7, w: 6, oc: 4, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}, bias: true},
	{n: 3, c: 2, h: 7, w: 7, oc: 3, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
	{n: 2, c: 2, h: 8, w: 9, oc: 2, kh: 3, kw: 2, o: Conv2dOpts{Stride: [2]int{2, 3}, Padding: [2]int{2, 1}, Dilation: [2]int{2, 1}}, bias: true},
	{n: 2, c: 3, h: 5, w: 4, oc: 4, kh: 1, kw: 1, bias: true},                          // 1x1 fast path
	{n: 3, c: 2, h: 5, w: 5, oc: 3, kh: 1, kw: 1, o: Conv2dOpts{Stride: [2]int{2, 2}}}, // shortcut conv
	{n: 1, c: 2, h: 3, w: 3, oc: 2, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}}},
	{n: 5, c: 2, h: 4, w: 4, oc: 3, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}, bias: true}, // chunks of 3 and 2 at 40 columns
	{n: 2, c: 1, h: 5, w: 4, oc: 3, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},             // same, input gradient through col2im
	// Channel counts the float32 kernels of sgemm.go take (rows a multiple
	// of 8): implicit (same), through the column matrix (strided), dilated
	// implicit with an input gradient on the BLAS (4 rows), a stem.
	{n: 3, c: 8, h: 6, w: 5, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}, bias: true},
	{n: 2, c: 8, h: 7, w: 7, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
	{n: 2, c: 4, h: 6, w: 7, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}}},
	{n: 2, c: 1, h: 5, w: 6, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
	{n: 5, c: 8, h: 4, w: 4, oc: 8, kh: 3, kw: 5, o: Conv2dOpts{Padding: [2]int{1, 2}}, bias: true},
	// Strided and dilated on the implicit path's phase planes.
	{n: 2, c: 3, h: 8, w: 9, oc: 4, kh: 3, kw: 2, o: Conv2dOpts{Stride: [2]int{2, 3}, Padding: [2]int{2, 1}, Dilation: [2]int{2, 1}}},
	{n: 3, c: 2, h: 9, w: 8, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 3}, Padding: [2]int{1, 2}, Dilation: [2]int{1, 2}}, bias: true},
	{n: 2, c: 2, h: 6, w: 6, oc: 8, kh: 3, kw: 3},
	// Few input channels, output channels not a multiple of 8, stride 1,
	// not same-padded: float32 on AVX-512 takes the direct path
	// (conv_direct.go), as the first case above does.
	{n: 3, c: 1, h: 10, w: 9, oc: 6, kh: 5, kw: 5, bias: true},
	{n: 2, c: 3, h: 8, w: 7, oc: 5, kh: 5, kw: 3, o: Conv2dOpts{Padding: [2]int{3, 1}, Dilation: [2]int{2, 1}}},
	{n: 2, c: 2, h: 1, w: 12, oc: 3, kh: 1, kw: 5, o: Conv2dOpts{Padding: [2]int{0, 1}}, bias: true}, // a 1-D signal
	{n: 2, c: 1, h: 1, w: 7, oc: 2, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 0}}},
}

// geometry is c's strides, paddings, dilations (zero values filled in) and
// output size, computed plainly for the references.
func (c convCase) geometry() (sh, sw, ph, pw, dh, dw, oh, ow int) {
	def := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	sh, sw = def(c.o.Stride[0], 1), def(c.o.Stride[1], 1)
	dh, dw = def(c.o.Dilation[0], 1), def(c.o.Dilation[1], 1)
	ph, pw = c.o.Padding[0], c.o.Padding[1]
	oh = (c.h+2*ph-dh*(c.kh-1)-1)/sh + 1
	ow = (c.w+2*pw-dw*(c.kw-1)-1)/sw + 1
	return
}

// convRef is a direct 7-loop convolution.
func convRef(c convCase, x, w, b []float64) []float64 {
	sh, sw, ph, pw, dh, dw, oh, ow := c.geometry()
	y := make([]float64, c.n*c.oc*oh*ow)
	for n := 0; n < c.n; n++ {
		for o := 0; o < c.oc; o++ {
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					s := 0.0
					if b != nil {
						s = b[o]
					}
					for ch := 0; ch < c.c; ch++ {
						for ki := 0; ki < c.kh; ki++ {
							for kj := 0; kj < c.kw; kj++ {
								iy, ix := oy*sh-ph+ki*dh, ox*sw-pw+kj*dw
								if iy >= 0 && iy < c.h && ix >= 0 && ix < c.w {
									s += x[((n*c.c+ch)*c.h+iy)*c.w+ix] * w[((o*c.c+ch)*c.kh+ki)*c.kw+kj]
								}
							}
						}
					}
					y[((n*c.oc+o)*oh+oy)*ow+ox] = s
				}
			}
		}
	}
	return y
}

func (c convCase) inputs(dt tensor.Dtype) []*tensor.Dense {
	ins := []*tensor.Dense{randT(dt, 1, -1, 1, c.n, c.c, c.h, c.w), randT(dt, 2, -1, 1, c.oc, c.c, c.kh, c.kw)}
	if c.bias {
		ins = append(ins, randT(dt, 3, -1, 1, c.oc))
	}
	return ins
}

func (c convCase) build(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
	var b *G.Node
	if c.bias {
		b = in[2]
	}
	return Conv2d(in[0], in[1], b, c.o)
}

// withColumns runs f with the chunk width set so that several images (and a
// remainder) share one multiply, then with one image per multiply; each on
// the implicit path wherever the kernels take it (conv_implicit.go), then
// never on it.
func withColumns(t *testing.T, f func(t *testing.T)) {
	old, oldWaste, oldOut := convColumns, implicitWaste, implicitStridedOut
	defer func() { convColumns, implicitWaste, implicitStridedOut = old, oldWaste, oldOut }()
	implicitStridedOut = 0
	for _, cols := range []int{40, 1} {
		for _, waste := range []float64{1, -1} {
			convColumns, implicitWaste = cols, waste
			t.Run(fmt.Sprintf("columns=%d/implicit=%v", cols, waste > 0), f)
		}
	}
}

func TestConv2dForward(t *testing.T) {
	withColumns(t, func(t *testing.T) {
		for _, dt := range dtypes {
			for _, c := range convCases {
				ins := c.inputs(dt)
				var b []float64
				if c.bias {
					b = vals(ins[2])
				}
				got := run(t, c.build, ins...)
				assertClose(t, c.String(), got, convRef(c, vals(ins[0]), vals(ins[1]), b), 10*tol(dt))
			}
		}
	})
}

func TestConv2dGrad(t *testing.T) {
	withColumns(t, func(t *testing.T) {
		for _, dt := range dtypes {
			for _, c := range convCases {
				check(t, gradcheck.Case{Name: c.String() + "/" + dt.String(), Inputs: c.inputs(dt), Seed: 9, Build: c.build})
			}
		}
	})
}

func TestConv2dNoInputGrad(t *testing.T) {
	c := convCases[1]
	c.o.NoInputGrad = true
	check(t, gradcheck.Case{Name: "NoInputGrad", Inputs: c.inputs(tensor.Float64), NoGrad: []int{0}, Seed: 9, Build: c.build})
}

func TestConv2dErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(2, 3, 4, 4))
	for _, c := range []struct {
		w    []int
		o    Conv2dOpts
		want string
	}{
		{[]int{8, 2, 3, 3}, Conv2dOpts{}, "Conv2d input has shape (2, 3, 4, 4) with 3 channels, but weight (8, 2, 3, 3) wants 2"},
		{[]int{8, 3, 5, 5}, Conv2dOpts{}, "Conv2d input (2, 3, 4, 4) is too small for a 5x5 kernel with padding (0, 0) and dilation (1, 1): each spatial side needs at least 5x5 after padding"},
		{[]int{8, 3, 3, 3}, Conv2dOpts{Dilation: [2]int{2, 2}}, "too small for a 3x3 kernel with padding (0, 0) and dilation (2, 2)"},
		{[]int{8, 3, 3, 3}, Conv2dOpts{Stride: [2]int{-1, 1}}, "stride and dilation must be ≥ 1"},
		{[]int{8, 3, 3}, Conv2dOpts{}, "Conv2d weight has shape (8, 3, 3): want [out channels, in channels, kh, kw]"},
	} {
		w := G.NewTensor(g, tensor.Float32, len(c.w), G.WithShape(c.w...))
		if _, err := Conv2d(x, w, nil, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("weight %v %+v: err = %v, want %q", c.w, c.o, err, c.want)
		}
	}
}
