package engine

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
)

// forwardFirst splits any valid schedule at the loss: the steps the loss
// needs first, then the pause, then the rest, every step still after its
// inputs. The schedule given to it runs every step that does not need the
// loss as early as it can (gradient ops and a forward-only metric ahead of
// the loss), an order G.Sort does not produce today but may.
func TestForwardFirstSplitsAtTheLoss(t *testing.T) {
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float64, G.WithShape(4, 3), G.WithName("x"), G.WithInit(G.RangedFrom(0)))
	w := G.NewMatrix(g, tensor.Float64, G.WithShape(3, 2), G.WithName("w"), G.WithInit(G.RangedFrom(1)))
	h := G.Must(G.Mul(x, w))
	metric := G.Must(G.Mean(G.Must(G.Square(h))))
	loss := G.Must(G.Sum(G.Must(G.Tanh(h))))
	if _, err := G.Grad(loss, w); err != nil {
		t.Fatal(err)
	}
	e, err := newExecutor(g)
	if err != nil {
		t.Fatal(err)
	}
	needs := func(a, b *G.Node) bool { // a depends on b
		seen := map[*G.Node]bool{}
		var walk func(n *G.Node) bool
		walk = func(n *G.Node) bool {
			if n == b {
				return true
			}
			if seen[n] {
				return false
			}
			seen[n] = true
			for it := g.From(n.ID()); it.Next(); {
				if walk(it.Node().(*G.Node)) {
					return true
				}
			}
			return false
		}
		return walk(a)
	}
	// Kahn's order preferring steps the loss does not need.
	done := map[int]bool{}
	for _, n := range []*G.Node{x, w} {
		done[e.index[n]] = true
	}
	var order []execStep
	for left := append([]execStep(nil), e.steps...); len(left) > 0; {
		pick := -1
		for k, st := range left {
			ready := true
			for _, in := range st.in {
				ready = ready && done[in]
			}
			if ready && (pick < 0 || !needs(loss, st.node)) {
				pick = k
				if !needs(loss, st.node) {
					break
				}
			}
		}
		if pick < 0 {
			t.Fatal("no step is ready")
		}
		done[left[pick].out] = true
		order = append(order, left[pick])
		left = append(left[:pick], left[pick+1:]...)
	}
	e.steps = order
	if needsNothingBefore(e, loss, needs) || e.stepOf(metric) > e.stepOf(loss) {
		t.Fatal("the shuffled schedule runs the loss's steps first: the test would prove nothing")
	}

	e.forwardFirst(loss)
	if e.backwardAt != e.stepOf(loss)+1 {
		t.Errorf("the pause is before step %d, the loss is step %d: want right after it", e.backwardAt, e.stepOf(loss))
	}
	ran := map[int]bool{}
	for _, n := range []*G.Node{x, w} {
		ran[e.index[n]] = true
	}
	for k, st := range e.steps {
		for _, in := range st.in {
			if !ran[in] {
				t.Errorf("step %d (%v) runs before its input", k, st.node)
			}
		}
		ran[st.out] = true
		if got, want := k < e.backwardAt, needs(loss, st.node); got != want {
			t.Errorf("step %d (%v): before the pause %v, needed by the loss %v", k, st.node, got, want)
		}
	}
}

// needsNothingBefore reports whether every step before loss's is one the
// loss needs.
func needsNothingBefore(e *executor, loss *G.Node, needs func(a, b *G.Node) bool) bool {
	for _, st := range e.steps[:e.stepOf(loss)] {
		if !needs(loss, st.node) {
			return false
		}
	}
	return true
}

// A training run calls the hook before any gradient reaches the store
// (filled with NaN beforehand), with the loss Run returns, on both paths;
// on the executor's, a hook bound once costs no allocation; an error from
// it fails the run, saying where.
func TestBeforeBackward(t *testing.T) {
	for _, tape := range []bool{false, true} {
		e := newEngine(t, tensor.Float64, tape)
		b := batchOf(6, 3)
		ctx := context.Background()
		calls, seen, clean := 0, 0.0, true
		hook := func(loss float64) error {
			calls++
			seen = loss
			for _, g := range e.Store().Grad64() {
				clean = clean && math.IsNaN(g)
			}
			return nil
		}
		e.SetBeforeBackward(hook)
		for run := 0; run < 2; run++ {
			for i := range e.Store().Grad64() {
				e.Store().Grad64()[i] = math.NaN()
			}
			calls, clean = 0, true
			res, err := e.Run(ctx, module.Train, b, false, 1)
			if err != nil {
				t.Fatal(err)
			}
			if calls != 1 || seen != res.Loss || !clean {
				t.Errorf("tape %v, run %d: %d calls, loss %v (Run: %v), no gradient in the store yet: %v", tape, run, calls, seen, res.Loss, clean)
			}
			if slices.ContainsFunc(grads(e.Store()), math.IsNaN) {
				t.Errorf("tape %v: the run left gradients unwritten", tape)
			}
		}
		if !tape && !raceBuild {
			step := func() { e.Run(ctx, module.Train, b, false, 1) }
			with := testing.AllocsPerRun(10, step)
			e.SetBeforeBackward(nil)
			if without := testing.AllocsPerRun(10, step); with != without {
				t.Errorf("a step allocates %v times with the hook, %v without", with, without)
			}
		}
		refused := errors.New("refused")
		e.SetBeforeBackward(func(float64) error { return refused })
		_, err := e.Run(ctx, module.Train, b, false, 1)
		if !errors.Is(err, refused) || !strings.Contains(err.Error(), "train step: before the backward pass: refused") {
			t.Errorf("tape %v: a failing hook gave %v", tape, err)
		}
	}
}
