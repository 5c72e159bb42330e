package engine_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
)

// stockModel is a user's model written with Gorgonia's stock ops: one
// parameter "x", out = build(x), the loss Σ (out - target)² (out itself
// when it is a scalar), and a PredictStep returning out.
type stockModel struct {
	shape []int
	build func(s *module.Step, x *G.Node) (*G.Node, error)
}

func (m *stockModel) Configure(b *module.Builder) error {
	b.Param("x", m.shape, module.Normal(0, 1))
	return nil
}

func (m *stockModel) TrainingStep(s *module.Step) (*G.Node, error) {
	out, err := m.build(s, s.Param("x"))
	if err != nil || out.Shape().TotalSize() == 1 {
		return out, err
	}
	return nn.MSELoss(out, G.NewConstant(targetOf(s.Dtype(), out.Shape()), G.WithName("target")), nn.WithReduction(nn.ReduceSum)), nil
}

func (m *stockModel) PredictStep(s *module.Step) (*G.Node, error) { return m.build(s, s.Param("x")) }

func targetOf(dt tensor.Dtype, shape tensor.Shape) *tensor.Dense {
	t := tensor.New(tensor.WithShape(shape.Clone()...), tensor.Of(dt))
	for i, v := range targetVals(shape.TotalSize()) {
		if dt == tensor.Float32 {
			t.Float32s()[i] = float32(v)
		} else {
			t.Float64s()[i] = v
		}
	}
	return t
}

func targetVals(n int) []float64 {
	t := make([]float64, n)
	for i := range t {
		t[i] = 0.3 * math.Cos(0.7*float64(i)+0.2)
	}
	return t
}

// stockEngine is an engine of m over a store whose "x" holds xs.
func stockEngine(t *testing.T, m *stockModel, dt tensor.Dtype, tape bool, xs []float64) (*engine.Engine, *module.Store) {
	t.Helper()
	b := module.NewBuilder(dt)
	if err := m.Configure(b); err != nil {
		t.Fatal(err)
	}
	specs, _ := b.Specs()
	st, err := module.NewStore(specs, dt, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range xs {
		if dt == tensor.Float32 {
			st.Data32()[i] = float32(v)
		} else {
			st.Data64()[i] = v
		}
	}
	e := engine.New(m, st, nil, 1)
	e.Tape = tape
	return e, st
}

var oneRow = &data.Batch{Size: 1}

func xVals(n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = math.Sin(1.37*float64(i) + 0.4)
	}
	return x
}

func storeGrad(st *module.Store) []float64 {
	if g := st.Grad32(); g != nil {
		out := make([]float64, len(g))
		for i, v := range g {
			out[i] = float64(v)
		}
		return out
	}
	return append([]float64(nil), st.Grad64()...)
}

func denseVals(d *tensor.Dense) []float64 {
	if d.Dtype() == tensor.Float32 {
		out := make([]float64, 0, d.Size())
		for _, v := range d.Float32s() {
			out = append(out, float64(v))
		}
		return out
	}
	return append([]float64(nil), d.Float64s()...)
}

func near(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(got[i] - want[i]); d > tol*(1+math.Abs(want[i])) || d != d {
			t.Fatalf("%s[%d] = %.9g, want %.9g", what, i, got[i], want[i])
		}
	}
}

// reduceRef reduces x of shape s over axes by walking every element's
// multi-index (max, or a sum divided by div), and returns, per element of
// x, the output element it lands in.
func reduceRef(x []float64, s []int, axes []int, isMax bool, div float64) (out []float64, dest []int) {
	reduced := make([]bool, len(s))
	for _, a := range axes {
		reduced[a] = true
	}
	size := 1
	for i, d := range s {
		if !reduced[i] {
			size *= d
		}
	}
	out = make([]float64, size)
	if isMax {
		for i := range out {
			out[i] = math.Inf(-1)
		}
	}
	idx := make([]int, len(s))
	for _, v := range x {
		o := 0
		for k, d := range s {
			if !reduced[k] {
				o = o*d + idx[k]
			}
		}
		dest = append(dest, o)
		if isMax {
			out[o] = math.Max(out[o], v)
		} else {
			out[o] += v / div
		}
		for d := len(s) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < s[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out, dest
}

// Gorgonia v0.9.17's Sum, Mean and Max over a middle axis of a tensor of
// four axes or more add up the wrong elements (G.Mean(x, 2, 3) of
// [N, C, H, W], the global average pool, among them). On the engine's
// executor a model using them gets the right forward values, loss and
// gradients, checked against an index-walking reference; the TapeMachine
// refuses the graph, naming the op, its axes and shape, and the fix.
func TestStockReductionsAreRightOrRefused(t *testing.T) {
	type red struct {
		call  string
		shape []int
		axes  []int
		f     func(x *G.Node) (*G.Node, error)
		right bool // Gorgonia computes it right: the TapeMachine runs it too
	}
	cases := []red{
		{"Mean", []int{2, 3, 5, 4}, []int{2, 3}, func(x *G.Node) (*G.Node, error) { return G.Mean(x, 2, 3) }, false},
		{"Sum", []int{2, 3, 5, 4}, []int{1, 2}, func(x *G.Node) (*G.Node, error) { return G.Sum(x, 1, 2) }, true},
		{"Mean", []int{2, 3, 2, 4}, []int{2}, func(x *G.Node) (*G.Node, error) { return G.Mean(x, 2) }, true},
		{"Sum", []int{2, 3, 5, 4}, []int{2}, func(x *G.Node) (*G.Node, error) { return G.Sum(x, 2) }, false},
		{"Mean", []int{4, 4, 4, 3}, []int{2, 3}, func(x *G.Node) (*G.Node, error) { return G.Mean(x, 2, 3) }, false},
		{"Max", []int{2, 3, 5, 4}, []int{2}, func(x *G.Node) (*G.Node, error) { return G.Max(x, 2) }, false},
		{"Max", []int{2, 3, 5, 4}, []int{2, 3}, func(x *G.Node) (*G.Node, error) { return G.Max(x, 2, 3) }, false},
	}
	ctx := context.Background()
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		tol := 1e-12
		if dt == tensor.Float32 {
			tol = 2e-6
		}
		for _, c := range cases {
			name := fmt.Sprintf("G.%s%v over %v/%v", c.call, c.shape, c.axes, dt)
			m := &stockModel{shape: c.shape, build: func(_ *module.Step, x *G.Node) (*G.Node, error) { return c.f(x) }}
			n := 1
			for _, d := range c.shape {
				n *= d
			}
			xs := xVals(n)
			div := 1.0
			if c.call == "Mean" {
				div = float64(n)
				for i, d := range c.shape {
					if !containsInt(c.axes, i) {
						div /= float64(d)
					}
				}
			}
			want, dest := reduceRef(xs, c.shape, c.axes, c.call == "Max", div)
			tgt := targetVals(len(want))
			wantLoss := 0.0
			for i, w := range want {
				wantLoss += (w - tgt[i]) * (w - tgt[i])
			}
			wantGrad := make([]float64, n)
			for i, o := range dest {
				d := 2 * (want[o] - tgt[o])
				switch {
				case c.call != "Max":
					wantGrad[i] = d / div
				case xs[i] == want[o]:
					wantGrad[i] = d
				}
			}

			paths := []bool{false}
			if c.right {
				paths = append(paths, true)
			}
			for _, tape := range paths {
				e, st := stockEngine(t, m, dt, tape, xs)
				for run := 0; run < 2; run++ { // the second run reuses the executor's buffers
					r, err := e.Run(ctx, module.Predict, oneRow, false, 1)
					if err != nil {
						t.Fatalf("%s (tape %v): predict: %v", name, tape, err)
					}
					near(t, name+" output", denseVals(r.Output), want, tol)
					r, err = e.Run(ctx, module.Train, oneRow, false, 1)
					if err != nil {
						t.Fatalf("%s (tape %v): train: %v", name, tape, err)
					}
					near(t, name+" loss", []float64{r.Loss}, []float64{wantLoss}, tol)
					near(t, name+" gradient", storeGrad(st), wantGrad, tol)
				}
			}
			if c.right {
				continue
			}
			tp, _ := stockEngine(t, m, dt, true, xs)
			_, err := tp.Run(ctx, module.Predict, oneRow, false, 1)
			fix := "run it on the engine's executor (leave Engine.Tape false), which computes it right, or use nn.Sum(x, " + strings.Trim(strings.ReplaceAll(fmt.Sprint(c.axes), " ", ", "), "[]") + ") or nn.Mean(x, "
			if c.call == "Max" {
				fix = "run it on the engine's executor (leave Engine.Tape false), which computes it right, or G.Transpose the axes to the end and take G.Max over those"
			}
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("over axes %v of a %v tensor gives wrong values in Gorgonia v0.9.17 on the TapeMachine (Engine.Tape)", c.axes, tensor.Shape(c.shape))) ||
				!strings.Contains(err.Error(), fix) || !strings.Contains(err.Error(), "computed from x") {
				t.Errorf("%s on the TapeMachine: err = %v", name, err)
			}
		}
	}
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// G.BatchNorm, G.Dropout (any Gorgonia random node) and, in a training
// graph, G.GlobalAveragePool2D are refused when the graph is compiled, on
// the executor and the TapeMachine alike, with an error naming the op, the
// node, the parameter it is computed from and the fulgur replacement:
// before, they ran and gave wrong numbers (BatchNorm's float64 gradient and
// evaluation mode, Dropout in evaluation graphs) or failed with
// Gorgonia's own message (GlobalAveragePool2D has no gradient).
func TestStockOpsFulgurRefuses(t *testing.T) {
	cases := []struct {
		name  string
		shape []int
		mode  module.Mode
		build func(s *module.Step, x *G.Node) (*G.Node, error)
		want  []string
	}{
		{"BatchNorm", []int{4, 3}, module.Train, func(s *module.Step, x *G.Node) (*G.Node, error) {
			y, _, _, _, err := G.BatchNorm(x, nil, nil, 0.9, 1e-5)
			return y, err
		}, []string{"G.BatchNorm of a (4, 3) input", "use nn.NewBatchNorm1d or nn.NewBatchNorm2d", "computed from x"}},
		{"BatchNorm/predict", []int{2, 3, 2, 2}, module.Predict, func(s *module.Step, x *G.Node) (*G.Node, error) {
			y, _, _, _, err := G.BatchNorm(x, nil, nil, 0.9, 1e-5)
			return y, err
		}, []string{"G.BatchNorm of a (2, 3, 2, 2) input", "evaluation graphs normalise with the batch's statistics"}},
		{"Dropout", []int{4, 5}, module.Train, func(s *module.Step, x *G.Node) (*G.Node, error) {
			return G.Dropout(x, 0.5)
		}, []string{"a random node (4, 5) (G.Dropout", "use nn.NewDropout"}},
		{"Dropout/predict", []int{4, 5}, module.Predict, func(s *module.Step, x *G.Node) (*G.Node, error) {
			return G.Dropout(x, 0.5)
		}, []string{"G.Dropout drops values in evaluation graphs too"}},
		{"GlobalAveragePool2D", []int{2, 3, 4, 4}, module.Train, func(s *module.Step, x *G.Node) (*G.Node, error) {
			return G.GlobalAveragePool2D(x)
		}, []string{"G.GlobalAveragePool2D of a (2, 3, 4, 4) input in a training graph: it has no gradient", "use nn.Mean(x, 2, 3)", "computed from x"}},
	}
	ctx := context.Background()
	for _, c := range cases {
		for _, tape := range []bool{false, true} {
			m := &stockModel{shape: c.shape, build: c.build}
			n := 1
			for _, d := range c.shape {
				n *= d
			}
			e, _ := stockEngine(t, m, tensor.Float64, tape, xVals(n))
			_, err := e.Run(ctx, c.mode, oneRow, false, 1)
			if err == nil {
				t.Errorf("%s (tape %v): no error", c.name, tape)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s (tape %v): error %q does not say %q", c.name, tape, err, w)
				}
			}
		}
	}
}

// numGrad is the central-difference gradient of the training loss of e
// with respect to every element of the store (float64).
func numGrad(t *testing.T, e *engine.Engine, st *module.Store) []float64 {
	t.Helper()
	p := st.Data64()
	out := make([]float64, st.NumParams())
	for i := range out {
		const h = 1e-6
		old := p[i]
		p[i] = old + h
		rp, err := e.Run(context.Background(), module.Train, oneRow, false, 1)
		if err != nil {
			t.Fatal(err)
		}
		p[i] = old - h
		rm, _ := e.Run(context.Background(), module.Train, oneRow, false, 1)
		p[i] = old
		out[i] = (rp.Loss - rm.Loss) / (2 * h)
	}
	return out
}

// Gorgonia v0.9.17's float64 gradient of G.SoftMax reads the first row's
// values for every row (its float32 one is right). On the executor it is
// computed right: gradients match central differences of the loss, for
// G.SoftMax along the last axis and another, and for the log of a softmax
// in a hand-written cross-entropy. The TapeMachine refuses a float64
// training graph with one.
func TestStockSoftmaxGradientFloat64(t *testing.T) {
	onehot := func(dt tensor.Dtype) *G.Node {
		oh := tensor.New(tensor.WithShape(4, 5), tensor.Of(dt))
		for i := 0; i < 4; i++ {
			oh.Float64s()[i*5+(i*3)%5] = 1
		}
		return G.NewConstant(oh, G.WithName("onehot"))
	}
	cases := []struct {
		name  string
		shape []int
		build func(s *module.Step, x *G.Node) (*G.Node, error)
	}{
		{"SoftMax[4 5]", []int{4, 5}, func(_ *module.Step, x *G.Node) (*G.Node, error) { return G.SoftMax(x) }},
		{"SoftMax[2 3 4] axis 1", []int{2, 3, 4}, func(_ *module.Step, x *G.Node) (*G.Node, error) { return G.SoftMax(x, 1) }},
		{"SoftMax[4 5] axis 0", []int{4, 5}, func(_ *module.Step, x *G.Node) (*G.Node, error) { return G.SoftMax(x, 0) }},
		{"cross-entropy by hand", []int{4, 5}, func(s *module.Step, x *G.Node) (*G.Node, error) {
			lp := G.Must(G.Log(G.Must(G.SoftMax(x))))
			return G.Neg(G.Must(G.Mean(G.Must(G.Sum(G.Must(G.HadamardProd(onehot(s.Dtype()), lp)), 1)))))
		}},
	}
	for _, c := range cases {
		m := &stockModel{shape: c.shape, build: c.build}
		n := 1
		for _, d := range c.shape {
			n *= d
		}
		e, st := stockEngine(t, m, tensor.Float64, false, xVals(n))
		if _, err := e.Run(context.Background(), module.Train, oneRow, false, 1); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := storeGrad(st)
		near(t, c.name+" gradient", got, numGrad(t, e, st), 1e-7)

		tp, _ := stockEngine(t, m, tensor.Float64, true, xVals(n))
		_, err := tp.Run(context.Background(), module.Train, oneRow, false, 1)
		if err == nil || !strings.Contains(err.Error(), "the gradient of G.SoftMax in a float64 graph is wrong in Gorgonia v0.9.17 on the TapeMachine (Engine.Tape)") ||
			!strings.Contains(err.Error(), "or use float32, or nn.Softmax / nn.LogSoftmax") {
			t.Errorf("%s on the TapeMachine: err = %v", c.name, err)
		}
	}
}

// The gradient of G.Slice (Gorgonia's sliceIncrOp) adds into the value it
// is given; the executor holds that value across runs, so each run used to
// add the gradient again (2x, 3x...). It is zeroed first: every run gives
// 2(out - target) at the sliced elements and 0 elsewhere.
func TestStockSliceGradientOnEveryRun(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		m := &stockModel{shape: []int{5, 4}, build: func(_ *module.Step, x *G.Node) (*G.Node, error) {
			return G.Slice(x, nil, G.S(1, 3))
		}}
		xs := xVals(20)
		e, st := stockEngine(t, m, dt, false, xs)
		tgt := targetVals(10)
		want := make([]float64, 20)
		for r := 0; r < 5; r++ {
			for c := 1; c < 3; c++ {
				want[r*4+c] = 2 * (xs[r*4+c] - tgt[r*2+c-1])
			}
		}
		for run := 0; run < 3; run++ {
			if _, err := e.Run(context.Background(), module.Train, oneRow, false, 1); err != nil {
				t.Fatal(err)
			}
			near(t, fmt.Sprintf("%v run %d: gradient", dt, run), storeGrad(st), want, 1e-6)
		}
	}
}

// G.Log2, G.InverseSqrt and G.OuterProd have wrong gradients (OuterProd:
// a shape mismatch, or, for two vectors of one length, wrong values):
// refused in a training graph that differentiates through them, naming the
// replacement; their forward values are right, so a predict graph, or a
// training graph that uses them on values no parameter feeds, runs them.
func TestStockOpsWithWrongGradients(t *testing.T) {
	cases := []struct {
		name  string
		shape []int
		f     func(x *G.Node) (*G.Node, error)
		ref   func(x float64) float64
		want  string
	}{
		{"Log2", []int{6}, G.Log2, math.Log2, "G.Log2 in a training graph: its gradient is wrong in Gorgonia v0.9.17 (it divides by x/ln 2 instead of x·ln 2) (node \"log2(%"},
		{"InverseSqrt", []int{6}, G.InverseSqrt, func(x float64) float64 { return 1 / math.Sqrt(x) }, "G.InverseSqrt in a training graph: its gradient is wrong in Gorgonia v0.9.17 (-dy/(2y³) instead of -dy·y³/2) (node \"invSqrt(%"},
	}
	ctx := context.Background()
	for _, c := range cases {
		xs := xVals(6)
		for i := range xs {
			xs[i] = 1.5 + xs[i] // > 0
		}
		m := &stockModel{shape: c.shape, build: func(_ *module.Step, x *G.Node) (*G.Node, error) { return c.f(x) }}
		e, _ := stockEngine(t, m, tensor.Float64, false, xs)
		_, err := e.Run(ctx, module.Train, oneRow, false, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "computed from x): use G.") {
			t.Errorf("%s: err = %v", c.name, err)
		}
		r, err := e.Run(ctx, module.Predict, oneRow, false, 1)
		if err != nil {
			t.Fatalf("%s: predict: %v", c.name, err)
		}
		want := make([]float64, len(xs))
		for i, x := range xs {
			want[i] = c.ref(x)
		}
		near(t, c.name+" output", denseVals(r.Output), want, 1e-12)

		// On a leaf that is no parameter: no gradient flows through it.
		m = &stockModel{shape: c.shape, build: func(s *module.Step, x *G.Node) (*G.Node, error) {
			k := G.NewTensor(s.Graph(), tensor.Float64, 1, G.WithShape(6), G.WithName("k"),
				G.WithValue(tensor.New(tensor.WithShape(6), tensor.WithBacking([]float64{1, 2, 3, 4, 5, 6}))))
			return G.Add(x, G.Must(c.f(k)))
		}}
		e, _ = stockEngine(t, m, tensor.Float64, false, xs)
		if _, err := e.Run(ctx, module.Train, oneRow, false, 1); err != nil {
			t.Errorf("%s of a leaf that is no parameter, in a training graph: %v", c.name, err)
		}
	}
	m := &stockModel{shape: []int{3}, build: func(_ *module.Step, x *G.Node) (*G.Node, error) { return G.OuterProd(x, x) }}
	e, _ := stockEngine(t, m, tensor.Float64, false, xVals(3))
	_, err := e.Run(ctx, module.Train, oneRow, false, 1)
	if err == nil || !strings.Contains(err.Error(), "G.OuterProd in a training graph: its gradient is wrong in Gorgonia v0.9.17 (a shape mismatch for vectors of different lengths, wrong values for equal ones)") {
		t.Errorf("OuterProd: err = %v", err)
	}
}

// twoParams is stockModel with a second parameter "b".
type twoParams struct {
	stockModel
	bShape []int
	build2 func(a, b *G.Node) (*G.Node, error)
}

func (m *twoParams) Configure(b *module.Builder) error {
	b.Param("a", m.shape, module.Normal(0, 1))
	b.Param("b", m.bShape, module.Normal(0, 1))
	m.build = func(s *module.Step, _ *G.Node) (*G.Node, error) { return m.build2(s.Param("a"), s.Param("b")) }
	return nil
}

func (m *twoParams) TrainingStep(s *module.Step) (*G.Node, error) {
	out, err := m.build(s, nil)
	if err != nil {
		return nil, err
	}
	return nn.MSELoss(out, G.NewConstant(targetOf(s.Dtype(), out.Shape()), G.WithName("target")), nn.WithReduction(nn.ReduceSum)), nil
}

// Gorgonia differentiates G.BroadcastAdd of [2 3 4 5] and [1 3 1 5] with a
// sum over axis 2 of [2 3 4 5], which it computes wrong: the gradient of
// the broadcast operand was silently wrong. On the executor it matches
// central differences; the TapeMachine refuses the graph.
func TestStockBroadcastGradientOverAMiddleAxis(t *testing.T) {
	m := &twoParams{stockModel: stockModel{shape: []int{2, 3, 4, 5}}, bShape: []int{1, 3, 1, 5},
		build2: func(a, b *G.Node) (*G.Node, error) { return G.BroadcastAdd(a, b, nil, []byte{0, 2}) }}
	bl := module.NewBuilder(tensor.Float64)
	if err := m.Configure(bl); err != nil {
		t.Fatal(err)
	}
	specs, _ := bl.Specs()
	st, err := module.NewStore(specs, tensor.Float64, 1)
	if err != nil {
		t.Fatal(err)
	}
	copy(st.Data64(), xVals(st.NumParams()))
	e := engine.New(m, st, nil, 1)
	if _, err := e.Run(context.Background(), module.Train, oneRow, false, 1); err != nil {
		t.Fatal(err)
	}
	near(t, "gradient", storeGrad(st), numGrad(t, e, st), 1e-7)

	st2 := st.Clone()
	tp := engine.New(m, st2, nil, 1)
	tp.Tape = true
	_, err = tp.Run(context.Background(), module.Train, oneRow, false, 1)
	if err == nil || !strings.Contains(err.Error(), "G.Sum (or G.Mean, which sums) over axes [2] of a (2, 3, 4, 5) tensor gives wrong values in Gorgonia v0.9.17 on the TapeMachine") {
		t.Errorf("on the TapeMachine: err = %v", err)
	}
}
