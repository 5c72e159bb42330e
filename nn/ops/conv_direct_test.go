package ops

import (
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestDirectConvWorkersMatchSerial: the direct path's forward, input and
// weight gradients are bit for bit the same on one worker and on three
// (grain 1, so that every pass splits), and a depthwise, a 2-channel
// grouped and (float32 on AVX-512) a 3-channel ungrouped convolution with
// 6 outputs do take it.
func TestDirectConvWorkersMatchSerial(t *testing.T) {
	defer func(w func() int, gr int) { imageWorkers, imageGrain = w, gr }(imageWorkers, imageGrain)
	imageGrain = 1
	for _, c := range []struct {
		n, c, oc, hw, k, groups int
		o                       Conv2dOpts
	}{
		{7, 12, 12, 9, 3, 12, Conv2dOpts{Padding: [2]int{1, 1}}},
		{5, 8, 16, 10, 5, 4, Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{2, 2}}},
		{6, 3, 6, 11, 5, 1, Conv2dOpts{Padding: [2]int{1, 1}}}, // ungrouped: float32 on AVX-512
	} {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			name := fmt.Sprintf("%d groups of %d channels, %v", c.groups, c.c/c.groups, dt)
			o := c.o
			o.Groups = c.groups
			g := G.NewGraph()
			xn := G.NewTensor(g, dt, 4, G.WithShape(c.n, c.c, c.hw, c.hw), G.WithName("x"))
			wn := G.NewTensor(g, dt, 4, G.WithShape(c.oc, c.c/c.groups, c.k, c.k), G.WithName("w"))
			if y, err := Conv2d(xn, wn, nil, o); err != nil {
				t.Fatal(err)
			} else if _, ok := y.Op().(*directConvOp); !ok && (c.groups > 1 || dt == tensor.Float32 && useAVX512) {
				t.Fatalf("%s: op %v, want the direct path", name, y.Op())
			}
			x := randT(dt, 1, -1, 1, c.n, c.c, c.hw, c.hw)
			w := randT(dt, 2, -1, 1, c.oc, c.c/c.groups, c.k, c.k)
			b := randT(dt, 3, -1, 1, c.oc)
			oh := (c.hw+2*o.Padding[0]-c.k)/max(1, o.Stride[0]) + 1
			r := randT(dt, 4, -1, 1, c.n, c.oc, oh, oh)
			SetImageWorkers(1)
			y1, dx1, dw1, _ := convGrads(t, x, w, b, r, o)
			SetImageWorkers(3)
			y3, dx3, dw3, _ := convGrads(t, x, w, b, r, o)
			sameBits(t, name+" output", y3, y1)
			sameBits(t, name+" input gradient", dx3, dx1)
			sameBits(t, name+" weight gradient", dw3, dw1)
		}
	}
	SetImageWorkers(0)
}

// TestTapsKernels checks tapsFMA and tapsDot (the AVX-512 kernels where
// the CPU has them) against plain float64 sums, for lengths around the
// kernels' blocks (16, and 64 in tapsFMA's main loop), 1 to 9 taps, with
// and without adding to y.
func TestTapsKernels(t *testing.T) {
	off := []int{0, 1, 2, 30, 31, 32, 60, 61, 62}
	for _, n := range []int{1, 15, 16, 17, 63, 64, 65, 130} {
		for taps := 1; taps <= len(off); taps++ {
			x := vals(randT(tensor.Float32, uint64(n), -1, 1, n+off[taps-1]))
			w := vals(randT(tensor.Float32, 2, -1, 1, taps))
			d := vals(randT(tensor.Float32, 3, -1, 1, n))
			x32, w32, d32 := f32of(x), f32of(w), f32of(d)
			for _, add := range []bool{false, true} {
				y := append([]float32(nil), d32...)
				tapsFMA(y, x32, off[:taps], w32, 0.5, add)
				for i := range n {
					want := 0.5
					if add {
						want += d[i]
					}
					for k := range taps {
						want += w[k] * x[i+off[k]]
					}
					if math.Abs(float64(y[i])-want) > 1e-5 {
						t.Fatalf("tapsFMA n=%d taps=%d add=%v: y[%d] = %v, want %v", n, taps, add, i, y[i], want)
					}
				}
			}
			acc := make([]float64, taps)
			tapsDot(acc, d32, x32, off[:taps])
			for k := range taps {
				var want float64
				for i := range n {
					want += d[i] * x[i+off[k]]
				}
				if math.Abs(acc[k]-want) > 1e-4 {
					t.Fatalf("tapsDot n=%d taps=%d: tap %d = %v, want %v", n, taps, k, acc[k], want)
				}
			}
		}
	}
}

func f32of(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// Once warm, the direct path's forward, input and weight gradients
// allocate nothing, on one worker and on three.
func TestDirectConvDoesNotAllocate(t *testing.T) {
	defer func(w func() int, gr int) { imageWorkers, imageGrain = w, gr }(imageWorkers, imageGrain)
	imageGrain = 1
	for _, workers := range []int{1, 3} {
		SetImageWorkers(workers)
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			g := G.NewGraph()
			x := randT(dt, 1, -1, 1, 4, 6, 9, 9)
			w := randT(dt, 2, -1, 1, 12, 2, 3, 3)
			b := randT(dt, 3, -1, 1, 12)
			y, err := Conv2d(node(g, x, "x"), node(g, w, "w"), node(g, b, "b"), Conv2dOpts{Stride: [2]int{2, 1}, Padding: [2]int{1, 1}, Groups: 3})
			if err != nil {
				t.Fatal(err)
			}
			op := y.Op().(*directConvOp)
			dy := randT(dt, 4, -1, 1, op.d.g.yShape()...)
			gi := &directGradOp{base: newBase("Conv2dGradInput"), fwd: op}
			gw := &directGradOp{base: newBase("Conv2dGradWeight"), fwd: op, weight: true}
			for _, r := range []struct {
				what string
				f    func(...G.Value) (G.Value, error)
				v    []G.Value
			}{{"forward", op.Do, []G.Value{x, w, b}}, {"dx", gi.Do, []G.Value{dy, w}}, {"dw", gw.Do, []G.Value{x, dy}}} {
				if _, err := r.f(r.v...); err != nil {
					t.Fatal(err)
				}
				if a := testing.AllocsPerRun(5, func() { _, _ = r.f(r.v...) }); a != 0 && !raceBuild {
					t.Errorf("%v, %d workers, %s: %.0f allocations per run", dt, workers, r.what, a)
				}
			}
		}
	}
	SetImageWorkers(0)
}
