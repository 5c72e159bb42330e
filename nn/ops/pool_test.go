package ops

import (
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

type poolCase struct {
	shape []int
	o     PoolOpts
}

var poolCases = []poolCase{
	{[]int{1, 1, 4, 4}, PoolOpts{Kernel: [2]int{2, 2}}},
	{[]int{2, 3, 5, 7}, PoolOpts{Kernel: [2]int{3, 3}, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
	{[]int{2, 2, 6, 5}, PoolOpts{Kernel: [2]int{2, 3}, Stride: [2]int{1, 2}, Padding: [2]int{1, 0}}},
	{[]int{1, 2, 5, 5}, PoolOpts{Kernel: [2]int{3, 3}, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}, ExcludePad: true}},
}

// poolRef computes max or average pooling directly.
func poolRef(c poolCase, x []float64, isMax bool) []float64 {
	n, ch, h, w := c.shape[0], c.shape[1], c.shape[2], c.shape[3]
	kh, kw, ph, pw := c.o.Kernel[0], c.o.Kernel[1], c.o.Padding[0], c.o.Padding[1]
	sh, sw := c.o.Stride[0], c.o.Stride[1]
	if sh == 0 {
		sh, sw = kh, kw
	}
	oh, ow := (h+2*ph-kh)/sh+1, (w+2*pw-kw)/sw+1
	var y []float64
	for p := 0; p < n*ch; p++ {
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				best, sum, cnt, inside := math.Inf(-1), 0.0, 0, 0
				for ki := 0; ki < kh; ki++ {
					for kj := 0; kj < kw; kj++ {
						iy, ix := oy*sh-ph+ki, ox*sw-pw+kj
						if iy < h+ph && ix < w+pw {
							cnt++ // inside the padded image
						}
						if iy < 0 || iy >= h || ix < 0 || ix >= w {
							continue
						}
						inside++
						v := x[p*h*w+iy*w+ix]
						best = math.Max(best, v)
						sum += v
					}
				}
				switch {
				case isMax:
					y = append(y, best)
				case c.o.ExcludePad:
					y = append(y, sum/float64(inside))
				default:
					y = append(y, sum/float64(cnt))
				}
			}
		}
	}
	return y
}

func TestPoolForward(t *testing.T) {
	for _, dt := range dtypes {
		for _, c := range poolCases {
			x := spreadT(dt, 1, -1, 1, c.shape...)
			got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return MaxPool2d(in[0], c.o) }, x)
			assertClose(t, fmt.Sprintf("max %v", c), got, poolRef(c, vals(x), true), 0)
			got = run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return AvgPool2d(in[0], c.o) }, x)
			assertClose(t, fmt.Sprintf("avg %v", c), got, poolRef(c, vals(x), false), tol(dt))
		}
	}
}

func TestPoolGrad(t *testing.T) {
	for _, dt := range dtypes {
		for _, c := range poolCases {
			check(t, gradcheck.Case{Name: fmt.Sprintf("MaxPool2d%v/%v", c, dt), Seed: 2,
				Inputs: []*tensor.Dense{spreadT(dt, 1, -1, 1, c.shape...)},
				Build:  func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return MaxPool2d(in[0], c.o) }})
			check(t, gradcheck.Case{Name: fmt.Sprintf("AvgPool2d%v/%v", c, dt), Seed: 2,
				Inputs: []*tensor.Dense{randT(dt, 1, -1, 1, c.shape...)},
				Build:  func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return AvgPool2d(in[0], c.o) }})
		}
	}
}

func TestPoolErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(2, 3, 3, 3))
	for _, c := range []struct {
		o    PoolOpts
		want string
	}{
		{PoolOpts{Kernel: [2]int{4, 4}}, "MaxPool2d input (2, 3, 3, 3) is too small for a 4x4 window with padding (0, 0)"},
		{PoolOpts{Kernel: [2]int{2, 2}, Padding: [2]int{2, 0}}, "padding at most half the kernel"},
		{PoolOpts{}, "kernel and stride must be ≥ 1"},
	} {
		if _, err := MaxPool2d(x, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.o, err, c.want)
		}
	}
}

func TestGlobalAvgPool2d(t *testing.T) {
	for _, dt := range dtypes {
		x := randT(dt, 1, -1, 1, 2, 3, 4, 5)
		got := run(t, func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return GlobalAvgPool2d(in[0]) }, x)
		xv := vals(x)
		want := make([]float64, 6)
		for p := range want {
			for _, v := range xv[p*20 : (p+1)*20] {
				want[p] += v / 20
			}
		}
		assertClose(t, "gap", got, want, tol(dt))
		for _, s := range [][]int{{1, 1, 1, 1}, {2, 3, 4, 5}, {3, 2, 7, 7}} {
			check(t, gradcheck.Case{Name: fmt.Sprintf("GlobalAvgPool2d%v/%v", s, dt), Seed: 3,
				Inputs: []*tensor.Dense{randT(dt, 2, -1, 1, s...)},
				Build:  func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) { return GlobalAvgPool2d(in[0]) }})
		}
	}
}

// Gorgonia v0.9.17's GlobalAveragePool2D cannot be differentiated; ours can
// (TestGlobalAvgPool2d). If Grad starts to succeed, the defect is fixed
// upstream.
func TestGorgoniaGlobalAveragePoolDefect(t *testing.T) {
	g := G.NewGraph()
	x := node(g, randT(tensor.Float64, 1, -1, 1, 2, 3, 4, 4), "x")
	y, err := G.GlobalAveragePool2D(x)
	if err != nil {
		t.Fatal(err)
	}
	s, err := SumAll(y)
	if err != nil {
		t.Fatal(err)
	}
	err = func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		_, err = G.Grad(s, x)
		return err
	}()
	if err == nil {
		t.Fatal("Grad through Gorgonia's GlobalAveragePool2D now works: the defect is fixed upstream")
	}
	t.Logf("Gorgonia's GlobalAveragePool2D: %v", err)
}

// The 2x2 stride-2 max pooling loop (maxPool2) gives the general loop's
// maxima and indices, bit for bit: ties keep the first of the window in
// row order, the first NaN wins, an all -∞ window points at its first
// element; odd sizes leave the last row and column out.
func TestMaxPool2MatchesAnyWindow(t *testing.T) {
	special := []float64{math.NaN(), math.Inf(-1), math.Inf(1), 0, math.Copysign(0, -1), 0.5, 0.5}
	for _, hw := range [][2]int{{4, 4}, {5, 7}, {6, 3}, {2, 2}} {
		g := poolGeom{n: 1, c: 1, h: hw[0], w: hw[1], kh: 2, kw: 2, sh: 2, sw: 2, oh: hw[0] / 2, ow: hw[1] / 2}
		if !g.pool2() {
			t.Fatalf("%v: not the 2x2 path", hw)
		}
		for seed := range 300 {
			x := make([]float64, g.h*g.w)
			for i := range x {
				// Mostly values from a small set (ties, zeros of both
				// signs, infinities, NaN), some distinct ones.
				if v := (seed*31 + i*17 + i*i*7) % 11; v < len(special) {
					x[i] = special[v]
				} else {
					x[i] = float64(v) - 9
				}
			}
			if seed%3 == 0 {
				for i := range x {
					x[i] = math.Inf(-1)
				}
				x[(seed/3)%len(x)] = math.NaN()
			}
			ohw := g.oh * g.ow
			want, got := make([]float64, ohw), make([]float64, ohw)
			wantArg, gotArg := make([]int32, ohw), make([]int32, ohw)
			maxPoolPlane(&g, x, want, wantArg)
			maxPool2(&g, x, got, gotArg)
			for i := range want {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) || gotArg[i] != wantArg[i] {
					t.Fatalf("%v seed %d output %d: 2x2 loop %v at %d, general loop %v at %d (input %v)", hw, seed, i, got[i], gotArg[i], want[i], wantArg[i], x)
				}
			}
		}
	}
}
