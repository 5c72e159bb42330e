package strategytest

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
)

// Tapped is MLP whose training graph counts its backward pass: the outputs
// and the loss pass through identity ops whose gradient ops count their
// runs (BackwardOps). The loss's is the first op of the backward pass, the
// outputs' one in its middle. It also logs "train_mae", a forward value the
// loss does not need. Give each process its own value: graphs built from
// one value count into one counter.
type Tapped struct {
	MLP
	backward atomic.Int64
}

// BackwardOps is how many gradient ops of the value's graphs have run.
func (m *Tapped) BackwardOps() int64 { return m.backward.Load() }

func (m *Tapped) TrainingStep(s *module.Step) (*G.Node, error) {
	o := G.Must(G.ApplyOp(tapOp{n: &m.backward}, m.forward(s)))
	l := G.Must(G.ApplyOp(tapOp{n: &m.backward}, m.lossOf(s, o)))
	s.Log("train_loss", l)
	mae := G.Must(G.Mean(G.Must(G.Abs(G.Must(G.Sub(o, s.Input("y")))))))
	s.Log("train_mae", mae)
	return l, nil
}

// tapOp is the identity; its gradient op, the identity too, counts its
// runs into n.
type tapOp struct {
	n    *atomic.Int64
	grad bool
}

func (op tapOp) Arity() int { return 1 }
func (op tapOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op tapOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return in[0].(tensor.Shape).Clone(), nil
}
func (op tapOp) ReturnsPtr() bool     { return false }
func (op tapOp) CallsExtern() bool    { return false }
func (op tapOp) OverwritesInput() int { return -1 }

// WriteHash and Hashcode tell taps of different counters apart: Gorgonia
// merges nodes of equal hash over equal inputs.
func (op tapOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "tap%p%v", op.n, op.grad) }
func (op tapOp) Hashcode() uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
func (op tapOp) String() string     { return fmt.Sprintf("tap(grad=%v)", op.grad) }
func (op tapOp) DiffWRT(int) []bool { return []bool{true} }
func (op tapOp) Do(v ...G.Value) (G.Value, error) {
	if op.grad {
		op.n.Add(1)
	}
	return G.CloneValue(v[0])
}
func (op tapOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(tapOp{n: op.n, grad: true}, grad)
	return G.Nodes{d}, err
}

// BeforeBackward checks TrainOptions.BeforeBackward on a job over n
// devices (RunAll runs it; a strategy that holds no whole store, such as
// fsdp, calls it itself): every process's hook is called once per
// training Step, before any gradient op of the step has run in that
// process (in any of its replicas), with the loss Step then returns; an
// error from it fails Step, wrapped, before the backward pass.
func BeforeBackward(t *testing.T, f Factory, n int) {
	ctx := testCtx(t)
	B := n * PerDev
	ds, err := Regression(4*B, in, out, 7)
	if err != nil {
		t.Fatal(err)
	}
	setup := func(strats []strategy.Strategy) []*Tapped {
		mods := make([]*Tapped, len(strats))
		err := Each(strats, func(r int, s strategy.Strategy) error {
			mods[r] = &Tapped{MLP: MLP{In: in, Hidden: hidden, Out: out}}
			su, err := SetupFor(mods[r], ds.Fields(), seed+uint64(r))
			if err != nil {
				return err
			}
			return s.Setup(ctx, su)
		})
		if err != nil {
			t.Fatalf("Setup: %v", err)
		}
		return mods
	}

	strats := f(t, n)
	mods := setup(strats)
	t.Cleanup(func() {
		if err := Each(strats, func(_ int, s strategy.Strategy) error { return s.Teardown(context.Background()) }); err != nil {
			t.Errorf("Teardown: %v", err)
		}
	})
	P := len(strats)
	// Two optimizer steps of two micro-batches each: the hook runs for
	// every micro-batch, accumulating or not, synced or not.
	for k := 0; k < 4; k++ {
		b, err := Rows(ds, k*B, (k+1)*B)
		if err != nil {
			t.Fatal(err)
		}
		err = Each(strats, func(r int, s strategy.Strategy) error {
			m := mods[r]
			before := m.BackwardOps()
			calls, at, seen := 0, int64(0), 0.0
			o := strategy.TrainOptions{Sync: k%2 == 1, Accumulate: k%2 == 1, Scale: 0.5, BeforeBackward: func(loss float64) error {
				calls++
				at, seen = m.BackwardOps(), loss
				return nil
			}}
			res, err := s.Step(ctx, module.Train, Shard(b, r, P), o)
			if err != nil {
				return err
			}
			switch ran := m.BackwardOps() - before; {
			case calls != 1:
				return fmt.Errorf("micro-batch %d: BeforeBackward was called %d times, want once per Step", k, calls)
			case ran == 0:
				return fmt.Errorf("micro-batch %d: no gradient op ran in Step", k)
			case at != before:
				return fmt.Errorf("micro-batch %d: BeforeBackward ran after %d of the step's %d gradient ops, want before any", k, at-before, ran)
			case seen != res.Loss:
				return fmt.Errorf("micro-batch %d: BeforeBackward saw the loss %v, Step returned %v", k, seen, res.Loss)
			}
			if k%2 == 1 {
				_, err = s.OptimizerStep(ctx, strategy.OptimizerOptions{})
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// An error from the hook fails the step before its backward pass.
	strats = f(t, n)
	mods = setup(strats)
	t.Cleanup(func() {
		// The failed job's strategies may report that failure again.
		Each(strats, func(_ int, s strategy.Strategy) error { return s.Teardown(context.Background()) })
	})
	b, err := Rows(ds, 0, B)
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("the hook refuses the loss")
	err = Each(strats, func(r int, s strategy.Strategy) error {
		before := mods[r].BackwardOps()
		o := strategy.TrainOptions{Sync: true, Scale: 1, BeforeBackward: func(float64) error { return refused }}
		_, err := s.Step(ctx, module.Train, Shard(b, r, P), o)
		switch {
		case !errors.Is(err, refused):
			return fmt.Errorf("Step returned %v, want the hook's error", err)
		case !strings.Contains(err.Error(), "before the backward pass"):
			return fmt.Errorf("the error %q does not say it came before the backward pass", err)
		case mods[r].BackwardOps() != before:
			return fmt.Errorf("%d gradient ops ran after the hook failed", mods[r].BackwardOps()-before)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if P == 1 {
		return
	}

	// An error on one rank alone fails every rank: the others, past their
	// own hooks, learn it from their reductions.
	strats = f(t, n)
	mods = setup(strats)
	t.Cleanup(func() {
		Each(strats, func(_ int, s strategy.Strategy) error { return s.Teardown(context.Background()) })
	})
	start := time.Now()
	errs := make([]error, P)
	Each(strats, func(r int, s strategy.Strategy) error {
		o := strategy.TrainOptions{Sync: true, Scale: 1, BeforeBackward: func(float64) error {
			if r == 0 {
				return refused
			}
			return nil
		}}
		_, errs[r] = s.Step(ctx, module.Train, Shard(b, r, P), o)
		if errs[r] == nil {
			_, errs[r] = s.OptimizerStep(ctx, strategy.OptimizerOptions{})
		}
		return nil
	})
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: Step and OptimizerStep succeeded, but rank 0's hook failed", r)
		}
	}
	t.Logf("every rank failed after %v: %v", time.Since(start), errs)
}
