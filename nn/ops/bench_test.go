package ops

import (
	"fmt"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/internal/cputime"
)

// Op-level benchmarks at resnet8 shapes (batch 64, float32): forward and
// backward through the ops' Do methods in graph order, without a VM, on the
// BLAS programs choose (OpenBLAS when found; FULGUR_BLAS, FULGUR_BLAS_THREADS
// override). Run alone so no test multiplies first:
//
//	go test ./nn/ops -run '^$' -bench . -benchmem

// opRunner runs every op node of g in topological order, from the values its
// children produced.
type opRunner struct {
	steps []*G.Node
	in    [][]*G.Node
	args  [][]G.Value
	out   map[*G.Node]G.Value
}

func newOpRunner(tb testing.TB, g *G.ExprGraph) *opRunner {
	sorted, err := G.Sort(g)
	if err != nil {
		tb.Fatal(err)
	}
	r := &opRunner{out: map[*G.Node]G.Value{}}
	for i := len(sorted) - 1; i >= 0; i-- {
		n := sorted[i]
		if n.Op() == nil {
			r.out[n] = n.Value()
			continue
		}
		var in []*G.Node
		for it := g.From(n.ID()); it.Next(); {
			in = append(in, it.Node().(*G.Node))
		}
		r.steps = append(r.steps, n)
		r.in = append(r.in, in)
		r.args = append(r.args, make([]G.Value, len(in)))
	}
	return r
}

func (r *opRunner) run(tb testing.TB) {
	for i, n := range r.steps {
		for j, c := range r.in[i] {
			r.args[i][j] = r.out[c]
		}
		v, err := n.Op().Do(r.args[i]...)
		if err != nil {
			tb.Fatal(err)
		}
		r.out[n] = v
	}
}

var chooseOnce sync.Once

func benchGraph(b *testing.B, build func(g *G.ExprGraph) (*G.Node, G.Nodes)) {
	chooseOnce.Do(func() { _, _ = blas.Choose(zerolog.Nop(), blas.ChooseOptions{}) })
	b.Logf("blas: %s", blas.Current().Name())
	g := G.NewGraph()
	loss, wrt := build(g)
	if _, err := G.Grad(loss, wrt...); err != nil {
		b.Fatal(err)
	}
	r := newOpRunner(b, g)
	r.run(b)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Now()
	for i := 0; i < b.N; i++ {
		r.run(b)
	}
	if cpu := cputime.Now() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func stage1(g *G.ExprGraph) *G.Node {
	return node(g, randT(tensor.Float32, 1, -1, 1, 64, 16, 28, 28), "x")
}

// The same-padded 3x3 convolutions of resnet8's three stages, forward and
// backward, on the implicit path (conv_implicit.go) and through the column
// matrix.
func BenchmarkConv3x3Stage1(b *testing.B) { benchConv3x3(b, 16, 16, 28, 1) }
func BenchmarkConv3x3Stage2(b *testing.B) { benchConv3x3(b, 32, 32, 14, 1) }
func BenchmarkConv3x3Stage3(b *testing.B) { benchConv3x3(b, 64, 64, 7, 1) }

// The stride-2 first convolutions of stages 2 and 3.
func BenchmarkConv3x3Down2(b *testing.B) { benchConv3x3(b, 16, 32, 28, 2) }
func BenchmarkConv3x3Down3(b *testing.B) { benchConv3x3(b, 32, 64, 14, 2) }

func benchConv3x3(b *testing.B, c, oc, hw, stride int) {
	defer func(w float64, o int) { implicitWaste, implicitStridedOut = w, o }(implicitWaste, implicitStridedOut)
	implicitStridedOut = 0
	defer func(on bool) { winogradOn = on }(winogradOn)
	winogradOn = false // the paths named below, not Winograd's (BenchmarkConvWinograd)
	for _, path := range []struct {
		name  string
		waste float64
	}{{"implicit", 1}, {"columns", -1}} {
		b.Run(path.name, func(b *testing.B) {
			implicitWaste = path.waste
			benchGraph(b, func(g *G.ExprGraph) (*G.Node, G.Nodes) {
				x := node(g, randT(tensor.Float32, 1, -1, 1, 64, c, hw, hw), "x")
				w := node(g, randT(tensor.Float32, 2, -0.1, 0.1, oc, c, 3, 3), "w")
				y, _ := Conv2d(x, w, nil, Conv2dOpts{Stride: [2]int{stride, stride}, Padding: [2]int{1, 1}})
				s, _ := SumAll(y)
				return s, G.Nodes{x, w}
			})
		})
	}
}

// The 1x1 stride-2 shortcuts of stages 2 and 3, forward and backward.
func BenchmarkConv1x1Shortcut2(b *testing.B) { benchShortcut(b, 16, 32, 28) }
func BenchmarkConv1x1Shortcut3(b *testing.B) { benchShortcut(b, 32, 64, 14) }

func benchShortcut(b *testing.B, c, oc, hw int) {
	benchGraph(b, func(g *G.ExprGraph) (*G.Node, G.Nodes) {
		x := node(g, randT(tensor.Float32, 1, -1, 1, 64, c, hw, hw), "x")
		w := node(g, randT(tensor.Float32, 2, -0.1, 0.1, oc, c, 1, 1), "w")
		y, _ := Conv2d(x, w, nil, Conv2dOpts{Stride: [2]int{2, 2}})
		s, _ := SumAll(y)
		return s, G.Nodes{x, w}
	})
}

func BenchmarkBatchNormReLUStage1(b *testing.B) {
	benchGraph(b, func(g *G.ExprGraph) (*G.Node, G.Nodes) {
		x := stage1(g)
		gm := node(g, randT(tensor.Float32, 2, 0.5, 1.5, 16), "gamma")
		bt := node(g, randT(tensor.Float32, 3, -0.5, 0.5, 16), "beta")
		st := newBNState(tensor.Float32, 16)
		y, _ := BatchNorm(x, gm, bt, st.stats(), BatchNormOpts{Training: true, ReLU: true})
		s, _ := SumAll(y)
		return s, G.Nodes{x, gm, bt}
	})
}

// The same at resnet8's third stage (64x64x7x7: 200K elements, a few
// tens of µs a pass).
func BenchmarkBatchNormReLUStage3(b *testing.B) {
	benchGraph(b, func(g *G.ExprGraph) (*G.Node, G.Nodes) {
		x := node(g, randT(tensor.Float32, 1, -1, 1, 64, 64, 7, 7), "x")
		gm := node(g, randT(tensor.Float32, 2, 0.5, 1.5, 64), "gamma")
		bt := node(g, randT(tensor.Float32, 3, -0.5, 0.5, 64), "beta")
		st := newBNState(tensor.Float32, 64)
		y, _ := BatchNorm(x, gm, bt, st.stats(), BatchNormOpts{Training: true, ReLU: true})
		s, _ := SumAll(y)
		return s, G.Nodes{x, gm, bt}
	})
}

func BenchmarkAddReLUStage1(b *testing.B) {
	benchGraph(b, func(g *G.ExprGraph) (*G.Node, G.Nodes) {
		x := stage1(g)
		x2 := node(g, randT(tensor.Float32, 5, -1, 1, 64, 16, 28, 28), "x2")
		y, _ := AddReLU(x, x2)
		s, _ := SumAll(y)
		return s, G.Nodes{x, x2}
	})
}

// The end of resnet8's blocks, forward and backward: bn2 + identity
// shortcut + ReLU at stage 1 (64x16x28x28), bn2 + the projection's
// BatchNorm + ReLU at stages 2 (64x32x14x14) and 3 (64x64x7x7); fused (BatchNormAddReLU,
// BatchNormAddBatchNormReLU) and as BatchNorm then AddReLU.
//
//	go test ./nn/ops -run '^$' -bench BlockEnd -benchmem -count 5
func BenchmarkBlockEnd(b *testing.B) {
	for _, c := range []struct {
		name string
		c    resEnd
	}{{"stage1-identity", resEnd{shape: []int{64, 16, 28, 28}, training: true, affine: true}},
		{"stage2-projection", resEnd{shape: []int{64, 32, 14, 14}, training: true, affine: true, proj: true}},
		{"stage3-projection", resEnd{shape: []int{64, 64, 7, 7}, training: true, affine: true, proj: true}}} {
		for _, fused := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/fused=%v", c.name, fused), func(b *testing.B) {
				benchGraph(b, func(g *G.ExprGraph) (*G.Node, G.Nodes) {
					var in []*G.Node
					for i, t := range c.c.inputs(tensor.Float32) {
						in = append(in, node(g, t, fmt.Sprintf("in%d", i)))
					}
					ch := c.c.shape[1]
					y, err := c.c.build(fused, in, [2]bnState{newBNState(tensor.Float32, ch), newBNState(tensor.Float32, ch)}, [2]StatReducer{})
					if err != nil {
						b.Fatal(err)
					}
					s, _ := SumAll(y)
					return s, in
				})
			})
		}
	}
}

// The input gradients of resnet8's 3x3 stride-2 convolutions (batch 64)
// alone: phase by phase (conv_phase.go) and through col2im. (Its 1x1
// stride-2 shortcuts go through col2im either way, see usePhases.)
func BenchmarkConvGradInputStrided(b *testing.B) {
	defer func(on bool) { phaseSplit = on }(phaseSplit)
	for _, c := range []convCase{
		{n: 64, c: 16, h: 28, w: 28, oc: 32, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
		{n: 64, c: 32, h: 14, w: 14, oc: 64, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
	} {
		for _, on := range []bool{true, false} {
			name := fmt.Sprintf("%dx%d-c%d-oc%d-k%d/phases=%v", c.h, c.w, c.c, c.oc, c.kh, on)
			b.Run(name, func(b *testing.B) {
				phaseSplit = on
				g := G.NewGraph()
				ins := c.inputs(tensor.Float32)
				x, w := node(g, ins[0], "x"), node(g, ins[1], "w")
				y, err := c.build(g, []*G.Node{x, w})
				if err != nil {
					b.Fatal(err)
				}
				op := y.Op().(*convOp)
				gi := &convGradInputOp{base: newBase("Conv2dGradInput"), g: op.g}
				dy := randT(tensor.Float32, 11, -1, 1, op.g.yShape()...)
				if _, err := gi.Do(dy, ins[1]); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				cpu0 := cputime.Now()
				for i := 0; i < b.N; i++ {
					if _, err := gi.Do(dy, ins[1]); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((cputime.Now()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// Grouped convolutions (Conv2dOpts.Groups), forward and backward, batch
// 64 float32: a MobileNet depthwise 3x3 (32 channels of 28x28, and 64 of
// 14x14 strided) and a ResNeXt-style 3x3 of 32 groups of 4 channels, next
// to the dense 3x3 of the same channels (BenchmarkConv3x3Stage2) for scale.
func BenchmarkConvDepthwise28(b *testing.B)   { benchGrouped(b, 32, 32, 28, 1, 32) }
func BenchmarkConvDepthwise14s2(b *testing.B) { benchGrouped(b, 64, 64, 14, 2, 64) }
func BenchmarkConvGrouped32x4(b *testing.B)   { benchGrouped(b, 128, 128, 14, 1, 32) }

func benchGrouped(b *testing.B, c, oc, hw, stride, groups int) {
	benchGraph(b, func(g *G.ExprGraph) (*G.Node, G.Nodes) {
		x := node(g, randT(tensor.Float32, 1, -1, 1, 64, c, hw, hw), "x")
		w := node(g, randT(tensor.Float32, 2, -0.1, 0.1, oc, c/groups, 3, 3), "w")
		y, err := Conv2d(x, w, nil, Conv2dOpts{Stride: [2]int{stride, stride}, Padding: [2]int{1, 1}, Groups: groups})
		if err != nil {
			b.Fatal(err)
		}
		s, _ := SumAll(y)
		return s, G.Nodes{x, w}
	})
}

// A hidden layer of an MLP on flattened Fashion-MNIST (batch 64, 784 →
// 256, float32), forward and backward: the Linear layer itself, then what
// LayerNorm, GELU (plain Go loops, smooth.go and layernorm.go) and ReLU
// add after it.
//
//	go test ./nn/ops -run '^$' -bench Hidden -benchmem -count 5
func BenchmarkHiddenLinear(b *testing.B) {
	benchGraph(b, func(g *G.ExprGraph) (*G.Node, G.Nodes) {
		x := node(g, randT(tensor.Float32, 1, -1, 1, 64, 784), "x")
		w := node(g, randT(tensor.Float32, 2, -0.03, 0.03, 256, 784), "w")
		bias := node(g, randT(tensor.Float32, 3, -0.03, 0.03, 256), "b")
		y, _ := Linear(x, w, bias, LinearOpts{NoInputGrad: true})
		s, _ := SumAll(y)
		return s, G.Nodes{w, bias}
	})
}

func benchHidden(b *testing.B, f func(g *G.ExprGraph, h *G.Node) *G.Node) {
	benchGraph(b, func(g *G.ExprGraph) (*G.Node, G.Nodes) {
		h := node(g, randT(tensor.Float32, 1, -3, 3, 64, 256), "h")
		s, _ := SumAll(f(g, h))
		return s, G.Nodes{h}
	})
}

func BenchmarkHiddenReLU(b *testing.B) {
	benchHidden(b, func(g *G.ExprGraph, h *G.Node) *G.Node { y, _ := ReLU(h); return y })
}

func BenchmarkHiddenGELU(b *testing.B) {
	benchHidden(b, func(g *G.ExprGraph, h *G.Node) *G.Node { y, _ := GELU(h); return y })
}

func BenchmarkHiddenGELUTanh(b *testing.B) {
	benchHidden(b, func(g *G.ExprGraph, h *G.Node) *G.Node { y, _ := GELUTanh(h); return y })
}

func BenchmarkHiddenLayerNorm(b *testing.B) {
	benchHidden(b, func(g *G.ExprGraph, h *G.Node) *G.Node {
		gm := node(g, randT(tensor.Float32, 2, 0.5, 1.5, 256), "gamma")
		bt := node(g, randT(tensor.Float32, 3, -0.5, 0.5, 256), "beta")
		y, _ := LayerNorm(h, gm, bt, []int{256}, 1e-5)
		return y
	})
}

// copyRows (the row moves of the Winograd and implicit paths' padding) on
// resnet8's planes, batch 64: rows of 28, 14 and 7 floats with the gaps
// winogradPad leaves, in Go's copy and clear and on the CPU's kernel.
//
//	GOMAXPROCS=1 go test ./nn/ops -run '^$' -bench CopyRows
func BenchmarkCopyRows(b *testing.B) {
	v512, v2 := useAVX512, useAVX2
	defer func() { useAVX512, useAVX2 = v512, v2 }()
	kernel := v512 || v2
	for _, s := range []struct{ w, gap, c int }{{28, 2, 16}, {14, 2, 32}, {7, 3, 64}} {
		rows := 64 * s.c * s.w
		src, dst := make([]float32, rows*s.w), make([]float32, rows*(s.w+s.gap))
		for _, k := range []bool{false, true} {
			if k && !kernel {
				continue
			}
			b.Run(fmt.Sprintf("w=%d,gap=%d/kernel=%v", s.w, s.gap, k), func(b *testing.B) {
				useAVX512, useAVX2 = v512 && k, v2 && k
				for b.Loop() {
					copyRows(dst, s.w+s.gap, src, s.w, s.w, s.gap, rows)
				}
				useAVX512, useAVX2 = v512, v2
			})
		}
	}
}
