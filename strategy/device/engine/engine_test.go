package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
)

// twoLayer is a small tanh network built from Gorgonia's own ops: enough
// kinds of op (matmul, broadcast add, tanh, reshape, mean) to exercise the
// executor's schedule, preallocation and leaf binding.
type twoLayer struct{}

func (twoLayer) Configure(b *module.Builder) error {
	b.Param("w1", []int{5, 7}, module.Normal(0, 0.5))
	b.Param("b1", []int{7}, module.Normal(0, 0.1))
	b.Param("w2", []int{7, 1}, module.Normal(0, 0.5))
	return nil
}

func (twoLayer) TrainingStep(s *module.Step) (*G.Node, error) {
	h := G.Must(G.Mul(s.Input("x"), s.Param("w1")))
	h = G.Must(G.BroadcastAdd(h, s.Param("b1"), nil, []byte{0}))
	h = G.Must(G.Tanh(h))
	y := G.Must(G.Reshape(G.Must(G.Mul(h, s.Param("w2"))), []int{s.BatchSize()}))
	d := G.Must(G.Sub(y, s.Input("y")))
	loss := G.Must(G.Mean(G.Must(G.Square(d))))
	s.Log("mse", loss)
	return loss, nil
}

func batchOf(n int, seed uint64) *data.Batch {
	r := rand.New(rand.NewPCG(seed, 2))
	x := make([]float32, n*5)
	y := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for i := range y {
		y[i] = float32(r.NormFloat64())
	}
	return &data.Batch{Size: n, Fields: []data.Field{{Name: "x", Shape: []int{5}}, {Name: "y"}}, Data: [][]float32{x, y}}
}

func newEngine(t *testing.T, dt tensor.Dtype, tape bool) *Engine {
	t.Helper()
	return newEngineOf(t, twoLayer{}, dt, tape)
}

// newEngineOf is an engine of m, whose inputs are batchOf's.
func newEngineOf(t *testing.T, m module.Module, dt tensor.Dtype, tape bool) *Engine {
	t.Helper()
	return newEngineFields(t, m, dt, tape, []data.Field{{Name: "x", Shape: []int{5}}, {Name: "y"}})
}

// newEngineFields is an engine of m whose inputs are fields.
func newEngineFields(t *testing.T, m module.Module, dt tensor.Dtype, tape bool, fields []data.Field) *Engine {
	t.Helper()
	b := module.NewBuilder(dt)
	if err := m.Configure(b); err != nil {
		t.Fatal(err)
	}
	specs, _ := b.Specs()
	st, err := module.NewStore(specs, dt, 9)
	if err != nil {
		t.Fatal(err)
	}
	e := New(m, st, fields, 9)
	e.Tape = tape
	return e
}

// trainBoth runs a training step of b on the executor's engine and the
// tape's.
func trainBoth(t *testing.T, ex, tp *Engine, b *data.Batch) (Result, Result) {
	t.Helper()
	r1, err := ex.Run(context.Background(), module.Train, b, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := tp.Run(context.Background(), module.Train, b, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	return r1, r2
}

func grads(s *module.Store) []float64 {
	if g := s.Grad32(); g != nil {
		out := make([]float64, len(g))
		for i, v := range g {
			out[i] = float64(v)
		}
		return out
	}
	return append([]float64(nil), s.Grad64()...)
}

// The executor and TapeMachine agree on loss, logged values and gradients,
// over consecutive runs with different inputs and batch sizes (which checks
// that reused buffers do not leak values between runs).
func TestExecutorMatchesTapeMachine(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		ex, tp := newEngine(t, dt, false), newEngine(t, dt, true)
		for i, n := range []int{8, 8, 3, 8} {
			b := batchOf(n, uint64(i))
			r1, r2 := trainBoth(t, ex, tp, b)
			if r1.Loss != r2.Loss || math.IsNaN(r1.Loss) {
				t.Fatalf("%v run %d: loss %v (executor) vs %v (tape)", dt, i, r1.Loss, r2.Loss)
			}
			if r1.Metrics[0].Value != r1.Loss || r2.Metrics[0].Value != r2.Loss {
				t.Fatalf("%v run %d: logged mse %v / %v, want the loss %v", dt, i, r1.Metrics[0].Value, r2.Metrics[0].Value, r1.Loss)
			}
			g1, g2 := grads(ex.Store()), grads(tp.Store())
			nonzero := false
			for k := range g1 {
				if g1[k] != g2[k] {
					t.Fatalf("%v run %d: grad[%d] %v (executor) vs %v (tape)", dt, i, k, g1[k], g2[k])
				}
				nonzero = nonzero || g1[k] != 0
			}
			if !nonzero {
				t.Fatalf("%v run %d: all gradients are zero", dt, i)
			}
		}
	}
}

// Gradients match central differences of the loss, so the engine's gather
// into the flat buffer puts each gradient at its parameter's offset.
func TestGradientsLandAtTheirOffsets(t *testing.T) {
	e := newEngine(t, tensor.Float64, false)
	b := batchOf(6, 42)
	if _, err := e.Run(context.Background(), module.Train, b, false, 1); err != nil {
		t.Fatal(err)
	}
	got := grads(e.Store())
	p := e.Store().Data64()
	for i := 0; i < e.Store().NumParams(); i++ {
		const h = 1e-6
		old := p[i]
		p[i] = old + h
		rp, _ := e.Run(context.Background(), module.Train, b, false, 1)
		p[i] = old - h
		rm, _ := e.Run(context.Background(), module.Train, b, false, 1)
		p[i] = old
		num := (rp.Loss - rm.Loss) / (2 * h)
		if math.Abs(num-got[i]) > 1e-6*math.Max(1, math.Abs(num)) {
			t.Errorf("param %d: gradient %v, central difference %v", i, got[i], num)
		}
	}
}

func TestAccumulateAndScale(t *testing.T) {
	e := newEngine(t, tensor.Float64, false)
	b1, b2 := batchOf(4, 1), batchOf(4, 2)
	run := func(b *data.Batch, accumulate bool, scale float64) {
		t.Helper()
		if _, err := e.Run(context.Background(), module.Train, b, accumulate, scale); err != nil {
			t.Fatalf("Run(accumulate=%v, scale=%v): %v", accumulate, scale, err)
		}
	}
	run(b1, false, 1)
	g1 := grads(e.Store())
	run(b2, false, 1)
	g2 := grads(e.Store())
	run(b1, false, 0.5)
	run(b2, true, 0.5)
	g := grads(e.Store())
	if slices.Equal(g1, g2) {
		t.Fatal("the two batches give the same gradient: the test cannot tell accumulation from overwriting")
	}
	for i := range g {
		if want := 0.5*g1[i] + 0.5*g2[i]; math.Abs(g[i]-want) > 1e-12 {
			t.Fatalf("grad[%d] = %v, want %v", i, g[i], want)
		}
	}
}

func TestBadBatchIsAnError(t *testing.T) {
	e := newEngine(t, tensor.Float32, false)
	b := batchOf(4, 1)
	b.Data[0] = b.Data[0][:7]
	_, err := e.Run(context.Background(), module.Train, b, false, 1)
	if err == nil || err.Error() != `batch field "x" holds 7 values for 4 rows, the graph input "x" expects 20 (shape [5] per row)` {
		t.Fatalf("err = %v", err)
	}
	b = batchOf(4, 1)
	b.Fields = []data.Field{{Name: "x", Shape: []int{6}}, {Name: "y"}}
	_, err = e.Run(context.Background(), module.Train, b, false, 1)
	if err == nil || err.Error() != `batch field 0 is "x" with shape [6], the model was set up for "x" with shape [5]` {
		t.Fatalf("err = %v", err)
	}
}
