package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
)

// Gradients produced by ops that can write into a given value (the matrix
// multiplies of twoLayer) land in the store directly, and a following
// accumulating run (which goes through the copy) still adds correctly.
func TestDirectGradientsThenAccumulate(t *testing.T) {
	e := newEngine(t, tensor.Float64, false)
	b1, b2 := batchOf(4, 1), batchOf(4, 2)
	ctx := context.Background()
	if _, err := e.Run(ctx, module.Train, b1, false, 1); err != nil {
		t.Fatal(err)
	}
	c := e.graphs[key{mode: module.Train, batch: 4}]
	direct := 0
	for _, gb := range c.grads {
		if gb.direct && c.exec.wroteDirect(gb.node) {
			direct++
		}
	}
	if direct == 0 {
		t.Fatalf("no gradient of %d was written into the store directly", len(c.grads))
	}
	g1 := grads(e.Store())
	e.Run(ctx, module.Train, b2, false, 1)
	g2 := grads(e.Store())
	e.Run(ctx, module.Train, b1, false, 1)
	e.Run(ctx, module.Train, b2, true, 1)
	g := grads(e.Store())
	for i := range g {
		if want := g1[i] + g2[i]; math.Abs(g[i]-want) > 1e-12 {
			t.Fatalf("grad[%d] = %v after a direct run and an accumulating one, want %v", i, g[i], want)
		}
	}
}

// A steady-state training step of an MLP (fused ops, reshape, logged
// metrics, gradient gather) allocates nothing. Widths of at most 64 keep
// gonum's multiply on its serial path, which allocates nothing either.
func TestExecutorStepAllocatesNothing(t *testing.T) {
	mod := &models.MLP{Sizes: []int{64, 32, 16, 10}}
	b := module.NewBuilder(tensor.Float32)
	if err := mod.Configure(b); err != nil {
		t.Fatal(err)
	}
	specs, _ := b.Specs()
	st, err := module.NewStore(specs, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	fields := []data.Field{{Name: "x", Shape: []int{1, 8, 8}}, {Name: "y"}}
	e := New(mod, st, fields, 1)
	r := rand.New(rand.NewPCG(1, 2))
	batch := &data.Batch{Size: 8, Fields: fields, Data: [][]float32{make([]float32, 8*64), make([]float32, 8)}}
	for i := range batch.Data[0] {
		batch.Data[0][i] = r.Float32()
	}
	for i := range batch.Data[1] {
		batch.Data[1][i] = float32(r.IntN(10))
	}
	ctx := context.Background()
	var loss float64
	run := func() {
		res, err := e.Run(ctx, module.Train, batch, false, 1)
		if err != nil {
			t.Fatal(err)
		}
		loss = res.Loss
	}
	run()
	if n := testing.AllocsPerRun(20, run); n != 0 {
		t.Fatalf("%v allocations per training step, want 0", n)
	}
	if math.IsNaN(loss) || loss < 1 || loss > 4 {
		t.Fatalf("loss %v: want the cross-entropy of an untrained 10-class model, about ln 10", loss)
	}
	// The fused Linear's weight and bias gradient ops write into the store
	// (UsePreallocDo): no gradient goes through the gather copy.
	c := e.graphs[key{mode: module.Train, batch: 8}]
	for _, gb := range c.grads {
		if !gb.direct || !c.exec.wroteDirect(gb.node) {
			t.Errorf("gradient of %s was copied, not written into the store", gb.name)
		}
	}
}
