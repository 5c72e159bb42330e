package ops

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/internal/cputime"
)

// Convolutions the Winograd path takes: whole tiles (28, 8), partial ones
// (7 and 14 leave 1 and 2 rows of the last tile, 5x6 and 3x3 less than one
// or two tiles), unequal channels, a bias, chunks of several images (7
// images of 28x28: a chunk of 5 and one of 2).
var winogradCases = []convCase{
	{n: 2, c: 16, h: 28, w: 28, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
	{n: 7, c: 16, h: 28, w: 28, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}, bias: true},
	{n: 3, c: 32, h: 14, w: 14, oc: 32, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}, bias: true},
	{n: 5, c: 64, h: 7, w: 7, oc: 64, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
	{n: 3, c: 16, h: 8, w: 8, oc: 24, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
	{n: 4, c: 24, h: 5, w: 6, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}, bias: true},
	{n: 2, c: 16, h: 3, w: 3, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
	// Rows not whole tiles, columns whole (the staged output gradient's
	// rows past the image are zeros): on the channel split, then by images.
	{n: 3, c: 16, h: 6, w: 8, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
	{n: 3, c: 16, h: 10, w: 12, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
}

// winogradTol bounds |Winograd - exact| / Σ|w||x| in float32. The
// transforms scale by up to 8 (Aᵀ), 5 (Bᵀ) and 1/24 (G) and add up to 36
// terms where the direct sum adds 9·C, so the error grows to a few
// hundred float32 epsilons (6e-8) of the magnitude: measured up to 3.1e-6
// here (the direct path: up to 2.6e-7).
const winogradTol = 1e-5

// absRef is Σ|w||x| of every output (the direct convolution of |x|, |w|).
func absRef(c convCase, x, w []float64) []float64 {
	ax, aw := make([]float64, len(x)), make([]float64, len(w))
	for i, v := range x {
		ax[i] = math.Abs(v)
	}
	for i, v := range w {
		aw[i] = math.Abs(v)
	}
	return convRef(c, ax, aw, nil)
}

// relErr is max |got - want| / scale (scale ≥ 1e-30).
func relErr(got, want, scale []float64) float64 {
	e := 0.0
	for i := range want {
		e = max(e, math.Abs(got[i]-want[i])/max(scale[i], 1e-30))
	}
	return e
}

// transposedCase is the convolution the input gradient of c computes:
// dy ⊛ w' with the channels swapped.
func transposedCase(c convCase) convCase {
	c.c, c.oc, c.bias = c.oc, c.c, false
	return c
}

// flipRef is w' (see flipKernel) of c's weight.
func flipRef(c convCase, w []float64) []float64 {
	f := make([]float64, len(w))
	for o := 0; o < c.oc; o++ {
		for ci := 0; ci < c.c; ci++ {
			for k := 0; k < 9; k++ {
				f[(ci*c.oc+o)*9+8-k] = w[(o*c.c+ci)*9+k]
			}
		}
	}
	return f
}

// The forward and input gradient of the convolutions above take the
// Winograd path (the op holds the kernel's transform, 36·OC·C values, and
// the result differs in its bits from the direct path's) and match the
// plain-loop references within winogradTol of Σ|w||x|, serial and split
// between image workers (the same bits with 1, 2, 3 or 4, the kernel's
// transform split between them too).
func TestConv2dWinogradMatchesReference(t *testing.T) {
	winogradForSmallCases(t)
	defer func(p int) { wgKernelSplitPairs = p }(wgKernelSplitPairs)
	wgKernelSplitPairs = 1 // the kernel's transform split too (wgKernelJob)
	for _, c := range winogradCases {
		t.Run(c.String(), func(t *testing.T) {
			_, _, ph, pw, _, _, oh, ow := c.geometry()
			g := convGeom{n: c.n, c: c.c, h: c.h, w: c.w, oc: c.oc, kh: 3, kw: 3, sh: 1, sw: 1, ph: ph, pw: pw, dh: 1, dw: 1, oh: oh, ow: ow}
			if !winogradFits[float32](&g) || !winogradFits[float32](new(g.transposed())) {
				t.Fatalf("winogradFits is false for %v or its input gradient", c)
			}
			var y1, dx1 []float64
			for _, workers := range []int{1, 2, 3, 4} {
				y, dx, _ := convPass(t, c, tensor.Float32, workers)
				if workers > 1 {
					sameBits(t, fmt.Sprintf("workers=%d y", workers), y, y1)
					sameBits(t, fmt.Sprintf("workers=%d dx", workers), dx, dx1)
					continue
				}
				y1, dx1 = y, dx
			}
			op, gi, _, in, dy := convOps(t, c, tensor.Float32)
			x, w := vals(in[0]), vals(in[1])
			var b []float64
			if c.bias {
				b = vals(in[2])
			}
			ct := transposedCase(c)
			wf, dyv := flipRef(c, w), vals(dy)
			for _, r := range []struct {
				what             string
				got, want, scale []float64
				direct           func() []float64
			}{
				{"y", y1, convRef(c, x, w, b), absRef(c, x, w), func() []float64 { return do(t, op.Do, in...) }},
				{"dx", dx1, convRef(ct, dyv, wf, nil), absRef(ct, dyv, wf), func() []float64 { return do(t, gi.Do, dy, in[1]) }},
			} {
				if e := relErr(r.got, r.want, r.scale); e > winogradTol || math.IsNaN(e) {
					t.Errorf("%s: error %.3g of Σ|w||x|, want at most %g", r.what, e, winogradTol)
				}
				defer func(on bool) { winogradOn = on }(winogradOn)
				winogradOn = false
				direct := r.direct()
				winogradOn = true
				if e := relErr(direct, r.want, r.scale); e > winogradTol {
					t.Errorf("%s: the direct path's error is %.3g", r.what, e)
				}
				differ := false
				for i := range direct {
					differ = differ || math.Float64bits(direct[i]) != math.Float64bits(r.got[i])
				}
				if !differ {
					t.Errorf("%s: the same bits as the direct path: the Winograd path was not taken", r.what)
				}
			}
			// The op's buffers hold the kernel's transform.
			_ = do(t, op.Do, in...)
			_ = do(t, gi.Do, dy, in[1])
			if n := 36 * winogradStride(c.oc*c.c); len(op.wpack) != n || len(gi.wpack) != n {
				t.Errorf("kernel buffers hold %d and %d values, want the transform's %d", len(op.wpack), len(gi.wpack), n)
			}
		})
	}
}

func do(t *testing.T, f func(...G.Value) (G.Value, error), v ...G.Value) []float64 {
	t.Helper()
	r, err := f(v...)
	if err != nil {
		t.Fatal(err)
	}
	return vals(r)
}

// winogradFits takes exactly the float32 3x3 stride-1 same-padded
// convolutions with enough channels whose rows the kernels take: resnet8's
// stage convolutions, not its stem, strided or 1x1 ones, nor float64.
func TestWinogradFits(t *testing.T) {
	if !useAVX512 && !useAVX2 {
		t.Skip("no AVX-512 or AVX2: the Winograd path is never taken")
	}
	geom := func(c, oc, hw, k, stride, pad int) *convGeom {
		g := &convGeom{n: 64, c: c, h: hw, w: hw, oc: oc, kh: k, kw: k, sh: stride, sw: stride, ph: pad, pw: pad, dh: 1, dw: 1}
		g.oh, g.ow = (hw+2*pad-k)/stride+1, (hw+2*pad-k)/stride+1
		return g
	}
	for _, c := range []struct {
		what string
		g    *convGeom
		f64  bool
		want bool
	}{
		{"stage 1", geom(16, 16, 28, 3, 1, 1), false, true},
		{"8 input channels", geom(8, 16, 28, 3, 1, 1), false, false},
		{"stage 2", geom(32, 32, 14, 3, 1, 1), false, true},
		{"stage 3", geom(64, 64, 7, 3, 1, 1), false, true},
		{"stage 3 float64", geom(64, 64, 7, 3, 1, 1), true, false},
		{"stem", geom(1, 16, 28, 3, 1, 1), false, false},
		{"stage 2 entry (stride 2)", geom(16, 32, 28, 3, 2, 1), false, false},
		{"shortcut (1x1)", geom(16, 32, 28, 1, 2, 0), false, false},
		{"no padding", geom(16, 16, 28, 3, 1, 0), false, false},
		{"36 output channels", geom(32, 36, 14, 3, 1, 1), false, false},
		{"5x5 (tiles 2.6 times the output)", geom(32, 32, 5, 3, 1, 1), false, false},
		{"8x8", geom(32, 32, 8, 3, 1, 1), false, true},
	} {
		got := winogradFits[float32](c.g)
		if c.f64 {
			got = winogradFits[float64](c.g)
		}
		if got != c.want {
			t.Errorf("%s: winogradFits = %v, want %v", c.what, got, c.want)
		}
	}
}

// A convolution on the Winograd path takes the fewest images a chunk
// whose tiles fill the products' 32 columns (but for a seventeenth), up to
// 512 tiles: 5 of resnet8's 28x28 (245 tiles), where the implicit path
// takes 1; 2 of 14x14 and 8 of 7x7 as the implicit path; a batch too small
// to fill them as the implicit path.
func TestWinogradChunk(t *testing.T) {
	if !useAVX512 && !useAVX2 {
		t.Skip("no AVX-512 or AVX2: the Winograd path is never taken")
	}
	geom := func(n, c, hw int) *convGeom {
		return &convGeom{n: n, c: c, h: hw, w: hw, oc: c, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, oh: hw, ow: hw}
	}
	for _, c := range []struct {
		what     string
		g        *convGeom
		nb       int
		winograd bool
	}{
		{"stage 1", geom(64, 16, 28), 5, true},
		{"stage 1, 7 images", geom(7, 16, 28), 5, true},
		{"stage 1, 4 images", geom(4, 16, 28), 1, true},
		{"stage 2", geom(64, 32, 14), 2, true},
		{"stage 3", geom(64, 64, 7), 8, true},
		{"8 channels (implicit)", geom(64, 8, 28), 1, false},
	} {
		if got := winogradFits[float32](c.g); got != c.winograd {
			t.Errorf("%s: winogradFits = %v, want %v", c.what, got, c.winograd)
		}
		if got := c.g.chunk(); got != c.nb {
			t.Errorf("%s: %d images a chunk, want %d", c.what, got, c.nb)
		}
	}
}

// BenchmarkConvWinograd times the forward, input and weight gradient ops of
// resnet8's same-padded 3x3 convolutions (batch 64, float32) on the
// Winograd path and on the implicit path it replaces, one after the other,
// split between GOMAXPROCS image workers as in training,
// stage 1 included although it does not dispatch there (see
// winogradMinChannels); dw-cold is dw with the caches emptied first:
//
//	for i in 1 2 3; do for p in 1 2; do GOMAXPROCS=$p go test ./nn/ops -run '^$' -bench ConvWinograd -benchtime 100x; done; done
func BenchmarkConvWinograd(b *testing.B) {
	defer func(w func() int) { imageWorkers = w }(imageWorkers)
	SetImageWorkers(runtime.GOMAXPROCS(0))
	for _, st := range []struct {
		name  string
		c, hw int
	}{{"stage1", 16, 28}, {"stage2", 32, 14}, {"stage3", 64, 7}} {
		for _, pass := range []string{"forward", "dx", "dw", "dw-cold"} {
			for _, path := range []struct {
				name string
				on   bool
			}{{"implicit", false}, {"winograd", true}} {
				b.Run(st.name+"/"+pass+"/"+path.name, func(b *testing.B) {
					defer func(on bool, mc int) { winogradOn, winogradMinChannels = on, mc }(winogradOn, winogradMinChannels)
					winogradOn, winogradMinChannels = path.on, 8 // stage 1 too
					g := G.NewGraph()
					x := node(g, randT(tensor.Float32, 1, -1, 1, 64, st.c, st.hw, st.hw), "x")
					w := node(g, randT(tensor.Float32, 2, -0.1, 0.1, st.c, st.c, 3, 3), "w")
					y, err := Conv2d(x, w, nil, Conv2dOpts{Padding: [2]int{1, 1}})
					if err != nil {
						b.Fatal(err)
					}
					op := y.Op().(*convOp)
					f, args := op.Do, []G.Value{x.Value(), w.Value()}
					switch pass {
					case "dx":
						gi := &convGradInputOp{base: newBase("Conv2dGradInput"), g: op.g}
						f, args = gi.Do, []G.Value{randT(tensor.Float32, 3, -1, 1, op.g.yShape()...), w.Value()}
					case "dw", "dw-cold": // reading the padding its forward kept, as in training
						op.pad.keep = true
						if _, err := op.Do(args...); err != nil {
							b.Fatal(err)
						}
						gw := &convGradWeightOp{base: newBase("Conv2dGradWeight"), g: op.g, fwd: op}
						f, args = gw.Do, []G.Value{x.Value(), randT(tensor.Float32, 3, -1, 1, op.g.yShape()...)}
					}
					for range 3 { // every worker's scratch grown
						if _, err := f(args...); err != nil {
							b.Fatal(err)
						}
					}
					// dw-cold runs each weight gradient after writing 64 MB
					// elsewhere, as in a training step, where its input was
					// padded by the forward long before (untimed).
					var evict []float32
					if pass == "dw-cold" {
						evict = make([]float32, 16<<20)
					}
					b.ReportAllocs()
					b.ResetTimer()
					var cpu time.Duration
					for i := 0; i < b.N; i++ {
						if evict != nil {
							b.StopTimer()
							for j := range evict {
								evict[j]++
							}
							b.StartTimer()
						}
						cpu0 := cputime.Now()
						_, _ = f(args...)
						cpu += cputime.Now() - cpu0
					}
					if cpu > 0 {
						b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
					}
				})
			}
		}
	}
}

// A Winograd forward keeps the padding of its input, in its own layout,
// for the weight gradient (on the Winograd path too): the weight gradient
// reading it gives the bits of one padding the input again.
func TestConv2dWinogradKeepsPadding(t *testing.T) {
	winogradForSmallCases(t)
	for _, c := range winogradCases {
		op, _, fresh, in, dy := convOps(t, c, tensor.Float32)
		op.pad.keep = true
		kept := &convGradWeightOp{base: newBase("Conv2dGradWeight"), g: op.g, fwd: op}
		if _, err := op.Do(in...); err != nil {
			t.Fatal(err)
		}
		if n := 36 * winogradStride(c.oc*c.c); len(op.wpack) != n {
			t.Fatalf("%v: the forward did not take the Winograd path", c)
		}
		if op.pad.padFor(data[float32](in[0].(*tensor.Dense)), winogradFits[float32](&op.g)) == nil {
			t.Fatalf("%v: the Winograd forward kept no padding", c)
		}
		sameBits(t, fmt.Sprintf("%v dw from the kept padding", c), do(t, kept.Do, in[0], dy), do(t, fresh.Do, in[0], dy))
	}
}

// winogradForSmallCases lets winogradCases' small shapes take the Winograd
// path for the rest of t (8 channels and up, any share of wasted tiles),
// and skips t on a CPU without AVX-512 or AVX2 (or with both off), where
// the path is never taken and convolutions run the Go loops (covered by
// TestConv2dForward).
func winogradForSmallCases(t *testing.T) {
	t.Helper()
	if !useAVX512 && !useAVX2 {
		t.Skip("the Winograd path runs on the AVX-512 or AVX2 kernels; this CPU has neither")
	}
	mc, mw := winogradMinChannels, winogradMaxWaste
	t.Cleanup(func() { winogradMinChannels, winogradMaxWaste = mc, mw })
	winogradMinChannels, winogradMaxWaste = 8, 4
}

// dwRef is the weight gradient of c by the plain loops in float64: Σ over
// images and outputs of dy·x, or with abs, of |dy||x| (the scale of its
// rounding).
func dwRef(c convCase, x, dy []float64, abs bool) []float64 {
	sh, sw, ph, pw, dh, dwl, oh, ow := c.geometry()
	f := func(v float64) float64 { return v }
	if abs {
		f = math.Abs
	}
	dw := make([]float64, c.oc*c.c*c.kh*c.kw)
	for n := 0; n < c.n; n++ {
		for o := 0; o < c.oc; o++ {
			for ch := 0; ch < c.c; ch++ {
				for ki := 0; ki < c.kh; ki++ {
					for kj := 0; kj < c.kw; kj++ {
						s := 0.0
						for oy := 0; oy < oh; oy++ {
							iy := oy*sh - ph + ki*dh
							if iy < 0 || iy >= c.h {
								continue
							}
							for ox := 0; ox < ow; ox++ {
								if ix := ox*sw - pw + kj*dwl; ix >= 0 && ix < c.w {
									s += f(dy[((n*c.oc+o)*oh+oy)*ow+ox]) * f(x[((n*c.c+ch)*c.h+iy)*c.w+ix])
								}
							}
						}
						dw[((o*c.c+ch)*c.kh+ki)*c.kw+kj] += s
					}
				}
			}
		}
	}
	return dw
}

// The weight gradient of the Winograd cases, and of resnet8's three stage
// convolutions at its batch of 64 (sums over 3136 tiles at 28x28), takes
// the Winograd path (its bits differ from the implicit path's) and
// matches the plain loops within winogradTol of Σ|dy||x| with 1, 2 or 3
// image workers; under SetDeterministic the three give the same bits.
func TestConv2dWinogradWeightGradMatchesReference(t *testing.T) {
	winogradForSmallCases(t)
	defer SetDeterministic(Deterministic())
	cases := append(winogradCases[:len(winogradCases):len(winogradCases)],
		convCase{n: 64, c: 16, h: 28, w: 28, oc: 16, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
		convCase{n: 64, c: 32, h: 14, w: 14, oc: 32, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
		convCase{n: 64, c: 64, h: 7, w: 7, oc: 64, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}})
	for i, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			if i >= len(winogradCases) && testing.Short() {
				t.Skip("-short: batch 64's float64 reference loops take minutes under emulation (.ci/run's qemu step)")
			}
			_, _, gw, in, dy := convOps(t, c, tensor.Float32)
			x, dyv := vals(in[0]), vals(dy)
			want, scale := dwRef(c, x, dyv, false), dwRef(c, x, dyv, true)
			var got []float64
			for _, det := range []bool{false, true} {
				SetDeterministic(det)
				var first []float64
				for _, workers := range []int{1, 2, 3} {
					_, _, dw := convPass(t, c, tensor.Float32, workers)
					if e := relErr(dw, want, scale); e > winogradTol || math.IsNaN(e) {
						t.Errorf("deterministic=%v workers=%d: error %.3g of Σ|dy||x|, want at most %g", det, workers, e, winogradTol)
					}
					if first == nil {
						first, got = dw, dw
					} else if det {
						sameBits(t, fmt.Sprintf("deterministic, workers=%d dw", workers), dw, first)
					}
				}
			}
			defer func(on bool) { winogradOn = on }(winogradOn)
			winogradOn = false
			direct := do(t, gw.Do, in[0], dy)
			if e := relErr(direct, want, scale); e > winogradTol {
				t.Errorf("the implicit path's error is %.3g", e)
			}
			differ := false
			for i := range direct {
				differ = differ || math.Float64bits(direct[i]) != math.Float64bits(got[i])
			}
			if !differ {
				t.Errorf("the same bits as the implicit path: the Winograd path was not taken")
			}
		})
	}
}

// With several image workers (or under SetDeterministic), the Winograd
// weight gradient of images split by images (not wgDwChanFits) adds the
// parts' transform-domain sums dU up in part order and transforms the
// total once: its bits are those of Gᵀ (dU₀ + dU₁ + ...) G from the parts'
// own sums, not a sum of one transform a part.
func TestConv2dWinogradWeightGradTransformsOnce(t *testing.T) {
	winogradForSmallCases(t)
	defer SetDeterministic(Deterministic())
	cases := append(winogradCases[:len(winogradCases):len(winogradCases)],
		convCase{n: 64, c: 32, h: 14, w: 14, oc: 32, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}})
	taken := 0
	for _, c := range cases {
		_, _, gw, in, dy := convOps(t, c, tensor.Float32)
		g := &gw.g
		if !winogradFits[float32](g) {
			t.Fatalf("%v: not on the Winograd path", c)
		}
		if wgDwChanFits(g) {
			continue // TestWinogradWeightGradByChannels
		}
		taken++
		x, d := in[0].Data().([]float32), dy.Data().([]float32)
		occ := g.oc * g.c
		for _, det := range []bool{false, true} {
			SetDeterministic(det)
			for _, workers := range []int{2, 3} {
				parts := dwParts(g.chunks(), min(workers, g.chunks()))
				if g.chunks() >= 2 && parts < 2 {
					t.Fatalf("%v: %d parts for %d workers", c, parts, workers)
				}
				sum := make([]float32, 36*occ)
				var s convScratch
				for p := 0; p < parts; p++ {
					lo, hi := g.imageRange(p, parts)
					du := winogradDwSums(g, x, d, make([]float32, 36*occ), nil, &s, lo, hi)
					if p == 0 {
						copy(sum, du)
					} else {
						addTo(sum, du)
					}
				}
				want32 := make([]float32, 9*occ)
				winogradKernelGrad(g, sum, want32)
				want := make([]float64, len(want32))
				for i, v := range want32 {
					want[i] = float64(v)
				}
				_, _, got := convPass(t, c, tensor.Float32, workers)
				sameBits(t, fmt.Sprintf("%v deterministic=%v workers=%d (%d parts) dw", c, det, workers, parts), got, want)
			}
		}
	}
	if taken < 3 {
		t.Errorf("%d cases split by images", taken)
	}
}

// The Winograd weight gradient split between image workers, its join
// included, allocates nothing once warm.
func TestConv2dWinogradWeightGradDoesNotAllocate(t *testing.T) {
	winogradForSmallCases(t)
	defer func(w func() int, gr int) { imageWorkers, imageGrain = w, gr }(imageWorkers, imageGrain)
	imageGrain = 1
	for _, workers := range []int{2, 3} {
		SetImageWorkers(workers)
		for _, c := range winogradCases {
			_, _, gw, in, dy := convOps(t, c, tensor.Float32)
			if _, err := gw.Do(in[0], dy); err != nil {
				t.Fatal(err)
			}
			if a := testing.AllocsPerRun(5, func() { _, _ = gw.Do(in[0], dy) }); a != 0 && !raceBuild {
				t.Errorf("workers=%d %v: %.0f allocations per run", workers, c, a)
			}
		}
	}
}
