package hier

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// Shape is where the ranks of a job run: Node[r] is the index of rank r's
// node (in the order the nodes' first ranks appear) and Local[r] its index
// among its node's ranks (by rank).
type Shape struct {
	Nodes   int // number of nodes
	PerNode int // ranks on each node (0 when the nodes run different numbers)
	Node    []int
	Local   []int
}

// ShapeOf groups ranks by node identity: hosts[r] names rank r's node (a
// host identity, or any string equal for the ranks of one node).
func ShapeOf(hosts []string) Shape {
	s := Shape{Node: make([]int, len(hosts)), Local: make([]int, len(hosts))}
	index := map[string]int{}
	var count []int
	for r, h := range hosts {
		n, ok := index[h]
		if !ok {
			n = len(count)
			index[h] = n
			count = append(count, 0)
		}
		s.Node[r], s.Local[r] = n, count[n]
		count[n]++
	}
	s.Nodes = len(count)
	if s.Nodes > 0 && slices.Min(count) == slices.Max(count) {
		s.PerNode = count[0]
	}
	return s
}

// Qualifies says whether the two-level algorithms pay: more than one node,
// the same number of ranks on each, and more than one there. When they do
// not, the reason, for the log.
func (s Shape) Qualifies() (bool, string) {
	switch {
	case s.Nodes < 2:
		return false, "all ranks run on one node"
	case s.PerNode == 0:
		return false, "the nodes run different numbers of ranks"
	case s.PerNode == 1:
		return false, "every node runs one rank"
	}
	return true, ""
}

// String reads "2 nodes x 2 ranks" (or "4 ranks on 2 nodes, unevenly").
func (s Shape) String() string {
	if s.PerNode == 0 {
		return fmt.Sprintf("%d ranks on %d nodes, unevenly", len(s.Node), s.Nodes)
	}
	return plural(s.Nodes, "node") + " x " + plural(s.PerNode, "rank")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// LocalSplit builds this rank's group of the ranks of its node: every rank
// of the flat group calls it at the same point with color = its node and
// key = its rank, and must get a group whose rank is its local index (as
// collective.Splitter.Split does).
type LocalSplit func(ctx context.Context, color, key int) (collective.Collective, error)

// Breaker is what the flat group must offer besides collective.Collective
// (tcp.Ring does): a failure in one level is told to every rank through it,
// so that a rank waiting in another level (for a peer that has returned with
// the error) stops at once, with the first failure's cause and blame.
type Breaker interface {
	Abort(err error)
	Broken() <-chan struct{}
	Cause() (peer int, err error, broken bool)
}

// Group is one rank's two-level group.
type Group struct {
	flat         collective.Collective
	brk          Breaker
	local, cross collective.Collective
	shape        Shape
	rank         int
	seq          uint64
	// at[k][l] is the rank with local index l on node k.
	at [][]int
	// scratch holds, per dtype, the block an all-reduce reduces across the
	// nodes (or the one a reduce-scatter or all-gather hands between the
	// levels) and the whole buffer in the order the levels want it; reused
	// (operations run one at a time).
	scratch [2][2]any
}

// New composes the two-level group of this rank over flat, the whole job's
// group, with the local groups local builds. flat must implement
// collective.Splitter (the cross-node groups are split from it) and
// Breaker: a *tcp.Ring (tcp.NewRing) does; the collective.Group that
// tcp.New and tcp.NewGroup return, and inproc's, do not. Every rank calls
// it at the same point with the same shape (len(shape.Node) ==
// flat.Size()).
// Nodes running different numbers of ranks are an error; a shape that does
// not Qualify works (one level is a group of one) but gains nothing over
// the flat group.
// The returned group owns flat and the groups it builds: its Close closes
// them all. It is wrapped with collective.WithAsync. On an error, flat is
// still the caller's to close.
func New(ctx context.Context, flat collective.Collective, shape Shape, local LocalSplit) (collective.Group, error) {
	if len(shape.Node) != flat.Size() || len(shape.Local) != flat.Size() {
		return nil, fmt.Errorf("hier: the shape names %d ranks and the group has %d: pass ShapeOf of every rank's node", len(shape.Node), flat.Size())
	}
	if shape.PerNode == 0 {
		return nil, fmt.Errorf("hier: %v: every node must run the same number of ranks: use the flat group", shape)
	}
	split, ok := flat.(collective.Splitter)
	if !ok {
		return nil, fmt.Errorf("hier: %T cannot split its group: the cross-node groups are split from it", flat)
	}
	brk, ok := flat.(Breaker)
	if !ok {
		return nil, fmt.Errorf("hier: the flat group, a %T, cannot tell every rank of a failure (it does not implement hier.Breaker): pass the *tcp.Ring of tcp.NewRing", flat)
	}
	r := flat.Rank()
	g := &Group{flat: flat, brk: brk, shape: shape, rank: r, at: make([][]int, shape.Nodes)}
	for k := range g.at {
		g.at[k] = make([]int, shape.PerNode)
	}
	for q := range shape.Node {
		g.at[shape.Node[q]][shape.Local[q]] = q
	}
	var err error
	if g.local, err = local(ctx, shape.Node[r], r); err != nil {
		return nil, fmt.Errorf("hier: rank %d: the group of node %d's ranks: %w", r, shape.Node[r], err)
	}
	if g.local.Size() != shape.PerNode || g.local.Rank() != shape.Local[r] {
		g.local.Close()
		return nil, fmt.Errorf("hier: rank %d: the group of node %d's ranks has rank %d of %d, want %d of %d", r, shape.Node[r], g.local.Rank(), g.local.Size(), shape.Local[r], shape.PerNode)
	}
	// The ranks with one local index, one a node, by node: rank i of this
	// group runs on node i.
	if g.cross, err = split.Split(ctx, shape.Local[r], shape.Node[r]); err != nil {
		g.local.Close()
		return nil, fmt.Errorf("hier: rank %d: the group across nodes of local rank %d: %w", r, shape.Local[r], err)
	}
	return collective.WithAsync(g), nil
}

// Shape returns the layout the group was built for.
func (g *Group) Shape() Shape { return g.shape }

func (g *Group) Rank() int { return g.rank }
func (g *Group) Size() int { return g.flat.Size() }

// AllReduce reduces inside the node, across the nodes, then gathers inside
// the node. Mean sums on both levels and divides once by the job's size.
func (g *Group) AllReduce(ctx context.Context, buf any, op collective.Op) error {
	return g.run(ctx, collective.KindAllReduce, buf, nil, op, 0, func(ctx context.Context) error {
		dt, n, _ := collective.Describe(buf)
		level := op
		if op == collective.Mean {
			level = collective.Sum
		}
		blk := g.block(blockSlot, dt, collective.BlockLen(n, g.local.Size(), g.local.Rank()))
		if err := g.local.ReduceScatter(ctx, buf, blk, level); err != nil {
			return err
		}
		if err := g.cross.AllReduce(ctx, blk, level); err != nil {
			return err
		}
		if op == collective.Mean {
			collective.ScaleAny(blk, g.Size())
		}
		return g.local.AllGather(ctx, blk, buf)
	})
}

// run checks an operation's arguments (a bad one is this rank's error
// alone), then runs its stages with a context that ends when the flat group
// breaks. A stage's failure that leaves the job's groups out of step (a
// lost, silent or closed peer, a mismatch, a cancelled context) breaks the
// flat group, which tells every rank, and is returned; a rank stopped
// because another failed returns that failure's cause.
func (g *Group) run(ctx context.Context, kind collective.Kind, send, recv any, op collective.Op, root int, stages func(context.Context) error) error {
	g.seq++
	if _, err := collective.Prepare(kind, g.rank, g.Size(), send, recv, op, root); err != nil {
		return &collective.Error{Backend: "hier", Self: g.rank, Kind: kind, Seq: g.seq, Peer: -1, Err: err}
	}
	if err := g.brokenErr(kind); err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-g.brk.Broken():
			cancel()
		case <-done:
		}
	}()
	err := stages(sctx)
	if err == nil {
		return nil
	}
	if errors.Is(err, collective.ErrPeerLost) && ctx.Err() == nil {
		// A peer that left a level may have done so because a third rank
		// failed: it broke the flat group first, and its abort may still
		// be on the way while its closed level already shows here.
		t := time.NewTimer(abortGrace)
		select {
		case <-g.brk.Broken():
		case <-t.C:
		}
		t.Stop()
	}
	if berr := g.brokenErr(kind); berr != nil && ctx.Err() == nil {
		return berr // another rank's failure stopped this one
	}
	if outOfStep(err) || ctx.Err() != nil {
		g.brk.Abort(err)
	}
	return err
}

// abortGrace bounds the wait for another rank's abort after a peer left a
// level (as tcp's ring waits for one coming round the ring).
const abortGrace = 250 * time.Millisecond

// outOfStep reports whether err leaves the ranks' groups out of step.
func outOfStep(err error) bool {
	for _, e := range []error{collective.ErrPeerLost, collective.ErrTimeout, collective.ErrMismatch, collective.ErrClosed, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// brokenErr is the error of an operation of kind on a broken flat group,
// or nil while it is whole.
func (g *Group) brokenErr(kind collective.Kind) error {
	peer, err, broken := g.brk.Cause()
	if !broken {
		return nil
	}
	return &collective.Error{Backend: "hier", Self: g.rank, Kind: kind, Seq: g.seq, Peer: peer, Err: err}
}

// The scratch slots.
const (
	blockSlot = iota // a block between the levels
	wholeSlot        // a whole buffer in the levels' order
)

// block returns scratch slot's n elements of dt.
func (g *Group) block(slot int, dt collective.DType, n int) any {
	i := 0
	if dt == collective.Float64 {
		i = 1
	}
	if s := g.scratch[slot][i]; s != nil {
		if _, c, _ := collective.Describe(s); c >= n {
			return collective.Sub(s, 0, n)
		}
	}
	g.scratch[slot][i] = collective.Alloc(dt, n)
	return g.scratch[slot][i]
}

// twoLevel reports whether a reduce-scatter or all-gather of n elements
// (the whole buffer) runs on the two levels. Their blocks must line up:
// ordered by local index, then node, rank r's block of Counts(n, Size)
// must fall into local index l's block of the node's reduce-scatter
// (Counts(n, PerNode)), and there into node k's block of the cross-node one.
// That always holds when the ranks are numbered node by node (torchrun's
// RANK = node rank x ranks a node + local rank) or n divides by the size;
// other layouts and lengths run on the flat group.
func (g *Group) twoLevel(n int) bool {
	s := g.shape
	if s.Nodes < 2 || s.PerNode < 2 {
		return false // one level would be a group of one: flat is as good
	}
	size := g.Size()
	for l := range s.PerNode {
		m := 0
		for k := range s.Nodes {
			m += collective.BlockLen(n, size, g.at[k][l])
		}
		if m != collective.BlockLen(n, s.PerNode, l) {
			return false
		}
		for k := range s.Nodes {
			if collective.BlockLen(m, s.Nodes, k) != collective.BlockLen(n, size, g.at[k][l]) {
				return false
			}
		}
	}
	return true
}

// permute copies between buf (blocks in rank order, Counts(n, Size)) and
// levels (the same blocks by local index, then node): into levels when
// toLevels, out of it otherwise.
func (g *Group) permute(buf, levels any, n int, toLevels bool) {
	size, pos := g.Size(), 0
	for l := range g.shape.PerNode {
		for k := range g.shape.Nodes {
			r := g.at[k][l]
			lo, c := collective.Offset(n, size, r), collective.BlockLen(n, size, r)
			a, b := collective.Sub(buf, lo, lo+c), collective.Sub(levels, pos, pos+c)
			if toLevels {
				collective.Copy(b, a)
			} else {
				collective.Copy(a, b)
			}
			pos += c
		}
	}
}

// Broadcast sends root's buffer to its node's ranks, then each of them
// sends it across the nodes to the ranks with its local index.
func (g *Group) Broadcast(ctx context.Context, buf any, root int) error {
	return g.run(ctx, collective.KindBroadcast, buf, nil, 0, root, func(ctx context.Context) error {
		if g.shape.Node[root] == g.shape.Node[g.rank] {
			if err := g.local.Broadcast(ctx, buf, g.shape.Local[root]); err != nil {
				return err
			}
		}
		return g.cross.Broadcast(ctx, buf, g.shape.Node[root])
	})
}

// AllGather gathers across the nodes among the ranks with this rank's local
// index (each node's part of the result, one block a node), then inside the
// node, into the whole buffer ordered by local index and node, which it
// copies into recv in rank order. Where the blocks do not line up
// (twoLevel) it runs on the flat group, after the check.
func (g *Group) AllGather(ctx context.Context, send, recv any) error {
	dt, n, _ := collective.Describe(recv)
	if !g.twoLevel(n) {
		return g.onFlat(ctx, collective.KindAllGather, send, recv, 0, func(ctx context.Context) error { return g.flat.AllGather(ctx, send, recv) })
	}
	return g.run(ctx, collective.KindAllGather, send, recv, 0, 0, func(ctx context.Context) error {
		part := g.block(blockSlot, dt, collective.BlockLen(n, g.local.Size(), g.local.Rank()))
		if err := g.cross.AllGather(ctx, send, part); err != nil {
			return err
		}
		whole := g.block(wholeSlot, dt, n)
		if err := g.local.AllGather(ctx, part, whole); err != nil {
			return err
		}
		g.permute(recv, whole, n, false)
		return nil
	})
}

// ReduceScatter reduces inside the node (the send buffer copied into the
// order by local index and node, so that each local rank gets the blocks
// of the ranks with its local index), then across the nodes among the ranks
// with this rank's local index, which leaves each rank its block. Mean sums
// on both levels and divides once by the job's size. Where the blocks do
// not line up (twoLevel) it runs on the flat group, after the check.
func (g *Group) ReduceScatter(ctx context.Context, send, recv any, op collective.Op) error {
	dt, n, _ := collective.Describe(send)
	if !g.twoLevel(n) {
		return g.onFlat(ctx, collective.KindReduceScatter, send, recv, op, func(ctx context.Context) error { return g.flat.ReduceScatter(ctx, send, recv, op) })
	}
	return g.run(ctx, collective.KindReduceScatter, send, recv, op, 0, func(ctx context.Context) error {
		level := op
		if op == collective.Mean {
			level = collective.Sum
		}
		whole := g.block(wholeSlot, dt, n)
		g.permute(send, whole, n, true)
		part := g.block(blockSlot, dt, collective.BlockLen(n, g.local.Size(), g.local.Rank()))
		if err := g.local.ReduceScatter(ctx, whole, part, level); err != nil {
			return err
		}
		if err := g.cross.ReduceScatter(ctx, part, recv, level); err != nil {
			return err
		}
		if op == collective.Mean {
			collective.ScaleAny(recv, g.Size())
		}
		return nil
	})
}

// Barrier runs on the flat group, after the check.
func (g *Group) Barrier(ctx context.Context) error {
	return g.onFlat(ctx, collective.KindBarrier, nil, nil, 0, g.flat.Barrier)
}

// Split splits the flat group, after the check (sub-groups are flat).
func (g *Group) Split(ctx context.Context, color, key int) (collective.Collective, error) {
	s, ok := g.flat.(collective.Splitter)
	if !ok {
		return nil, fmt.Errorf("hier: %T cannot split its group", g.flat)
	}
	var sub collective.Collective
	err := g.onFlat(ctx, collective.KindBarrier, nil, nil, 0, func(ctx context.Context) error {
		var err error
		sub, err = s.Split(ctx, color, key)
		return err
	})
	return sub, err
}

// onFlat runs an operation of the flat group. A rank calling it while
// others run a two-level operation would wait in the flat group while they
// wait for it in a level, until the timeout; so it first passes a barrier
// in its node's group and one across the nodes, where such a difference
// shows as collective.ErrMismatch on every rank (at the cost of those two
// barriers).
func (g *Group) onFlat(ctx context.Context, kind collective.Kind, send, recv any, rop collective.Op, op func(context.Context) error) error {
	return g.run(ctx, kind, send, recv, rop, 0, func(ctx context.Context) error {
		if err := g.local.Barrier(ctx); err != nil {
			return err
		}
		if err := g.cross.Barrier(ctx); err != nil {
			return err
		}
		return op(ctx)
	})
}

// Close closes the cross-node, local and flat groups.
func (g *Group) Close() error {
	return errors.Join(g.cross.Close(), g.local.Close(), g.flat.Close())
}

// StopAgreed passes on to every level that the ranks agreed to stop
// (collective.StopAgreer).
func (g *Group) StopAgreed() {
	for _, c := range []collective.Collective{g.flat, g.local, g.cross} {
		collective.StopAgreed(c)
	}
}
