package ops

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// convOps builds c's convolution and returns its op and the ops of its
// input and weight gradients, with inputs x, w, (b) and an output gradient.
func convOps(t *testing.T, c convCase, dt tensor.Dtype) (*convOp, *convGradInputOp, *convGradWeightOp, []G.Value, G.Value) {
	t.Helper()
	defer func(d bool) { directUngrouped = d }(directUngrouped)
	directUngrouped = false // the paths of convOp, whatever the geometry
	g := G.NewGraph()
	ins := c.inputs(dt)
	ns := make([]*G.Node, len(ins))
	vs := make([]G.Value, len(ins))
	for i, in := range ins {
		ns[i], vs[i] = node(g, in, fmt.Sprintf("in%d", i)), in
	}
	y, err := c.build(g, ns)
	if err != nil {
		t.Fatal(err)
	}
	op := y.Op().(*convOp)
	dy := randT(dt, 11, -1, 1, op.g.yShape()...)
	return op, &convGradInputOp{base: newBase("Conv2dGradInput"), g: op.g},
		&convGradWeightOp{base: newBase("Conv2dGradWeight"), g: op.g}, vs, dy
}

// convPass runs forward, input gradient and weight gradient of c with the
// given image workers (grain 1, so that every case splits) and returns
// their values.
func convPass(t *testing.T, c convCase, dt tensor.Dtype, workers int) (y, dx, dw []float64) {
	t.Helper()
	defer func(w func() int, gr int) { imageWorkers, imageGrain = w, gr }(imageWorkers, imageGrain)
	SetImageWorkers(workers)
	imageGrain = 1
	op, gi, gw, in, dy := convOps(t, c, dt)
	do := func(f func(...G.Value) (G.Value, error), v ...G.Value) []float64 {
		t.Helper()
		r, err := f(v...)
		if err != nil {
			t.Fatal(err)
		}
		return vals(r)
	}
	return do(op.Do, in...), do(gi.Do, dy, in[1]), do(gw.Do, in[0], dy)
}

func sameBits(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("%s[%d] = %v, want %v bit for bit", what, i, got[i], want[i])
		}
	}
}

// Splitting a convolution's batch between image workers gives the serial
// forward and input gradient bit for bit (every multiply is the serial
// one); the weight gradient sums per-worker partial sums in worker order:
// the same bits on every run with a given count, and within rounding of the
// serial sum.
func TestConv2dImageWorkersMatchSerial(t *testing.T) {
	cases := append([]convCase{
		{n: 7, c: 4, h: 6, w: 6, oc: 4, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}, bias: true}, // dx as a convolution
		{n: 6, c: 2, h: 6, w: 6, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},             // dx through col2im
	}, append(convCases, phaseCases...)...)
	withColumns(t, func(t *testing.T) {
		for _, dt := range dtypes {
			for _, c := range cases {
				name := fmt.Sprintf("%v/%v", dt, c)
				y1, dx1, dw1 := convPass(t, c, dt, 1)
				for _, w := range []int{2, 3} {
					y, dx, dw := convPass(t, c, dt, w)
					sameBits(t, fmt.Sprintf("%s workers=%d y", name, w), y, y1)
					sameBits(t, fmt.Sprintf("%s workers=%d dx", name, w), dx, dx1)
					_, _, again := convPass(t, c, dt, w)
					sameBits(t, fmt.Sprintf("%s workers=%d dw, second run", name, w), again, dw)
					assertClose(t, fmt.Sprintf("%s workers=%d dw", name, w), dw, dw1, tol(dt))
				}
			}
		}
	})
}

// With image workers, the ops still allocate nothing once warm.
func TestConv2dImageWorkersDoNotAllocate(t *testing.T) {
	defer func(w func() int, gr int) { imageWorkers, imageGrain = w, gr }(imageWorkers, imageGrain)
	SetImageWorkers(3)
	imageGrain = 1
	for _, dt := range dtypes {
		for _, c := range convCases {
			op, gi, gw, in, dy := convOps(t, c, dt)
			for _, r := range []struct {
				what string
				f    func(...G.Value) (G.Value, error)
				v    []G.Value
			}{{"forward", op.Do, in}, {"dx", gi.Do, []G.Value{dy, in[1]}}, {"dw", gw.Do, []G.Value{in[0], dy}}} {
				if _, err := r.f(r.v...); err != nil {
					t.Fatal(err)
				}
				if a := testing.AllocsPerRun(5, func() { _, _ = r.f(r.v...) }); a != 0 && !raceBuild {
					t.Errorf("%v %v %s: %.0f allocations per run", dt, c, r.what, a)
				}
			}
		}
	}
}

type panicPart struct{ at int }

func (p panicPart) run(i, n int) {
	if i == p.at {
		panic(fmt.Sprintf("part %d of %d failed", i, n))
	}
}

// A part's panic reaches runParts's caller (where the engine recovers it),
// whichever goroutine ran the part, and the pool keeps working after it:
// with callers and the pool blocking at once and with them polling
// (SetSpinWait), where the caller may see its parts done before wg.Wait.
func TestRunPartsRaisesPanicsOnCaller(t *testing.T) {
	defer SetSpinWait(-1)
	for _, spin := range []time.Duration{0, 10 * time.Millisecond} {
		SetSpinWait(spin)
		for round := 0; round < 50; round++ {
			for _, at := range []int{0, 2} {
				var pr partRun
				got := func() (r any) {
					defer func() { r = recover() }()
					runParts(panicPart{at}, 3, &pr)
					return nil
				}()
				if want := fmt.Sprintf("part %d of 3 failed", at); got != want {
					t.Fatalf("spin %v, round %d, panic in part %d: caller recovered %v, want %q", spin, round, at, got, want)
				}
			}
			var pr partRun
			runParts(panicPart{-1}, 3, &pr)
		}
	}
}

// Every part's writes are visible to the caller when runParts returns,
// whether it waited on the WaitGroup or saw the parts done while polling.
func TestRunPartsReturnsAfterEveryPart(t *testing.T) {
	defer SetSpinWait(-1)
	for _, spin := range []time.Duration{0, 10 * time.Millisecond} {
		SetSpinWait(spin)
		p := &markParts{}
		for round := 1; round <= 200; round++ {
			p.round = round
			runParts(p, 3, &p.pr)
			for i, r := range p.done {
				if r != round {
					t.Fatalf("spin %v: after runParts of round %d, part %d last ran in round %d", spin, round, i, r)
				}
			}
		}
	}
}

type markParts struct {
	round int
	done  [3]int
	pr    partRun
}

// run marks part i after some work, so that a caller returning before its
// parts are done would find an older mark.
func (p *markParts) run(i, _ int) {
	x := 1.0
	for k := 0; k < 20000; k++ {
		x = x*1.0000001 + 1e-9
	}
	if x > 0 {
		p.done[i] = p.round
	}
}

// Scratch left over from an earlier run never reaches a result: with every
// worker's column, grid and partial-sum buffers filled with NaN between two
// runs, the second gives the first's bits (the padded planes, the grid's
// columns outside the image, the slots of a short last chunk and the tails
// the kernels read are all written before they are read).
func TestConv2dStaleScratch(t *testing.T) {
	poison := func(ws []convScratch) {
		for i := range ws {
			for _, p := range []any{ws[i].cols, ws[i].tmp, ws[i].acc} {
				switch s := p.(type) {
				case []float32:
					for j := range s {
						s[j] = float32(math.NaN())
					}
				case []float64:
					for j := range s {
						s[j] = math.NaN()
					}
				}
			}
		}
	}
	withColumns(t, func(t *testing.T) {
		for _, dt := range dtypes {
			for _, c := range append(convCases, phaseCases...) {
				op, gi, gw, in, dy := convOps(t, c, dt)
				for _, r := range []struct {
					what string
					f    func(...G.Value) (G.Value, error)
					v    []G.Value
					ws   *[]convScratch
				}{{"forward", op.Do, in, &op.ws}, {"dx", gi.Do, []G.Value{dy, in[1]}, &gi.ws}, {"dw", gw.Do, []G.Value{in[0], dy}, &gw.ws}} {
					v, err := r.f(r.v...)
					if err != nil {
						t.Fatal(err)
					}
					first := vals(v)
					poison(*r.ws)
					if v, err = r.f(r.v...); err != nil {
						t.Fatal(err)
					}
					sameBits(t, fmt.Sprintf("%v %v %s after stale scratch", dt, c, r.what), vals(v), first)
				}
			}
		}
	})
}

// The weight gradient multiplies by the padding its forward kept only when
// it is given the input that forward padded: the same bits as padding the
// input again, and for another input, that input's gradient, not the
// forward's.
func TestConv2dGradWeightKeptPadding(t *testing.T) {
	defer func(w float64, o int) { implicitWaste, implicitStridedOut = w, o }(implicitWaste, implicitStridedOut)
	implicitWaste, implicitStridedOut = 1, 0
	used := 0
	for _, c := range convCases {
		op, _, fresh, in, dy := convOps(t, c, tensor.Float32)
		op.pad.keep = true
		kept := &convGradWeightOp{base: newBase("Conv2dGradWeight"), g: op.g, fwd: op}
		other := randT(tensor.Float32, 12, -1, 1, op.g.xShape()...)
		if _, err := op.Do(in...); err != nil {
			t.Fatal(err)
		}
		if op.pad.padFor(data[float32](in[0].(*tensor.Dense)), winogradFits[float32](&op.g)) != nil {
			used++
		}
		for _, x := range []G.Value{in[0], other} {
			want, err := fresh.Do(x, dy)
			if err != nil {
				t.Fatal(err)
			}
			wantV := vals(want)
			got, err := kept.Do(x, dy)
			if err != nil {
				t.Fatal(err)
			}
			sameBits(t, fmt.Sprintf("%v dw (input padded by the forward: %v)", c, x == in[0]), vals(got), wantV)
		}
	}
	if mmKernels() && used == 0 {
		t.Error("no case kept its padding: the test checks nothing")
	}
}

// lateStart is a split whose pool goroutines start only when the caller
// has finished: every piece is then the caller's.
type lateStart struct {
	pr     partRun
	pieces int
	took   [][]int
	caller chan struct{}
}

func (p *lateStart) run(i, n int) {
	if i > 0 {
		<-p.caller
	}
	for c := p.pr.claim(); c < p.pieces; c = p.pr.claim() {
		p.took[i] = append(p.took[i], c)
	}
	if i == 0 {
		close(p.caller)
	}
}

// The goroutines of a split claim its pieces: one that starts late (woken
// from sleep, or kept off its core) leaves them to the others instead of
// making them wait for its fixed share; and every runParts call starts
// claiming from the first piece again.
func TestRunPartsLateGoroutineLeavesItsShare(t *testing.T) {
	p := &lateStart{pieces: 10}
	for run := 0; run < 2; run++ {
		p.took, p.caller = make([][]int, 3), make(chan struct{})
		runParts(p, 3, &p.pr)
		if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; fmt.Sprint(p.took[0]) != fmt.Sprint(want) || len(p.took[1])+len(p.took[2]) != 0 {
			t.Fatalf("run %d: pieces taken by the caller %v, by the late goroutines %v and %v; want all by the caller", run, p.took[0], p.took[1], p.took[2])
		}
	}
}

// A caller that has run out of pieces while a part on the pool has not
// started marks the pool contended (its goroutines then block at once
// instead of polling), and a split whose parts all started clears it; a
// pool goroutine does not poll while it is set.
func TestSplitWithUnstartedPartMarksContended(t *testing.T) {
	defer SetSpinWait(-1)
	defer contended.Store(false)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // polling needs two Ps
	SetSpinWait(10 * time.Millisecond)
	var s partRun
	s.left.Store(2)
	s.begun.Store(1) // one of the two pool parts has started
	s.spinUntilDone(3)
	if !contended.Load() {
		t.Fatal("a split with a pool part not started left the pool uncontended")
	}
	ch := make(chan partMsg, 1)
	ch <- partMsg{}
	if _, ok := pollWork(ch); ok {
		t.Fatal("a contended pool goroutine polled for work instead of blocking")
	}
	s.left.Store(0)
	s.begun.Store(2)
	s.spinUntilDone(3)
	if contended.Load() {
		t.Fatal("a split whose pool parts all started left the pool contended")
	}
	if _, ok := pollWork(ch); !ok {
		t.Fatal("an uncontended pool goroutine did not take the work waiting for it")
	}
}
