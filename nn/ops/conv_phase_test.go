package ops

import (
	"fmt"
	"math"
	"testing"

	"gorgonia.org/tensor"
)

// phaseCases are input gradients the phase split takes (conv_phase.go):
// input channels a multiple of 8, not 1x1 stride 1, not a same() one that
// runs as a convolution of dy, a tap in every phase. Odd sizes, strides
// and dilations that differ by axis, inputs whose last rows or columns no
// output reads, grids that end in a partial 32-column tile.
var phaseCases = []convCase{
	{n: 3, c: 8, h: 14, w: 14, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}}, // resnet8's stage entries
	{n: 3, c: 16, h: 28, w: 28, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
	{n: 2, c: 8, h: 7, w: 9, oc: 5, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
	{n: 2, c: 8, h: 6, w: 7, oc: 4, kh: 3, kw: 3},                                      // stride 1, no padding
	{n: 2, c: 8, h: 8, w: 9, oc: 4, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}}}, // stride 2, no padding
	{n: 2, c: 8, h: 9, w: 10, oc: 4, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 3}, Padding: [2]int{2, 1}}},
	{n: 2, c: 16, h: 11, w: 11, oc: 5, kh: 5, kw: 5, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{2, 2}}},
	{n: 2, c: 8, h: 1, w: 5, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}}, // a phase with no rows
	{n: 2, c: 8, h: 2, w: 2, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}}, // one output pixel
	{n: 5, c: 8, h: 5, w: 6, oc: 24, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},                      // same, OC > 2C
	{n: 2, c: 8, h: 10, w: 11, oc: 4, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{3, 2}, Padding: [2]int{1, 0}, Dilation: [2]int{2, 1}}},
	{n: 3, c: 8, h: 5, w: 9, oc: 4, kh: 1, kw: 3, o: Conv2dOpts{Stride: [2]int{1, 2}}},                        // columns read left of dy, no row below it
	{n: 2, c: 8, h: 3, w: 7, oc: 4, kh: 1, kw: 2, o: Conv2dOpts{Padding: [2]int{1, 0}}},                       // the same, and no tail otherwise
	{n: 9, c: 8, h: 7, w: 7, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}}, // 9 images: a short last chunk
}

// sparseCases are strided ones with a phase no tap reaches (most of dx is
// zero): col2im's.
var sparseCases = []convCase{
	{n: 3, c: 8, h: 9, w: 8, oc: 16, kh: 1, kw: 1, o: Conv2dOpts{Stride: [2]int{2, 2}}}, // the shortcut
	{n: 2, c: 8, h: 9, w: 7, oc: 3, kh: 1, kw: 1, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
	{n: 2, c: 8, h: 10, w: 11, oc: 3, kh: 2, kw: 2, o: Conv2dOpts{Stride: [2]int{3, 3}}},
	{n: 2, c: 8, h: 9, w: 10, oc: 4, kh: 3, kw: 2, o: Conv2dOpts{Stride: [2]int{2, 3}, Padding: [2]int{2, 1}, Dilation: [2]int{2, 1}}},
	{n: 2, c: 8, h: 9, w: 9, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{2, 0}, Dilation: [2]int{2, 2}}},
}

// convGradInputRef is the input gradient by the definition: every output
// gradient element times every weight it met, added into the input it read.
func convGradInputRef(c convCase, dy, w []float64) []float64 {
	sh, sw, ph, pw, dh, dw, oh, ow := c.geometry()
	dx := make([]float64, c.n*c.c*c.h*c.w)
	for n := 0; n < c.n; n++ {
		for o := 0; o < c.oc; o++ {
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					d := dy[((n*c.oc+o)*oh+oy)*ow+ox]
					for ch := 0; ch < c.c; ch++ {
						for ki := 0; ki < c.kh; ki++ {
							for kj := 0; kj < c.kw; kj++ {
								iy, ix := oy*sh-ph+ki*dh, ox*sw-pw+kj*dw
								if iy >= 0 && iy < c.h && ix >= 0 && ix < c.w {
									dx[((n*c.c+ch)*c.h+iy)*c.w+ix] += d * w[((o*c.c+ch)*c.kh+ki)*c.kw+kj]
								}
							}
						}
					}
				}
			}
		}
	}
	return dx
}

// TestConvGradInputPhases checks the phase-split input gradient (and
// col2im's on sparseCases, which it leaves to col2im) against the
// definition on every case, with several images a multiply and one, and
// that it writes every element of dx (the output buffer is poisoned with
// NaN between two runs), on each kernel tier the CPU has (AVX-512, AVX2).
func TestConvGradInputPhases(t *testing.T) { forEachKernelTier(t, testConvGradInputPhases) }

func testConvGradInputPhases(t *testing.T) {
	old := convColumns
	defer func() { convColumns = old }()
	for _, cols := range []int{40, 1, 512} {
		convColumns = cols
		for i, c := range append(phaseCases, sparseCases...) {
			mode := dxPhased
			if i >= len(phaseCases) {
				mode = dxCol2im
			}
			t.Run(fmt.Sprintf("columns=%d/%v", cols, c), func(t *testing.T) {
				_, gi, _, in, dy := convOps(t, c, tensor.Float32)
				v, err := gi.Do(dy, in[1])
				if err != nil {
					t.Fatal(err)
				}
				for i, d := range v.Data().([]float32) {
					v.Data().([]float32)[i] = d * float32(math.NaN())
				}
				if v, err = gi.Do(dy, in[1]); err != nil {
					t.Fatal(err)
				}
				if got := gi.job.(*convDxJob[float32]).mode; got != mode {
					t.Fatalf("mode %d, want %d", got, mode)
				}
				want := convGradInputRef(c, vals(dy), vals(in[1]))
				assertClose(t, "dx", vals(v), want, 1e-5)
			})
		}
	}
}

// Warm, the phase split allocates nothing, with image workers or without.
// (TestConv2dImageWorkersDoNotAllocate covers convCases; some of
// phaseCases' other passes multiply on package blas, which allocates.)
func TestConvGradInputPhasesDoNotAllocate(t *testing.T) {
	if !mmKernels() {
		t.Skip("no AVX-512 or AVX2 kernels: no phase split")
	}
	defer func(w func() int, gr int) { imageWorkers, imageGrain = w, gr }(imageWorkers, imageGrain)
	imageGrain = 1
	for _, workers := range []int{1, 3} {
		SetImageWorkers(workers)
		for _, c := range phaseCases {
			_, gi, _, in, dy := convOps(t, c, tensor.Float32)
			do := func() {
				if _, err := gi.Do(dy, in[1]); err != nil {
					t.Fatal(err)
				}
			}
			do()
			if a := testing.AllocsPerRun(5, do); a != 0 && !raceBuild {
				t.Errorf("workers=%d %v: %.0f allocations per run", workers, c, a)
			}
		}
	}
}

// Planes too large for the kernels' 32-bit row offsets leave the input
// gradient to col2im rather than wrap an offset.
func TestConvGradInputPhasesTooLarge(t *testing.T) {
	geom := func(hw int) *convGeom {
		o := (hw+2-3)/2 + 1
		return &convGeom{n: 1, c: 8, h: hw, w: hw, oc: 8, kh: 3, kw: 3, sh: 2, sw: 2, ph: 1, pw: 1, dh: 1, dw: 1, oh: o, ow: o}
	}
	var p dxPhases
	var ty, tx [][]phaseTap
	if !p.build(geom(14), make([]float32, 8*8*9), &ty, &tx) {
		t.Fatal("14x14: no plan")
	}
	// 20,000² padded pixels a plane, 8 channels: 3.2e9 elements.
	if p.build(geom(40000), nil, &ty, &tx) {
		t.Fatalf("40000x40000: a plan with %d elements a channel, 8 channels: offsets past 2^31", p.pstride)
	}
}
