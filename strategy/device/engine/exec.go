package engine

import (
	"fmt"
	"runtime"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/ops"
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
	// hooks, when set, run around every step (a sharded engine's gathers
	// and gradient reductions: exec_hooks.go).
	hooks *shardHooks
	// backwardAt is the first step of a training graph's backward pass
	// (forwardFirst), where the run calls its stepDone's forwardDone; -1:
	// not a training graph.
	backwardAt int
}

type execStep struct {
	node     *G.Node
	op       G.Op
	in       []int
	out      int
	pd       G.UsePreallocDoer
	prealloc G.Value
	dt       tensor.Dtype
	// direct is a caller's value (a view of the store's gradient buffer)
	// the op writes into instead of prealloc on runs that ask for it, so
	// the result needs no copy afterwards.
	direct G.Value
	// alwaysDirect: the op writes into direct on every run (its prealloc is
	// dropped; a sharded engine's gradients).
	alwaysDirect bool
	// reshape marks Gorgonia's reshapeOp, whose output is a view of its
	// input: it is made once and reused while the input is the same tensor
	// (Do would allocate a shallow clone and its shape every run).
	reshape bool
	// add marks Gorgonia's elementwise Add (the gradient sums its
	// differentiation inserts), run through ops.AddInto where it can.
	add bool
	// zero: the op adds into the value it is given instead of overwriting
	// it (Gorgonia's sliceIncrOp, the gradient of G.Slice), which is zeroed
	// first: the value is held across runs.
	zero    bool
	shape   tensor.Shape // the node's (Node.Shape clones on every call)
	lastIn  G.Value
	lastOut *tensor.Dense
	// notify: the run calls its stepDone after this step (a gradient is
	// final once it has run).
	notify bool

	// sum, when set, is an Add folded into this step (foldSums): its input
	// sumAt is the sum of the values sumOf, which sum adds in its own pass.
	sum   ops.SumInputDoer
	sumAt int
	sumOf [2]int
}

// stepDone is told, during a run, that step i (marked with notifyAfter)
// has run, and that the forward pass of a training graph has (forwardDone,
// before any step of the backward pass; its error ends the run).
type stepDone interface {
	stepDone(i int)
	forwardDone() error
	// commInFlight: see WithCommInFlight.
	commInFlight() bool
}

// isRead reports Gorgonia's readOp, whose work the engine does itself.
func isRead(op G.Op) bool { return fmt.Sprintf("%T", op) == "gorgonia.readOp" }

func isReshape(op G.Op) bool { return fmt.Sprintf("%T", op) == "gorgonia.reshapeOp" }

// isAdd reports Gorgonia's elementwise tensor Add (elemBinOp "+", which
// prints as "+ false").
func isAdd(op G.Op) bool {
	return fmt.Sprintf("%T", op) == "gorgonia.elemBinOp" && op.String() == "+ false"
}

func newExecutor(g *G.ExprGraph) (*executor, error) {
	sorted, err := G.Sort(g)
	if err != nil {
		return nil, fmt.Errorf("sort graph: %w", err)
	}
	e := &executor{index: make(map[*G.Node]int, len(sorted)), backwardAt: -1}
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
		// Gorgonia ops that are wrong as they are, computed right here
		// (vet.go).
		if r, bad := badReduction(g, n); bad {
			op = newReduceFix(r, n)
		} else if f := newSoftmaxGradFix(n); f != nil {
			op = f
		}
		st := execStep{node: n, op: op, out: idx, reshape: isReshape(op), add: isAdd(op), shape: n.Shape().Clone(),
			zero: opType(op) == "gorgonia.sliceIncrOp"}
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
				st.dt = dt // prealloc is made by the first run that needs it
			}
		}
		if len(st.in) > len(e.scratch) {
			e.scratch = make([]G.Value, len(st.in))
		}
		e.steps = append(e.steps, st)
	}
	e.foldSums(g)
	return e, nil
}

// foldSums drops each Add step whose output only one step reads, as the
// input that step's op can take as two summands (ops.SumInputDoer), and
// has that step add them in its own pass: one pass over memory less, and
// one buffer less. The gradient sum at a residual block's input is such an
// Add, read by the previous block's masked-gradient op alone. An Add whose
// value a read op asks for stays.
func (e *executor) foldSums(g *G.ExprGraph) {
	readers := make([]int, len(e.vals))
	producer := make([]int, len(e.vals))
	for i := range producer {
		producer[i] = -1
	}
	for i := range e.steps {
		producer[e.steps[i].out] = i
		for _, k := range e.steps[i].in {
			readers[k]++
		}
	}
	for _, n := range g.AllNodes() {
		if op := n.Op(); op != nil && isRead(op) {
			for it := g.From(n.ID()); it.Next(); {
				if i, ok := e.index[it.Node().(*G.Node)]; ok {
					readers[i]++ // never 1 with a step's
				}
			}
		}
	}
	drop := make([]bool, len(e.steps))
	for j := range e.steps {
		st := &e.steps[j]
		sd, ok := st.op.(ops.SumInputDoer)
		if !ok || st.pd != nil {
			continue
		}
		k := sd.SumInput()
		if k < 0 || k >= len(st.in) || readers[st.in[k]] != 1 {
			continue
		}
		a := producer[st.in[k]]
		if a < 0 || !e.steps[a].add || len(e.steps[a].in) != 2 {
			continue
		}
		st.sum, st.sumAt, st.sumOf = sd, k, [2]int{e.steps[a].in[0], e.steps[a].in[1]}
		// The summands join the inputs, after the op's own, so that
		// reordering (forwardFirst) and the readers of a value see them.
		st.in = append(slices.Clone(st.in), st.sumOf[0], st.sumOf[1])
		drop[a] = true
	}
	kept := e.steps[:0]
	for i, st := range e.steps {
		if !drop[i] {
			kept = append(kept, st)
		}
	}
	e.steps = kept
}

func dtypeOf(n *G.Node) (dt tensor.Dtype, err error) {
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("node %q has no dtype", n.Name())
		}
	}()
	return n.Dtype(), nil
}

// run executes every step once. With direct, ops given a direct value
// (setDirect) write into it. After each step marked by notifyAfter it
// calls done (when not nil) on the calling goroutine.
func (e *executor) run(direct bool, done stepDone) error {
	// With one P, yield between the backward pass's steps while
	// communication is in flight (WithCommInFlight), and between any steps
	// of a sharded run while a gather or reduction it started is not yet
	// waited for (shardHooks.inFlight). With nothing else to run a Gosched
	// costs ~0.1 µs.
	oneP := runtime.GOMAXPROCS(0) == 1
	commYield := oneP && e.backwardAt >= 0 && done != nil
	for i := range e.steps {
		if commYield && i > e.backwardAt && done.commInFlight() {
			runtime.Gosched()
		}
		if i == e.backwardAt && done != nil {
			if err := done.forwardDone(); err != nil {
				return err
			}
		}
		if e.hooks != nil {
			if err := e.hooks.before(e, i); err != nil {
				return err
			}
			// After before, which may have started the next unit's gather,
			// so that its goroutine gets the core before this step computes;
			// a reduction started after the step before gets it here too,
			// unless before had to wait for it to free its buffer.
			if oneP && e.hooks.inFlight() {
				runtime.Gosched()
			}
		}
		st := &e.steps[i]
		n := len(st.in)
		if st.sum != nil {
			n -= 2 // the summands, appended for ordering
		}
		in := e.scratch[:n]
		for j, k := range st.in[:n] {
			in[j] = e.vals[k]
		}
		var v G.Value
		var err error
		switch {
		case st.sum != nil:
			in[st.sumAt] = nil
			v, err = st.sum.DoSum(e.vals[st.sumOf[0]], e.vals[st.sumOf[1]], in...)
		case st.reshape:
			v, err = st.reshaped(in[0])
		case (direct || st.alwaysDirect) && st.direct != nil:
			v, err = st.preallocDo(st.direct, in)
		case st.pd != nil:
			if st.prealloc == nil {
				st.prealloc = tensor.New(tensor.WithShape(st.shape.Clone()...), tensor.Of(st.dt))
			}
			v, err = st.preallocDo(st.prealloc, in)
		default:
			v, err = st.op.Do(in...)
		}
		if err != nil {
			return fmt.Errorf("op %v (node %q): %w", st.op, st.node.Name(), err)
		}
		e.vals[st.out] = v
		if st.notify && done != nil {
			done.stepDone(i)
		}
		if e.hooks != nil {
			if err := e.hooks.after(e, i); err != nil {
				return err
			}
		}
	}
	clear(e.scratch)
	if e.backwardAt == len(e.steps) && done != nil {
		return done.forwardDone()
	}
	return nil
}

// forwardFirst orders the schedule so that the steps computing loss (loss's
// own and every step it depends on) come first, and makes runs call
// forwardDone right after them, before any step of the backward pass.
// Gorgonia seeds the backward pass with a constant, not with the loss, so
// no edge orders the first gradient ops after the loss: G.Sort happens to
// list nodes about in the order they were made (the backward pass last),
// and this makes the split a property of the schedule instead. Moving the
// loss's steps to the front, each group in its sorted order, keeps every
// step after its inputs. Forward steps the loss does not need (logged
// metrics) run after the pause, with the backward pass.
func (e *executor) forwardFirst(loss *G.Node) {
	li, ok := e.index[loss]
	if !ok {
		e.backwardAt = len(e.steps)
		return
	}
	producer := make([]int, len(e.vals))
	for i := range producer {
		producer[i] = -1
	}
	for k := range e.steps {
		producer[e.steps[k].out] = k
	}
	need := make([]bool, len(e.steps))
	for stack := []int{li}; len(stack) > 0; {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if k := producer[v]; k >= 0 && !need[k] {
			need[k] = true
			stack = append(stack, e.steps[k].in...)
		}
	}
	steps := make([]execStep, 0, len(e.steps))
	for k := range e.steps {
		if need[k] {
			steps = append(steps, e.steps[k])
		}
	}
	e.backwardAt = len(steps)
	for k := range e.steps {
		if !need[k] {
			steps = append(steps, e.steps[k])
		}
	}
	e.steps = steps
}

// stepOf is the index of the step computing n, -1 when n is no step's
// output (a graph input or a constant).
func (e *executor) stepOf(n *G.Node) int {
	i, ok := e.index[n]
	if !ok {
		return -1
	}
	for k := range e.steps {
		if e.steps[k].out == i {
			return k
		}
	}
	return -1
}

// read reports whether a step reads n's value.
func (e *executor) read(n *G.Node) bool {
	i, ok := e.index[n]
	if !ok {
		return false
	}
	for k := range e.steps {
		if slices.Contains(e.steps[k].in, i) {
			return true
		}
	}
	return false
}

// notifyAfter marks step i: runs report it to their stepDone.
func (e *executor) notifyAfter(i int) { e.steps[i].notify = true }

// preallocDo runs the step into dst: a gradient sum through ops.AddInto
// (one parallel pass instead of Gorgonia's copy and add on one goroutine)
// when its values allow, else the op's UsePreallocDo.
func (st *execStep) preallocDo(dst G.Value, in []G.Value) (G.Value, error) {
	if st.add && len(in) == 2 && ops.AddInto(dst, in[0], in[1]) {
		return dst, nil
	}
	if st.zero {
		if d, ok := dst.(*tensor.Dense); ok {
			d.Zero()
		}
	}
	return st.pd.UsePreallocDo(dst, in...)
}

// reshaped is the reshape step's output for input v: the view made on an
// earlier run while v is the same tensor with the same shape, else a new
// one from the op.
func (st *execStep) reshaped(v G.Value) (G.Value, error) {
	d, ok := v.(*tensor.Dense)
	if ok && v == st.lastIn && st.lastOut != nil && !d.IsView() &&
		d.Shape().TotalSize() == st.lastOut.Shape().TotalSize() && st.lastOut.Shape().Eq(st.shape) &&
		d.Uintptr() == st.lastOut.Uintptr() {
		return st.lastOut, nil
	}
	out, err := st.op.Do(v)
	if err != nil {
		return nil, err
	}
	st.lastIn, st.lastOut = nil, nil
	if o, isDense := out.(*tensor.Dense); ok && isDense && !d.IsView() {
		st.lastIn, st.lastOut = v, o
	}
	return out, nil
}

// setDirect makes n's op write into v on direct runs. It reports false, and
// changes nothing, when the op cannot write into a given value or v's shape
// differs from n's.
func (e *executor) setDirect(n *G.Node, v *tensor.Dense) bool {
	i, ok := e.index[n]
	if !ok {
		return false
	}
	for k := range e.steps {
		st := &e.steps[k]
		if st.out != i {
			continue
		}
		if st.pd == nil || st.reshape || !v.Shape().Eq(n.Shape()) {
			return false
		}
		st.direct = v
		return true
	}
	return false
}

// wroteDirect reports whether n's last value is the direct value set for it.
func (e *executor) wroteDirect(n *G.Node) bool {
	i, ok := e.index[n]
	if !ok {
		return false
	}
	for k := range e.steps {
		if st := &e.steps[k]; st.out == i {
			return st.direct != nil && e.vals[i] == st.direct
		}
	}
	return false
}

// value is the last value of n (nil if n is not in the schedule).
func (e *executor) value(n *G.Node) G.Value {
	i, ok := e.index[n]
	if !ok {
		return nil
	}
	return e.vals[i]
}
