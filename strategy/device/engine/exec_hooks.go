package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
)

// Sharding runs an engine over a layout store (module.NewLayoutStore),
// whose parameters live sharded across ranks: the engine asks for a unit's
// parameters just before the first step of the schedule that reads them and
// releases them after the last one (a fully sharded strategy's gather and
// free), and hands each unit's gradient over as soon as the backward pass
// has produced all of it (the strategy reduce-scatters it). Unit memory
// comes from pools of unit-sized buffers that the engine keeps across runs,
// so what a rank holds of the model at once is a few units, not the model.
//
// With Gather nil the store holds the parameters whole (an ordinary store,
// made without a gradient buffer by module.NewStoreWithoutGrad): nothing is
// gathered or released, and only the gradients go through the pool to
// Reduce, unit by unit (ZeRO stage 1 and 2 over units as gradient buckets).
//
// In a process with one P (GOMAXPROCS=1, a rank pinned to one core) runs
// yield the P between steps while a Wait the callbacks returned is not yet
// waited for, so that the goroutine moving a prefetched gather or a
// reduction gets the core while the units after it compute: a sharded
// engine needs no WithCommInFlight. While none is outstanding runs do not
// yield.
type Sharding struct {
	// Units cut the flat learnable parameters into spans of whole tensors,
	// in store order, covering all of them.
	Units []Unit
	// KeepAfterForward keeps a unit's parameters from their first use to
	// their last (forward and backward) instead of releasing them whenever
	// other units run in between (after the forward pass, then gathering
	// again for backward): fewer gathers, more memory (ZeRO-2-like).
	KeepAfterForward bool
	// NoPrefetch gathers each unit when it is needed instead of while the
	// unit before it computes.
	NoPrefetch bool
	// Gather starts filling dst ([]float32 or []float64 of the unit's
	// length) with unit's parameters and returns the wait for it; dst is
	// the gather's until the wait returns. Every rank's engine calls Gather
	// and Reduce in the same order. nil: the store holds the parameters.
	Gather func(ctx context.Context, unit int, dst any) Wait
	// Scratch, when not nil, is a parameter buffer of the largest unit's
	// length the engine may use: the layout store's scratch
	// (module.NewLayoutStore), whose views graphs show only while they are
	// built, so it serves as one of the gathered units' buffers.
	Scratch any
	// Reduce is handed unit's whole gradient for this run (flat, unscaled;
	// zero for parameters the graph does not use) once backward has
	// produced it; grad is the reduction's until the wait returns.
	Reduce func(ctx context.Context, unit int, grad any) Wait
}

// Unit is a span [Lo, Hi) of the flat learnable parameters.
type Unit struct{ Lo, Hi int }

// Wait blocks until an operation started by Sharding's callbacks is done.
type Wait func() error

// WithSharding runs the engine's graphs over a layout store whose
// parameters sh provides, or over a store holding them when sh.Gather is
// nil (see Sharding). Runs then leave the store's gradients alone (it
// need have none): gradients go to sh.Reduce.
func WithSharding(sh *Sharding) Option {
	return func(e *Engine) {
		e.shard, e.pool = sh, &unitPool{}
		switch sc := sh.Scratch.(type) {
		case []float32:
			e.pool.param, e.pool.paramFree = []slotBuf{{f32: sc}}, []int{0}
		case []float64:
			e.pool.param, e.pool.paramFree = []slotBuf{{f64: sc}}, []int{0}
		}
	}
}

// compileSharded gives c an executor whose runs gather, release and hand
// gradients over as e.shard says.
func (e *Engine) compileSharded(c *compiled, mode module.Mode) (*compiled, error) {
	if e.Tape {
		return nil, errors.New("sharding runs on the engine's executor: turn Tape off")
	}
	if err := checkSharding(e.shard, e.store); err != nil {
		return nil, err
	}
	var err error
	if c.exec, err = newExecutor(c.g); err != nil {
		return nil, fmt.Errorf("%s: %w", stepName(mode), err)
	}
	if mode == module.Train {
		c.exec.forwardFirst(c.loss)
	}
	if c.hooks, err = newShardHooks(e.shard, e.pool, e.store, c); err != nil {
		return nil, fmt.Errorf("%s: %w", stepName(mode), err)
	}
	c.exec.hooks = c.hooks
	return c, nil
}

func checkSharding(sh *Sharding, st *module.Store) error {
	switch {
	case sh.Reduce == nil:
		return errors.New("sharding: Reduce must be set")
	case sh.Gather != nil && !st.Layout():
		return errors.New("sharding with Gather needs a layout store (module.NewLayoutStore): the store holds its parameters")
	case sh.Gather == nil && st.Layout():
		return errors.New("sharding over a layout store (module.NewLayoutStore) needs Gather: the store holds no parameters")
	case sh.Gather == nil && sh.Scratch != nil:
		return errors.New("sharding: Scratch is a gathered unit's buffer, but Gather is nil (the store holds the parameters): leave Scratch nil")
	}
	largest := 0
	for _, u := range sh.Units {
		largest = max(largest, u.Hi-u.Lo)
	}
	if sh.Scratch != nil {
		var n int
		switch sc := sh.Scratch.(type) {
		case []float32:
			n = len(sc)
			if st.Dtype() != tensor.Float32 {
				n = -1
			}
		case []float64:
			n = len(sc)
			if st.Dtype() != tensor.Float64 {
				n = -1
			}
		default:
			n = -1
		}
		if n < largest {
			return fmt.Errorf("sharding: Scratch is a %T of %d values: pass the store's dtype, at least the largest unit's %d", sh.Scratch, n, largest)
		}
	}
	at := 0
	for i, u := range sh.Units {
		if u.Lo != at || u.Hi <= u.Lo {
			return fmt.Errorf("sharding: unit %d is [%d, %d): units must cover the parameters in order, without gaps, starting at 0 (next expected at %d)", i, u.Lo, u.Hi, at)
		}
		at = u.Hi
	}
	if at != st.NumParams() {
		return fmt.Errorf("sharding: the units end at %d but the model has %d learnable elements", at, st.NumParams())
	}
	for _, e := range st.Entries() {
		if e.Buffer {
			continue
		}
		u := unitOf(sh.Units, e.Offset)
		if e.Offset+e.Len > sh.Units[u].Hi {
			return fmt.Errorf("sharding: tensor %q [%d, %d) straddles unit %d [%d, %d): units hold whole tensors", e.Name, e.Offset, e.Offset+e.Len, u, sh.Units[u].Lo, sh.Units[u].Hi)
		}
	}
	return nil
}

func unitOf(us []Unit, off int) int {
	i, _ := slices.BinarySearchFunc(us, off, func(u Unit, off int) int {
		switch {
		case u.Hi <= off:
			return -1
		case u.Lo > off:
			return 1
		}
		return 0
	})
	return i
}

// unitPool holds unit-sized buffers shared by every graph of an engine
// (runs do not overlap): param for gathered parameters, grad for gradients
// being produced or reduced.
type unitPool struct {
	param, grad         []slotBuf
	paramFree, gradFree []int
}

type slotBuf struct {
	f32 []float32
	f64 []float64
}

func (b slotBuf) slice(lo, hi int) any {
	if b.f32 != nil {
		return b.f32[lo:hi:hi]
	}
	return b.f64[lo:hi:hi]
}

func acquire(bufs *[]slotBuf, free *[]int, dt tensor.Dtype, size int) int {
	if n := len(*free); n > 0 {
		s := (*free)[n-1]
		*free = (*free)[:n-1]
		return s
	}
	var b slotBuf
	if dt == tensor.Float32 {
		b.f32 = make([]float32, size)
	} else {
		b.f64 = make([]float64, size)
	}
	*bufs = append(*bufs, b)
	return len(*bufs) - 1
}

// segment is a stretch of the schedule over which one unit's parameters
// stay gathered.
type segment struct {
	unit, first, last int
}

type leafRef struct {
	val   int // index in executor.vals
	unit  int
	off   int // offset in the unit
	shape tensor.Shape
}

type gradOut struct {
	step, unit, off, n int
	direct             bool
	shape              tensor.Shape
}

// shardHooks is a compiled graph's plan of gathers, releases and gradient
// hand-overs, and the state of the run in progress.
type shardHooks struct {
	sh      *Sharding
	pool    *unitPool
	dt      tensor.Dtype
	maxUnit int

	segs      []segment
	startAt   map[int][]int // step → segments starting there
	endAt     map[int][]int // step → segments ending there
	leaves    [][]leafRef   // per unit: its leaves in this graph
	grads     []gradOut
	gradsAt   map[int][]int // step → grads it produces
	gradFirst map[int][]int // step → units whose gradient starts there
	gradLast  map[int][]int // step → units whose gradient is complete after it
	partial   []bool        // per unit: some parameter has no gradient in this graph
	views     map[[3]int]*tensor.Dense

	// the run in progress
	ctx     context.Context
	segSlot []int
	segWait []Wait
	issued  int // segments whose gather was started, in order
	waited  int // segments whose gather was waited for, in the same order
	gslot   []int
	pending []pendingGrad
}

type pendingGrad struct {
	slot int
	wait Wait
}

// newShardHooks plans graph c's run over units: which steps read which
// unit (directly or through a view), where each unit's stretches of use
// begin and end, and which steps produce which unit's gradients.
func newShardHooks(sh *Sharding, pool *unitPool, st *module.Store, c *compiled) (*shardHooks, error) {
	e := c.exec
	h := &shardHooks{sh: sh, pool: pool, dt: st.Dtype(), startAt: map[int][]int{}, endAt: map[int][]int{},
		leaves: make([][]leafRef, len(sh.Units)), gradsAt: map[int][]int{}, gradFirst: map[int][]int{},
		gradLast: map[int][]int{}, partial: make([]bool, len(sh.Units)), views: map[[3]int]*tensor.Dense{}}
	for _, u := range sh.Units {
		h.maxUnit = max(h.maxUnit, u.Hi-u.Lo)
	}
	owner := map[int]int{} // value index → unit whose memory it shows
	for _, en := range st.Entries() {
		if en.Buffer || sh.Gather == nil { // resident parameters: nothing to gather
			continue
		}
		n, ok := c.step.Node(en.Name)
		if !ok {
			continue
		}
		vi, ok := e.index[n]
		if !ok {
			continue
		}
		u := unitOf(sh.Units, en.Offset)
		owner[vi] = u
		h.leaves[u] = append(h.leaves[u], leafRef{val: vi, unit: u, off: en.Offset - sh.Units[u].Lo, shape: tensor.Shape(slices.Clone(en.Shape))})
	}
	uses := make([][]int, len(sh.Units))
	for i := range e.steps {
		s := &e.steps[i]
		var seen []int
		for _, k := range s.in {
			if u, ok := owner[k]; ok && !slices.Contains(seen, u) {
				seen = append(seen, u)
				uses[u] = append(uses[u], i)
			}
		}
		// An op with one input and no buffer of its own (reshape, slice,
		// transpose) may return a view of it: its value keeps the unit in use.
		if len(s.in) == 1 && s.pd == nil && len(seen) == 1 {
			owner[s.out] = seen[0]
		}
	}
	for u, us := range uses {
		if len(us) == 0 {
			continue
		}
		seg := segment{unit: u, first: us[0], last: us[0]}
		for _, i := range us[1:] {
			if !sh.KeepAfterForward && otherUse(uses, u, seg.last, i) {
				h.segs = append(h.segs, seg)
				seg = segment{unit: u, first: i}
			}
			seg.last = i
		}
		h.segs = append(h.segs, seg)
	}
	slices.SortStableFunc(h.segs, func(a, b segment) int { return a.first - b.first })
	for k, s := range h.segs {
		h.startAt[s.first] = append(h.startAt[s.first], k)
		h.endAt[s.last] = append(h.endAt[s.last], k)
	}
	h.segSlot = make([]int, len(h.segs))
	h.segWait = make([]Wait, len(h.segs))
	h.gslot = make([]int, len(sh.Units))

	// Gradients.
	covered := make([]int, len(sh.Units))
	nodeUses := map[*G.Node]int{}
	for _, gb := range c.grads {
		nodeUses[gb.node]++
	}
	read := map[int]bool{} // values some step reads
	for i := range e.steps {
		for _, k := range e.steps[i].in {
			read[k] = true
		}
	}
	first := map[int]int{}
	last := map[int]int{}
	for _, gb := range c.grads {
		en, _ := st.Lookup(gb.name)
		u := unitOf(sh.Units, en.Offset)
		covered[u] += en.Len
		step := e.stepOf(gb.node)
		if step < 0 {
			return nil, fmt.Errorf("sharding: the gradient of %q is no step's output: the engine cannot hand it over", gb.name)
		}
		g := gradOut{step: step, unit: u, off: en.Offset - sh.Units[u].Lo, n: en.Len, shape: tensor.Shape(slices.Clone(en.Shape))}
		s := &e.steps[step]
		g.direct = nodeUses[gb.node] == 1 && s.pd != nil && !s.reshape && !read[s.out] && gb.node.Shape().Eq(g.shape)
		h.gradsAt[step] = append(h.gradsAt[step], len(h.grads))
		h.grads = append(h.grads, g)
		if f, ok := first[u]; !ok || step < f {
			first[u] = step
		}
		last[u] = max(last[u], step)
	}
	for u, f := range first {
		h.gradFirst[f] = append(h.gradFirst[f], u)
		h.gradLast[last[u]] = append(h.gradLast[last[u]], u)
		h.partial[u] = covered[u] != sh.Units[u].Hi-sh.Units[u].Lo
	}
	for _, m := range []map[int][]int{h.gradFirst, h.gradLast} {
		for _, us := range m {
			slices.Sort(us)
		}
	}
	for _, g := range h.grads {
		if g.direct {
			// The op writes into the unit's gradient buffer on every run;
			// its own preallocated value would be a second copy.
			s := &e.steps[g.step]
			s.alwaysDirect, s.prealloc = true, nil
		}
	}
	return h, nil
}

// otherUse reports whether a unit other than u is used strictly between
// steps a and b.
func otherUse(uses [][]int, u, a, b int) bool {
	for v, us := range uses {
		if v == u {
			continue
		}
		i, _ := slices.BinarySearch(us, a+1)
		if i < len(us) && us[i] < b {
			return true
		}
	}
	return false
}

func (h *shardHooks) start(ctx context.Context) {
	h.ctx = ctx
	h.issued, h.waited = 0, 0
	for i := range h.segSlot {
		h.segSlot[i], h.segWait[i] = -1, nil
	}
	for i := range h.gslot {
		h.gslot[i] = -1
	}
	h.pending = h.pending[:0]
}

func (h *shardHooks) issue(k int) {
	p := h.pool
	s := acquire(&p.param, &p.paramFree, h.dt, h.maxUnit)
	u := h.sh.Units[h.segs[k].unit]
	h.segSlot[k] = s
	h.segWait[k] = h.sh.Gather(h.ctx, h.segs[k].unit, p.param[s].slice(0, u.Hi-u.Lo))
	h.issued = k + 1
}

// view is the tensor that shows slot's memory at off with shape, made
// once per (pool, slot, who): who is a leaf's value index or a gradient's
// index, so a slot shared by units of different shapes makes no garbage.
func (h *shardHooks) view(pool []slotBuf, kind, slot, who, off int, shape tensor.Shape) *tensor.Dense {
	key := [3]int{kind, slot, who}
	if v, ok := h.views[key]; ok {
		return v
	}
	n := shape.TotalSize()
	var v *tensor.Dense
	if len(shape) == 0 {
		v = tensor.New(tensor.WithShape(), tensor.WithBacking(pool[slot].slice(off, off+n)))
	} else {
		v = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(pool[slot].slice(off, off+n)))
	}
	h.views[key] = v
	return v
}

func (h *shardHooks) before(e *executor, i int) error {
	for _, k := range h.startAt[i] {
		if h.issued <= k {
			for h.issued <= k {
				h.issue(h.issued)
			}
		}
		if err := h.segWait[k](); err != nil {
			return fmt.Errorf("gather the parameters of unit %d: %w", h.segs[k].unit, err)
		}
		h.waited = k + 1
		for _, l := range h.leaves[h.segs[k].unit] {
			e.vals[l.val] = h.view(h.pool.param, 0, h.segSlot[k], l.val, l.off, l.shape)
		}
		if !h.sh.NoPrefetch && h.issued == k+1 && k+1 < len(h.segs) {
			h.issue(k + 1)
		}
	}
	for _, u := range h.gradFirst[i] {
		s, err := h.acquireGrad()
		if err != nil {
			return err
		}
		h.gslot[u] = s
		if h.partial[u] {
			un := h.sh.Units[u]
			if h.dt == tensor.Float32 {
				clear(h.pool.grad[s].f32[:un.Hi-un.Lo])
			} else {
				clear(h.pool.grad[s].f64[:un.Hi-un.Lo])
			}
		}
	}
	for _, gi := range h.gradsAt[i] {
		if g := h.grads[gi]; g.direct {
			e.steps[i].direct = h.view(h.pool.grad, 1, h.gslot[g.unit], gi, g.off, g.shape)
		}
	}
	return nil
}

// inFlight reports whether a gather or reduction the run started is not
// yet waited for: the goroutine moving it may need the core (see
// executor.run's yield at one P).
func (h *shardHooks) inFlight() bool {
	return h.issued > h.waited || len(h.pending) > 0
}

// acquireGrad returns a free gradient buffer, waiting for the oldest
// reduction in flight to free one before allocating another.
func (h *shardHooks) acquireGrad() (int, error) {
	p := h.pool
	if len(p.gradFree) == 0 && len(h.pending) > 0 {
		if err := h.waitOldest(); err != nil {
			return -1, err
		}
	}
	return acquire(&p.grad, &p.gradFree, h.dt, h.maxUnit), nil
}

func (h *shardHooks) waitOldest() error {
	pg := h.pending[0]
	h.pending = h.pending[1:]
	if err := pg.wait(); err != nil {
		return err
	}
	h.pool.gradFree = append(h.pool.gradFree, pg.slot)
	return nil
}

func (h *shardHooks) after(e *executor, i int) error {
	for _, gi := range h.gradsAt[i] {
		g := h.grads[gi]
		if g.direct && e.vals[e.steps[i].out] == e.steps[i].direct {
			continue
		}
		if err := h.copyGrad(e.vals[e.steps[i].out], g); err != nil {
			return err
		}
	}
	for _, u := range h.gradLast[i] {
		un := h.sh.Units[u]
		s := h.gslot[u]
		h.pending = append(h.pending, pendingGrad{slot: s, wait: h.sh.Reduce(h.ctx, u, h.pool.grad[s].slice(0, un.Hi-un.Lo))})
		h.gslot[u] = -1
	}
	for _, k := range h.endAt[i] {
		h.pool.paramFree = append(h.pool.paramFree, h.segSlot[k])
		h.segSlot[k] = -1
	}
	return nil
}

func (h *shardHooks) copyGrad(v G.Value, g gradOut) error {
	dst := h.pool.grad[h.gslot[g.unit]].slice(g.off, g.off+g.n)
	switch d := dst.(type) {
	case []float32:
		switch s := v.(type) {
		case *tensor.Dense:
			if s.Dtype() == tensor.Float32 && s.Shape().TotalSize() == g.n {
				copy(d, s.Float32s())
				return nil
			}
		case *G.F32:
			if g.n == 1 {
				d[0] = float32(*s)
				return nil
			}
		}
	case []float64:
		switch s := v.(type) {
		case *tensor.Dense:
			if s.Dtype() == tensor.Float64 && s.Shape().TotalSize() == g.n {
				copy(d, s.Float64s())
				return nil
			}
		case *G.F64:
			if g.n == 1 {
				d[0] = float64(*s)
				return nil
			}
		}
	}
	return fmt.Errorf("a gradient of unit %d is a %T, not %d values of the store's dtype", g.unit, v, g.n)
}

// finish waits for the run's gradient reductions and gives their buffers
// back; it also frees parameter buffers a failed run left gathered.
func (h *shardHooks) finish() error {
	var err error
	for len(h.pending) > 0 {
		if e := h.waitOldest(); e != nil && err == nil {
			err = fmt.Errorf("reduce gradients: %w", e)
		}
	}
	for k := range h.segs {
		if s := h.segSlot[k]; s >= 0 {
			if w := h.segWait[k]; w != nil {
				w() // the gather owns the buffer until it is done
			}
			h.pool.paramFree = append(h.pool.paramFree, s)
			h.segSlot[k] = -1
		}
	}
	for u, s := range h.gslot {
		if s >= 0 {
			h.pool.gradFree = append(h.pool.gradFree, s)
			h.gslot[u] = -1
		}
	}
	return err
}
