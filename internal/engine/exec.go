package engine

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// executor runs a compiled Gorgonia graph as a static schedule on the calling
// goroutine. TapeMachine hands each run to another goroutine, resets its
// registers and allocates several values per op; here the schedule is sorted
// once, leaves are bound once (their tensors view the parameter store and the
// input buffers, updated in place), and every op that can write into a
// preallocated value (G.UsePreallocDoer, which fulgur's own ops implement)
// gets one held across runs. TapeMachine stays as the reference: tests run
// both and compare.
type executor struct {
	steps   []execStep
	vals    []G.Value
	index   map[*G.Node]int
	scratch []G.Value
}

type execStep struct {
	node     *G.Node
	op       G.Op
	in       []int
	out      int
	pd       G.UsePreallocDoer
	prealloc G.Value
}

// isRead reports Gorgonia's readOp, whose work the engine does itself.
func isRead(op G.Op) bool { return fmt.Sprintf("%T", op) == "gorgonia.readOp" }

func newExecutor(g *G.ExprGraph) (*executor, error) {
	sorted, err := G.Sort(g)
	if err != nil {
		return nil, fmt.Errorf("sort graph: %w", err)
	}
	e := &executor{index: make(map[*G.Node]int, len(sorted))}
	// G.Sort puts outputs first; run from the leaves.
	for i := len(sorted) - 1; i >= 0; i-- {
		n := sorted[i]
		op := n.Op()
		if op != nil && isRead(op) {
			continue
		}
		idx := len(e.vals)
		e.index[n] = idx
		e.vals = append(e.vals, nil)
		if op == nil {
			if n.Value() == nil {
				return nil, fmt.Errorf("graph input %q has no value bound", n.Name())
			}
			e.vals[idx] = n.Value()
			continue
		}
		st := execStep{node: n, op: op, out: idx}
		for it := g.From(n.ID()); it.Next(); {
			c := it.Node().(*G.Node)
			ci, ok := e.index[c]
			if !ok {
				return nil, fmt.Errorf("node %q runs before its input %q", n.Name(), c.Name())
			}
			st.in = append(st.in, ci)
		}
		if pd, ok := op.(G.UsePreallocDoer); ok && len(n.Shape()) > 0 && !n.IsScalar() {
			if dt, err := dtypeOf(n); err == nil {
				st.pd = pd
				st.prealloc = tensor.New(tensor.WithShape(n.Shape().Clone()...), tensor.Of(dt))
			}
		}
		if len(st.in) > len(e.scratch) {
			e.scratch = make([]G.Value, len(st.in))
		}
		e.steps = append(e.steps, st)
	}
	return e, nil
}

func dtypeOf(n *G.Node) (dt tensor.Dtype, err error) {
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("node %q has no dtype", n.Name())
		}
	}()
	return n.Dtype(), nil
}

// run executes every step once.
func (e *executor) run() error {
	for i := range e.steps {
		st := &e.steps[i]
		in := e.scratch[:len(st.in)]
		for j, k := range st.in {
			in[j] = e.vals[k]
		}
		var v G.Value
		var err error
		if st.pd != nil {
			v, err = st.pd.UsePreallocDo(st.prealloc, in...)
		} else {
			v, err = st.op.Do(in...)
		}
		if err != nil {
			return fmt.Errorf("op %v (node %q): %w", st.op, st.node.Name(), err)
		}
		e.vals[st.out] = v
	}
	return nil
}

// value is the last value of n (nil if n is not in the schedule).
func (e *executor) value(n *G.Node) G.Value {
	i, ok := e.index[n]
	if !ok {
		return nil
	}
	return e.vals[i]
}
