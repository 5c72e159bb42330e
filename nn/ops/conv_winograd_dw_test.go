package ops

import (
	"fmt"
	"math"
	"testing"

	"gorgonia.org/tensor"
)

// The weight gradient of small images splits by channels (wgDwChanFits):
// resnet8's third stage (64x64 channels, 64 images of 7x7: one group of
// 256 tiles), two groups of which the second is short (70 images of 8x8:
// 256 and 24 tiles), unequal channels and images that leave part of a tile
// (5x6, 3x3). Each matches the plain loops within winogradTol of Σ|dy||x|,
// and gives the same bits on 1, 2, 3 and 4 image workers, with and without
// SetDeterministic: every value comes from one piece whose work depends on
// the geometry only.
func TestWinogradWeightGradByChannels(t *testing.T) {
	winogradForSmallCases(t)
	defer SetDeterministic(Deterministic())
	cases := []convCase{
		{n: 64, c: 64, h: 7, w: 7, oc: 64, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
		{n: 70, c: 16, h: 8, w: 8, oc: 24, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
		{n: 9, c: 24, h: 5, w: 6, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
		{n: 5, c: 16, h: 3, w: 3, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
	}
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			if c.n > 16 && testing.Short() {
				t.Skip("-short: the float64 reference loops of 64 images take minutes under emulation (.ci/run's qemu step)")
			}
			_, _, gw, in, dy := convOps(t, c, tensor.Float32)
			g := &gw.g
			if !winogradFits[float32](g) || !wgDwChanFits(g) {
				t.Fatalf("not on the Winograd path split by channels")
			}
			if gi, _ := wgDwChanGroup(g); c.n == 70 && gi >= c.n {
				t.Fatalf("one group of %d images: the case wants two", gi)
			}
			x, dyv := vals(in[0]), vals(dy)
			want, scale := dwRef(c, x, dyv, false), dwRef(c, x, dyv, true)
			var first []float64
			for _, det := range []bool{false, true} {
				SetDeterministic(det)
				for _, workers := range []int{1, 2, 3, 4} {
					_, _, dw := convPass(t, c, tensor.Float32, workers)
					if e := relErr(dw, want, scale); e > winogradTol || math.IsNaN(e) {
						t.Errorf("deterministic=%v workers=%d: error %.3g of Σ|dy||x|, want at most %g", det, workers, e, winogradTol)
					}
					if first == nil {
						first = dw
						continue
					}
					sameBits(t, fmt.Sprintf("deterministic=%v workers=%d dw", det, workers), dw, first)
				}
			}
		})
	}
}

// A weight gradient split by channels reads the padding its forward kept
// as it would pad the input again: the same bits either way, on one worker
// and on two.
func TestWinogradWeightGradByChannelsKeptPadding(t *testing.T) {
	winogradForSmallCases(t)
	defer func(w func() int, gr int) { imageWorkers, imageGrain = w, gr }(imageWorkers, imageGrain)
	imageGrain = 1
	for _, workers := range []int{1, 2} {
		SetImageWorkers(workers)
		for _, c := range []convCase{
			{n: 24, c: 16, h: 7, w: 7, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
			{n: 9, c: 24, h: 5, w: 6, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
		} {
			op, _, fresh, in, dy := convOps(t, c, tensor.Float32)
			if !wgDwChanFits(&op.g) {
				t.Fatalf("%v: not split by channels", c)
			}
			op.pad.keep = true
			kept := &convGradWeightOp{base: newBase("Conv2dGradWeight"), g: op.g, fwd: op}
			if _, err := op.Do(in...); err != nil {
				t.Fatal(err)
			}
			if op.pad.padFor(data[float32](in[0].(*tensor.Dense)), true) == nil {
				t.Fatalf("%v: the forward kept no padding", c)
			}
			got := do(t, kept.Do, in[0], dy)
			want := do(t, fresh.Do, in[0], dy)
			sameBits(t, fmt.Sprintf("workers=%d %v dw from the kept padding", workers, c), got, want)
		}
	}
}
