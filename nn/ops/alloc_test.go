package ops

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// smallNet builds a training graph using every op of the package and
// differentiates it with respect to its parameters.
func smallNet(t *testing.T, dt tensor.Dtype) (*G.ExprGraph, *G.Node) {
	t.Helper()
	g := G.NewGraph()
	must := func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// 6x6 images keep every multiply below gonum's parallel threshold (256
	// columns), where its goroutines allocate: that cost belongs to the BLAS.
	x := node(g, randT(dt, 1, -1, 1, 4, 2, 6, 6), "x")
	w1 := node(g, randT(dt, 2, -0.5, 0.5, 4, 2, 3, 3), "w1")
	b1 := node(g, randT(dt, 3, -0.5, 0.5, 4), "b1")
	gam := node(g, randT(dt, 4, 0.5, 1.5, 4), "gamma")
	bet := node(g, randT(dt, 5, -0.5, 0.5, 4), "beta")
	st := newBNState(dt, 4)
	w2 := node(g, randT(dt, 6, -0.5, 0.5, 4, 4, 1, 1), "w2")
	wl := node(g, randT(dt, 7, -0.5, 0.5, 3, 4), "wl")
	bl := node(g, randT(dt, 8, -0.5, 0.5, 3), "bl")
	wg := node(g, randT(dt, 9, -0.5, 0.5, 3, 4), "wg")
	labels := node(g, labelsT(dt, 10, 4, 3), "labels")
	target := node(g, randT(dt, 11, -1, 1, 4, 4, 6, 6), "target")

	h := must(Conv2d(x, w1, b1, Conv2dOpts{Padding: [2]int{1, 1}, NoInputGrad: true}))
	h = must(BatchNorm(h, gam, bet, st.stats(), BatchNormOpts{Training: true, ReLU: true}))
	s := must(Conv2d(h, w2, nil, Conv2dOpts{}))
	h = must(AddReLU(h, s))
	st2, st3 := newBNState(dt, 4), newBNState(dt, 4)
	h = must(BatchNormAddReLU(BatchNormArgs{X: s, Gamma: gam, Beta: bet, Stats: st2.stats(), Opts: BatchNormOpts{Training: true}}, h))
	h = must(BatchNormAddBatchNormReLU(BatchNormArgs{X: h, Stats: st3.stats(), Opts: BatchNormOpts{Training: true}},
		BatchNormArgs{X: s, Gamma: gam, Beta: bet, Stats: st2.stats(), Opts: BatchNormOpts{Training: true}}))
	h = must(ReLU(h))
	// An MSE over 576 values: several partial sums when a test lowers
	// lossChunk.
	mse := must(PointLoss(h, target, PointLossConfig{Kind: LossMSE}))
	m := must(MaxPool2d(h, PoolOpts{Kernel: [2]int{2, 2}}))
	a := must(AvgPool2d(m, PoolOpts{Kernel: [2]int{2, 2}}))
	gp := must(GlobalAvgPool2d(m))
	f := must(Flatten(a))
	f = must(Dropout(f, 0.3, 1))
	logits := must(Linear(f, wl, bl, LinearOpts{ReLU: true}))
	logits2 := must(Linear(gp, wg, nil, LinearOpts{}))
	ls := must(LogSoftmax(logits2))
	r := must(MeanAxis(ls, 1))
	r = must(SumAll(r))
	loss := must(SoftmaxCrossEntropy(logits, labels, nil))
	loss = must(G.Add(loss, r))
	loss = must(G.Add(loss, mse))
	must(Accuracy(logits, labels, nil))
	if _, err := G.Grad(loss, w1, b1, gam, bet, w2, wl, bl, wg); err != nil {
		t.Fatal(err)
	}
	return g, loss
}

// After the first run, no op of the package allocates when it runs again:
// outputs, caches and scratch space are all held by the op; serial, and
// with every loop and convolution split between three workers.
func TestOpsDoNotAllocate(t *testing.T) {
	defer func(g int, w, iw func() int, ig, lc int) {
		parallelGrain, maxWorkers, imageWorkers, imageGrain, lossChunk = g, w, iw, ig, lc
	}(parallelGrain, maxWorkers, imageWorkers, imageGrain, lossChunk)
	for _, par := range []bool{false, true} {
		if par {
			parallelGrain, maxWorkers, imageGrain, lossChunk = 1, func() int { return 3 }, 1, 50
			SetImageWorkers(3)
		} else {
			SetLoopWorkers(1)
			SetImageWorkers(1)
		}
		t.Run(fmt.Sprintf("parallel=%v", par), opsDoNotAllocate)
	}
}

func opsDoNotAllocate(t *testing.T) {
	for _, dt := range dtypes {
		g, _ := smallNet(t, dt)
		m := G.NewTapeMachine(g)
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, n := range g.AllNodes() {
			op, ok := n.Op().(fulgurOp)
			if !ok {
				continue
			}
			var in []G.Value
			for it := g.From(n.ID()); it.Next(); {
				in = append(in, it.Node().(*G.Node).Value())
			}
			allocs := testing.AllocsPerRun(5, func() {
				if _, err := n.Op().Do(in...); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 && !raceBuild {
				t.Errorf("%v: %v allocates %.0f times per run", dt, n.Op(), allocs)
			}
			seen[op.self().kind] = true
		}
		if len(seen) < 25 {
			t.Errorf("only %d kinds of op checked: %v", len(seen), seen)
		}
		m.Close()
	}
}

// The parallel paths split work by index and combine partial sums in index
// order: every value of a training graph is bitwise the same with one worker
// as with two, three (an uneven split) or four.
func TestParallelMatchesSerial(t *testing.T) {
	defer func(g int, w func() int, lc int) {
		parallelGrain, maxWorkers, lossChunk = g, w, lc
	}(parallelGrain, maxWorkers, lossChunk)
	lossChunk = 50 // smallNet's MSE: 12 partial sums, the last a short one
	for _, dt := range dtypes {
		runAll := func() map[string][]float64 {
			g, _ := smallNet(t, dt)
			m := G.NewTapeMachine(g)
			defer m.Close()
			if err := m.RunAll(); err != nil {
				t.Fatal(err)
			}
			out := map[string][]float64{}
			for _, n := range g.AllNodes() {
				if _, ok := n.Op().(fulgurOp); ok {
					out[fmt.Sprintf("%d:%v", len(out), n.Op().(fulgurOp).self().kind)] = vals(n.Value())
				}
			}
			return out
		}
		parallelGrain, maxWorkers = 1<<30, func() int { return 1 }
		serial := runAll()
		for _, nw := range []int{2, 3, 4} {
			parallelGrain, maxWorkers = 1, func() int { return nw }
			par := runAll()
			if len(par) != len(serial) || len(par) < 40 {
				t.Fatalf("%d and %d op values", len(serial), len(par))
			}
			for k, want := range serial {
				got := par[k]
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("%v %s[%d]: %d workers %v, serial %v", dt, k, i, nw, got[i], want[i])
					}
				}
			}
		}
	}
}

// Parameter-gradient ops write into a caller's tensor through
// UsePreallocDo (an executor's view of the store's gradient buffer), with
// the same values as Do, and fall back to their own buffer when it does
// not fit.
func TestGradientOpsUsePrealloc(t *testing.T) {
	for _, dt := range dtypes {
		g, _ := smallNet(t, dt)
		m := G.NewTapeMachine(g)
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, nd := range g.AllNodes() {
			pd, ok := nd.Op().(G.UsePreallocDoer)
			if _, ours := nd.Op().(fulgurOp); !ok || !ours {
				continue
			}
			var in []G.Value
			for it := g.From(nd.ID()); it.Next(); {
				in = append(in, it.Node().(*G.Node).Value())
			}
			want, err := nd.Op().Do(in...)
			if err != nil {
				t.Fatal(err)
			}
			wantV := vals(want)
			p := tensor.New(tensor.Of(dt), tensor.WithShape(nd.Shape().Clone()...))
			got, err := pd.UsePreallocDo(p, in...)
			if err != nil {
				t.Fatal(err)
			}
			if got != G.Value(p) {
				t.Fatalf("%v: UsePreallocDo returned its own buffer, not the given tensor", nd.Op())
			}
			assertClose(t, fmt.Sprint(nd.Op()), vals(got), wantV, 0)
			wrong := tensor.New(tensor.Of(dt), tensor.WithShape(nd.Shape().TotalSize()+1))
			if got, err = pd.UsePreallocDo(wrong, in...); err != nil || got == G.Value(wrong) {
				t.Fatalf("%v: a tensor of the wrong shape was written (%v)", nd.Op(), err)
			}
			if again, _ := nd.Op().Do(in...); again == G.Value(p) {
				t.Fatalf("%v: Do still writes into the tensor of an earlier UsePreallocDo", nd.Op())
			}
			n++
		}
		if n < 6 {
			t.Fatalf("%d ops implement UsePreallocDo, want the 6 parameter-gradient ops", n)
		}
		m.Close()
	}
}

// The Winograd convolutions (conv_winograd.go; the weight gradient of 7x7
// images by channels, conv_winograd_dw.go) allocate nothing once warm
// either, serial and split between three image workers.
func TestWinogradConvDoesNotAllocate(t *testing.T) {
	if !useAVX512 && !useAVX2 {
		t.Skip("no AVX-512 or AVX2: the Winograd path is never taken")
	}
	defer func(w func() int, gr, mc int, mw float64) {
		imageWorkers, imageGrain, winogradMinChannels, winogradMaxWaste = w, gr, mc, mw
	}(imageWorkers, imageGrain, winogradMinChannels, winogradMaxWaste)
	imageGrain, winogradMinChannels, winogradMaxWaste = 1, 8, 4
	for _, workers := range []int{1, 3} {
		SetImageWorkers(workers)
		for _, c := range winogradCases {
			op, gi, gw, in, dy := convOps(t, c, tensor.Float32)
			for _, r := range []struct {
				what string
				f    func(...G.Value) (G.Value, error)
				v    []G.Value
			}{{"forward", op.Do, in}, {"dx", gi.Do, []G.Value{dy, in[1]}}, {"dw", gw.Do, []G.Value{in[0], dy}}} {
				if _, err := r.f(r.v...); err != nil {
					t.Fatal(err)
				}
				if a := testing.AllocsPerRun(5, func() { _, _ = r.f(r.v...) }); a != 0 && !raceBuild {
					t.Errorf("workers=%d %v %s: %.0f allocations per run", workers, c, r.what, a)
				}
			}
			if n := 36 * winogradStride(c.oc*c.c); len(op.wpack) != n || len(gi.wpack) != n {
				t.Errorf("%v: kernel buffers hold %d and %d values, not the Winograd transform's %d", c, len(op.wpack), len(gi.wpack), n)
			}
		}
	}
}

// A split convolution's image workers claim chunks as they come, so one
// that woke late in the op's first call (a pool goroutine on a loaded
// machine) and claimed none can meet its first chunk calls later: its
// scratch must be ready by then. (TestWinogradConvDoesNotAllocate failed
// so now and then under load.) At GOMAXPROCS 1 the caller claims every
// chunk of the first call, the pool's goroutines running only once it
// waits; the test then gives the caller worker 1's scratch, and the next
// call must allocate nothing: forward, input and weight gradients, on
// the Winograd, implicit, column-matrix, phase and direct paths.
func TestConvWorkerScratchReady(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector allocates")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	defer func(w func() int, gr, mc int, mw float64) {
		imageWorkers, imageGrain, winogradMinChannels, winogradMaxWaste = w, gr, mc, mw
	}(imageWorkers, imageGrain, winogradMinChannels, winogradMaxWaste)
	imageGrain, winogradMinChannels, winogradMaxWaste = 1, 8, 4
	SetImageWorkers(3)
	split := 0
	check := func(what string, f func(...G.Value) (G.Value, error), v []G.Value, swap func() bool) {
		t.Helper()
		if _, err := f(v...); err != nil {
			t.Fatal(err)
		}
		if !swap() {
			return // one chunk: no split
		}
		split++
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		before := m.Mallocs
		if _, err := f(v...); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&m)
		if n := m.Mallocs - before; n != 0 {
			t.Errorf("%s: %d allocations with the scratch of a worker that claimed no chunk in the first call", what, n)
		}
	}
	for _, dt := range dtypes {
		cases := convCases
		if dt == tensor.Float32 && (useAVX512 || useAVX2) {
			// (In float64, and in float32 without this package's own
			// multiply kernels (purego, not amd64), their multiplies
			// go through package blas, large enough for its
			// goroutines, which allocate.)
			cases = append(winogradCases[:len(winogradCases):len(winogradCases)], cases...)
		}
		for _, c := range cases {
			op, gi, gw, in, dy := convOps(t, c, dt)
			check(fmt.Sprint(dt, c, " forward"), op.Do, in, func() bool { return swapWorkers(op.ws) })
			check(fmt.Sprint(dt, c, " dx"), gi.Do, []G.Value{dy, in[1]}, func() bool { return swapWorkers(gi.ws) })
			check(fmt.Sprint(dt, c, " dw"), gw.Do, []G.Value{in[0], dy}, func() bool { return swapWorkers(gw.ws) })
		}
		g := G.NewGraph()
		x, w := randT(dt, 1, -1, 1, 4, 6, 9, 9), randT(dt, 2, -1, 1, 12, 2, 3, 3)
		y, err := Conv2d(node(g, x, "x"), node(g, w, "w"), nil, Conv2dOpts{Padding: [2]int{1, 1}, Groups: 3})
		if err != nil {
			t.Fatal(err)
		}
		op := y.Op().(*directConvOp)
		dy := randT(dt, 4, -1, 1, op.d.g.yShape()...)
		gi := &directGradOp{base: newBase("Conv2dGradInput"), fwd: op}
		gw := &directGradOp{base: newBase("Conv2dGradWeight"), fwd: op, weight: true}
		check(fmt.Sprint(dt, " direct forward"), op.Do, []G.Value{x, w}, func() bool { return swapWorkers(op.ws) })
		check(fmt.Sprint(dt, " direct dx"), gi.Do, []G.Value{dy, w}, func() bool { return swapWorkers(gi.ws) })
		check(fmt.Sprint(dt, " direct dw"), gw.Do, []G.Value{x, dy}, func() bool { return swapWorkers(gw.ws) })
	}
	want := 20
	if !useAVX512 && !useAVX2 {
		want = 10 // without the Winograd cases
	}
	if split < want {
		t.Errorf("%d passes split between image workers, want %d or more", split, want)
	}
}

// swapWorkers swaps the scratch of workers 0 and 1 of a split, when there
// was one. A convolution's weight gradient keeps its partial sums in the
// same slice, by part rather than by worker: they stay.
func swapWorkers[S convScratch | directScratch](ws []S) bool {
	if len(ws) < 2 {
		return false
	}
	ws[0], ws[1] = ws[1], ws[0]
	if cs, ok := any(ws).([]convScratch); ok {
		cs[0].acc, cs[1].acc = cs[1].acc, cs[0].acc
	}
	return true
}
