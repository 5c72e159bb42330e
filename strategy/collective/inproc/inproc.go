package inproc

import (
	"context"

	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// Option configures a group built by NewGroup.
type Option func(*config) error

type config struct {
	timeout time.Duration
	killAt  map[int]int
	delay   map[int]time.Duration
}

// Timeout sets how long a rank waits for the others before reporting the
// missing ranks (default collective.DefaultTimeout).
func Timeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("inproc: Timeout %v: use a positive duration", d)
		}
		c.timeout = d
		return nil
	}
}

// KillRank makes rank r die when it starts its operation number afterOps+1:
// that call returns an error, and every other rank's pending and later
// operations fail with an error naming r.
func KillRank(r, afterOps int) Option {
	return func(c *config) error {
		if afterOps < 0 {
			return fmt.Errorf("inproc: KillRank(%d, %d): afterOps must be >= 0", r, afterOps)
		}
		c.killAt[r] = afterOps
		return nil
	}
}

// DelayRank makes rank r wait d before each of its operations (a slow peer).
func DelayRank(r int, d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("inproc: DelayRank(%d, %v): delay must be >= 0", r, d)
		}
		c.delay[r] = d
		return nil
	}
}

// NewGroup returns the n ranks of a new group, rank i at index i. Each value
// also implements collective.Async.
func NewGroup(n int, opts ...Option) ([]collective.Collective, error) {
	if n < 1 {
		return nil, fmt.Errorf("inproc: group of %d ranks: use 1 or more", n)
	}
	cfg := config{timeout: collective.DefaultTimeout, killAt: map[int]int{}, delay: map[int]time.Duration{}}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	for r := range cfg.killAt {
		if r < 0 || r >= n {
			return nil, fmt.Errorf("inproc: KillRank(%d): rank outside the group of %d", r, n)
		}
	}
	for r := range cfg.delay {
		if r < 0 || r >= n {
			return nil, fmt.Errorf("inproc: DelayRank(%d): rank outside the group of %d", r, n)
		}
	}
	g := newGroup(n, cfg)
	out := make([]collective.Collective, n)
	for r := range out {
		out[r] = collective.WithAsync(&member{g: g, rank: r})
	}
	return out, nil
}

func newGroup(n int, cfg config) *group {
	return &group{n: n, cfg: cfg, rounds: map[uint64]*round{}, dead: make(chan struct{}), deadRank: -1}
}

type group struct {
	n   int
	cfg config
	// children are the sub-groups of its splits (Split), by split and color.
	children map[splitKey]*pending

	mu       sync.Mutex
	rounds   map[uint64]*round
	dead     chan struct{} // closed when a rank dies or closes
	deadRank int
	deadWhy  error
}

type round struct {
	hdr     []collective.Header
	send    []any
	recv    []any
	arrived int
	full    chan struct{} // closed when every rank arrived and result is computed
	left    int
	err     error // mismatch
	bad     int   // rank whose header disagrees with rank 0's
	result  any
}

type member struct {
	g      *group
	rank   int
	seq    uint64
	splits uint64 // Split calls so far
	closed atomic.Bool
}

var _ collective.Collective = (*member)(nil)

func (m *member) Rank() int { return m.rank }
func (m *member) Size() int { return m.g.n }

func (m *member) fail(h collective.Header, peer int, err error) error {
	return &collective.Error{Backend: "inproc", Self: m.rank, Kind: h.Kind, Seq: h.Seq, Peer: peer, Err: err}
}

func (m *member) AllReduce(ctx context.Context, buf any, op collective.Op) error {
	return m.do(ctx, collective.KindAllReduce, buf, nil, op, 0)
}
func (m *member) Broadcast(ctx context.Context, buf any, root int) error {
	return m.do(ctx, collective.KindBroadcast, buf, nil, 0, root)
}
func (m *member) AllGather(ctx context.Context, send, recv any) error {
	return m.do(ctx, collective.KindAllGather, send, recv, 0, 0)
}
func (m *member) ReduceScatter(ctx context.Context, send, recv any, op collective.Op) error {
	return m.do(ctx, collective.KindReduceScatter, send, recv, op, 0)
}
func (m *member) Barrier(ctx context.Context) error {
	return m.do(ctx, collective.KindBarrier, nil, nil, 0, 0)
}

func (m *member) Close() error {
	m.die(fmt.Errorf("%w: rank %d closed", collective.ErrPeerLost, m.rank))
	return nil
}

func (m *member) die(why error) {
	g := m.g
	m.closed.Store(true)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.deadRank < 0 {
		g.deadRank, g.deadWhy = m.rank, why
		close(g.dead)
	}
}

func (m *member) do(ctx context.Context, kind collective.Kind, send, recv any, op collective.Op, root int) error {
	h, err := collective.Prepare(kind, m.rank, m.g.n, send, recv, op, root)
	h.Seq = m.seq + 1
	if err != nil {
		// A local argument error consumes no sequence number: the call
		// never reached the group.
		return m.fail(h, -1, err)
	}
	m.seq++
	if m.closed.Load() {
		return m.fail(h, -1, collective.ErrClosed)
	}
	g := m.g
	if d := g.cfg.delay[m.rank]; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return m.fail(h, -1, ctx.Err())
		}
	}
	if k, ok := g.cfg.killAt[m.rank]; ok && int(h.Seq) > k {
		m.die(fmt.Errorf("%w: rank %d killed by fault injection after %d operations", collective.ErrPeerLost, m.rank, k))
		return m.fail(h, -1, fmt.Errorf("%w: killed by fault injection after %d operations", collective.ErrClosed, k))
	}

	g.mu.Lock()
	if g.deadRank >= 0 {
		dr, why := g.deadRank, g.deadWhy
		g.mu.Unlock()
		return m.fail(h, dr, why)
	}
	rd := g.rounds[h.Seq]
	if rd == nil {
		rd = &round{hdr: make([]collective.Header, g.n), send: make([]any, g.n), recv: make([]any, g.n),
			full: make(chan struct{}), left: g.n, bad: -1}
		g.rounds[h.Seq] = rd
	}
	rd.hdr[m.rank], rd.send[m.rank], rd.recv[m.rank] = h, send, recv
	rd.arrived++
	if rd.arrived == g.n {
		rd.compute(g.n)
		close(rd.full)
	}
	g.mu.Unlock()

	timer := time.NewTimer(g.cfg.timeout)
	defer timer.Stop()
	select {
	case <-rd.full:
	case <-g.dead:
		g.mu.Lock()
		dr, why := g.deadRank, g.deadWhy
		g.mu.Unlock()
		select {
		case <-rd.full: // the round completed before the death; finish it
		default:
			return m.fail(h, dr, why)
		}
	case <-ctx.Done():
		return m.fail(h, -1, ctx.Err())
	case <-timer.C:
		g.mu.Lock()
		var missing []int
		for r, hh := range rd.hdr {
			if hh.Kind == 0 {
				missing = append(missing, r)
			}
		}
		g.mu.Unlock()
		sort.Ints(missing)
		peer := -1
		if len(missing) > 0 {
			peer = missing[0]
		}
		return m.fail(h, peer, fmt.Errorf("%w: ranks %v did not join within %v", collective.ErrTimeout, missing, g.cfg.timeout))
	}
	if rd.err != nil {
		m.finish(h.Seq, rd)
		return m.fail(h, rd.bad, rd.err)
	}
	switch kind {
	case collective.KindAllReduce, collective.KindBroadcast:
		collective.Copy(send, rd.result)
	case collective.KindAllGather:
		collective.Copy(recv, rd.result)
	case collective.KindReduceScatter:
		n := h.Len
		lo := collective.Offset(n, g.n, m.rank)
		collective.Copy(recv, collective.Sub(rd.result, lo, lo+collective.BlockLen(n, g.n, m.rank)))
	}
	m.finish(h.Seq, rd)
	return nil
}

func (m *member) finish(seq uint64, rd *round) {
	m.g.mu.Lock()
	rd.left--
	if rd.left == 0 {
		delete(m.g.rounds, seq)
	}
	m.g.mu.Unlock()
}

// compute runs once, under the group lock, when every rank has arrived; it
// reads every input before any rank writes its output.
func (rd *round) compute(n int) {
	h0 := rd.hdr[0]
	for r := 1; r < n; r++ {
		if err := h0.Mismatch(0, r, rd.hdr[r]); err != nil {
			rd.err, rd.bad = err, r
			return
		}
	}
	switch h0.Kind {
	case collective.KindBarrier:
	case collective.KindBroadcast:
		rd.result = clone(rd.send[h0.Root])
	case collective.KindAllReduce, collective.KindReduceScatter:
		res := clone(rd.send[0])
		for r := 1; r < n; r++ {
			_ = collective.ReduceAny(res, rd.send[r], h0.Op)
		}
		if h0.Op == collective.Mean {
			collective.ScaleAny(res, n)
		}
		rd.result = res
	case collective.KindAllGather:
		res := collective.Alloc(h0.DType, h0.Len)
		for r := 0; r < n; r++ {
			lo := collective.Offset(h0.Len, n, r)
			collective.Copy(collective.Sub(res, lo, lo+collective.BlockLen(h0.Len, n, r)), rd.send[r])
		}
		rd.result = res
	}
}

func clone(buf any) any {
	dt, n, _ := collective.Describe(buf)
	c := collective.Alloc(dt, n)
	collective.Copy(c, buf)
	return c
}
