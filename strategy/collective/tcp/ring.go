package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/wire"
)

// New joins the group described by cfg: the rendezvous through rank 0, then a
// ring of connections (each rank dials the next). The result also implements
// collective.Async.
func New(ctx context.Context, cfg Config) (collective.Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rv, err := rendezvous.Meet(ctx, cfg.Rendezvous())
	if err != nil {
		return nil, err
	}
	g, err := newRing(ctx, rv, cfg)
	if err != nil {
		rv.Close()
		return nil, err
	}
	return collective.WithAsync(g), nil
}

// NewGroup is NewRing wrapped with collective.WithAsync (the shape
// shm.Auto takes as its fallback). Like NewRing, it takes rv over: the
// group's Close closes it; on an error it is still the caller's.
func NewGroup(ctx context.Context, rv *rendezvous.Rendezvous) (collective.Group, error) {
	g, err := NewRing(ctx, rv)
	if err != nil {
		return nil, err
	}
	return collective.WithAsync(g), nil
}

// conn is a data connection: TCP, or TLS over TCP.
type conn interface {
	net.Conn
	CloseWrite() error
}

// Ring is the TCP ring backend on top of a rendezvous. Most callers use New,
// which wraps it with collective.WithAsync.
type Ring struct {
	cfg        Config
	rank, size int
	rv         *rendezvous.Rendezvous
	next, prev conn // data flows prev -> us -> next; aborts flow both ways
	// in reads an operation's frames from prev, and out writes them to
	// next: spinning (spin_linux.go) over plain TCP, else prev's Read and
	// next's writes.
	in  io.Reader
	out func(*net.Buffers) (int64, error)
	// rd is what the receiver reads through: in, and for an operation of
	// three or more ranks run on the caller's goroutine, the wait frames
	// it sends while blocked (waitReader).
	rd waitReader

	wmu      sync.Mutex // forward writes on next
	midFrame bool       // a forward write was interrupted inside a frame
	rmu      sync.Mutex // reverse writes on prev

	seq     uint64
	hb      []byte
	whb     []byte      // headers of the frames of one write
	wbufs   [4][]byte   // their headers and payloads
	wnb     net.Buffers // what out writes (a field: &wnb does not escape per write)
	ohb     []byte      // the operation header's payload, sent
	rohb    [32]byte    // and received
	plans   map[planKey]plan
	scratch []byte // one segment, 8-byte aligned
	work32  []float32
	work64  []float64
	gath32  []float32 // the gather path's n whole buffers
	gath64  []float64
	gathBox any // the last of them as an interface (boxed)
	// inlineMax is the most bytes of an operation that may be on the way
	// from one rank to the next, unread, when they run on their callers'
	// goroutines (runInline): a quarter of next's kernel send
	// buffer, so such a write never waits for the peer to read.
	inlineMax int

	// The context whose cancellation breaks the group during an operation
	// (watch): registered once for all the operations on one context, as
	// ddp passes the same one every step (context.AfterFunc allocates).
	watchDone <-chan struct{} // under mu
	unwatch   func() bool     // under mu
	watchGen  uint64          // under mu
	activeGen atomic.Uint64   // watchGen of the running operation, 0 outside one

	mu       sync.Mutex
	broken   *cause
	brokenCh chan struct{}
	// told is closed once the rank that broke the group has sent its abort
	// to both neighbours and half-closed (breakGroup).
	told       chan struct{}
	closing    atomic.Bool
	nextClosed atomic.Bool
	// stopAgreed is set once the ranks agreed to stop (StopAgreed): a
	// peer's end is then expected, and logged at debug level.
	stopAgreed atomic.Bool
	// inOp is set while an operation runs over the ring (do).
	inOp       atomic.Bool
	readerDone chan struct{}
}

var _ collective.Collective = (*Ring)(nil)
var _ collective.StopAgreer = (*Ring)(nil)

// StopAgreed records that the ranks agreed to stop: a peer that ends from
// now on (its connection closes) is logged at debug level, not warned of.
func (g *Ring) StopAgreed() { g.stopAgreed.Store(true) }

// cause is why a group broke: the blamed rank (-1: none) and the error.
type cause struct {
	peer int
	err  error
}

// remoteErr is a failure reported by another rank.
type remoteErr struct {
	sentinel error
	text     string
}

func (e *remoteErr) Error() string { return e.text }
func (e *remoteErr) Unwrap() error { return e.sentinel }

const (
	codeOther uint8 = iota
	codeLost
	codeTimeout
	codeMismatch
	codeClosed
)

func codeOf(err error) uint8 {
	switch {
	case errors.Is(err, collective.ErrPeerLost):
		return codeLost
	case errors.Is(err, collective.ErrTimeout):
		return codeTimeout
	case errors.Is(err, collective.ErrMismatch):
		return codeMismatch
	case errors.Is(err, collective.ErrClosed):
		return codeClosed
	}
	return codeOther
}

func sentinelOf(code uint8) error {
	switch code {
	case codeTimeout:
		return collective.ErrTimeout
	case codeMismatch:
		return collective.ErrMismatch
	default:
		// A rank that failed or closed is lost as far as its peers go.
		return collective.ErrPeerLost
	}
}

// NewRing connects the ring over rv with the default segment and socket
// buffer sizes: each rank dials the next and accepts the previous one, both
// proving the token (rendezvous.DialPeer, AcceptPeer). The ring takes rv
// over: it keeps it (Rendezvous, Split) and its Close closes it, so the
// caller closes the ring only. On an error rv is still the caller's to
// close.
func NewRing(ctx context.Context, rv *rendezvous.Rendezvous) (*Ring, error) {
	rc := rv.Config()
	cfg := Config{Rank: rc.Rank, Size: rc.Size, Token: rc.Token, Timeout: rc.Timeout, Logger: rc.Logger}
	cfg.setRingDefaults()
	return newRing(ctx, rv, cfg)
}

func newRing(ctx context.Context, rv *rendezvous.Rendezvous, cfg Config) (*Ring, error) {
	g := &Ring{cfg: cfg, rank: cfg.Rank, size: cfg.Size, rv: rv, hb: make([]byte, wire.HeaderSize), whb: make([]byte, 2*wire.HeaderSize),
		brokenCh: make(chan struct{}), told: make(chan struct{}), readerDone: make(chan struct{})}
	sc := make([]float64, cfg.SegmentBytes/8)
	g.scratch = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(sc))), len(sc)*8)
	if g.size == 1 {
		close(g.readerDone)
		return g, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nextRank, prevRank := (g.rank+1)%g.size, (g.rank+g.size-1)%g.size
	// Accept the previous rank while dialing the next: each side of a
	// connection waits for the other's handshake frames, so the two must
	// run at once or the ring would wait on itself.
	type result struct {
		c   net.Conn
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		c, err := rv.AcceptPeer(ctx, prevRank)
		accepted <- result{c, err}
	}()
	next, err := rv.DialPeer(ctx, nextRank)
	if err != nil {
		cancel()
		if a := <-accepted; a.err == nil {
			a.c.Close()
		}
		return nil, fmt.Errorf("tcp: %w", err)
	}
	a := <-accepted
	if a.err != nil {
		next.Close()
		return nil, fmt.Errorf("tcp: %w", a.err)
	}
	g.next, g.prev = next.(conn), a.c.(conn)
	for _, c := range []net.Conn{next, a.c} {
		if n, ok := c.(interface{ NetConn() net.Conn }); ok {
			c = n.NetConn()
		}
		if t, ok := c.(*net.TCPConn); ok {
			t.SetNoDelay(true)
			t.SetReadBuffer(cfg.SocketBuffer)
			t.SetWriteBuffer(cfg.SocketBuffer)
		}
	}
	g.inlineMax = sendBuffer(next) / 4
	if cfg.wrap != nil {
		g.next, g.prev = cfg.wrap(g.next, true), cfg.wrap(g.prev, false)
	}
	g.attach(g.next, g.prev)
	rv.StopAccepting()
	go g.reverseReader()
	return g, nil
}

// attach makes next and prev the ring's connections, with the reader and
// writer of operations over them.
func (g *Ring) attach(next, prev conn) {
	g.next, g.prev = next, prev
	if g.in, _ = spinning(prev); g.in == nil {
		g.in = prev
	}
	if _, g.out = spinning(next); g.out == nil {
		g.out = func(b *net.Buffers) (int64, error) { return b.WriteTo(next) }
	}
	g.rd = waitReader{g: g}
}

func (g *Ring) nextRank() int { return (g.rank + 1) % g.size }
func (g *Ring) prevRank() int { return (g.rank + g.size - 1) % g.size }

// Rank returns this process's rank.
func (g *Ring) Rank() int { return g.rank }

// Size returns the number of ranks.
func (g *Ring) Size() int { return g.size }

// Rendezvous returns the star connections the ring was built from, which
// the ring's Close closes.
func (g *Ring) Rendezvous() *rendezvous.Rendezvous { return g.rv }

// reverseReader watches the back channel of the connection to the next rank:
// the next rank sends aborts and byes there, and its death shows up as EOF
// even while no operation runs.
func (g *Ring) reverseReader() {
	defer close(g.readerDone)
	hb := make([]byte, wire.HeaderSize)
	for {
		hdr, p, err := wire.ReadControl(g.next, hb)
		if g.closing.Load() {
			return
		}
		if err != nil {
			if g.nextClosed.Load() {
				return
			}
			if errors.Is(err, io.EOF) {
				g.letOpEnd()
			}
			g.breakGroup(cause{g.nextRank(), fmt.Errorf("%w: connection to rank %d lost: %v", collective.ErrPeerLost, g.nextRank(), err)})
			return
		}
		switch hdr.Kind {
		case wire.KindAbort:
			if a, err := wire.DecodeAbort(p); err == nil {
				g.breakGroup(cause{a.Blame, &remoteErr{sentinelOf(hdr.Code), fmt.Sprintf("%s (reported by rank %d)", a.Msg, a.From)}})
			} else {
				g.breakGroup(cause{g.nextRank(), fmt.Errorf("%w: rank %d sent a bad abort: %v", collective.ErrPeerLost, g.nextRank(), err)})
			}
			return
		case wire.KindBye:
			g.nextClosed.Store(true)
		default:
			g.breakGroup(cause{g.nextRank(), fmt.Errorf("%w: rank %d sent %s on the back channel", collective.ErrPeerLost, g.nextRank(), hdr.Kind)})
			return
		}
	}
}

// eofGrace is how long an operation in progress gets to end once the next
// rank's connection has closed (EOF): it may have all it needs on the way.
const eofGrace = time.Second

// letOpEnd waits, up to eofGrace, for the operation in progress to end.
// A rank that finished an operation may exit at once (a program returning
// after Fit's last collective), closing its sockets cleanly: the frames it
// sent before are still to be read here, and breaking the group now would
// fail the operation that they complete. An operation that needs more of
// the next rank fails on its own (its reads or writes meet the closed
// connection), or here after the grace.
func (g *Ring) letOpEnd() {
	if !g.inOp.Load() {
		return
	}
	deadline := time.Now().Add(eofGrace)
	for g.inOp.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the operation runs on its caller's goroutine
	}
}

// breakGroup records the first failure, tells both neighbours, and interrupts
// any blocked read or write. It returns the recorded cause.
func (g *Ring) breakGroup(c cause) cause {
	g.mu.Lock()
	if g.broken != nil {
		b := *g.broken
		g.mu.Unlock()
		return b
	}
	g.broken = &c
	close(g.brokenCh)
	g.mu.Unlock()
	defer close(g.told)
	if g.size == 1 {
		return c
	}
	if !g.closing.Load() {
		ev := g.cfg.Logger.Warn()
		if g.stopAgreed.Load() {
			ev = g.cfg.Logger.Debug() // a peer ending after the stop every rank agreed on
		}
		ev.Int("blame", c.peer).Err(c.err).Msg("collective group broken")
	}
	blame := c.peer
	if blame < 0 {
		blame = g.rank
	}
	msg := wire.ControlFrame(wire.KindAbort, codeOf(c.err), 0, wire.Abort{From: g.rank, Blame: blame, Msg: c.err.Error()}.Encode())
	past := time.Unix(1, 0)
	// Kick our own blocked reader and writer.
	g.prev.SetReadDeadline(past)
	g.next.SetWriteDeadline(past)
	g.rmu.Lock()
	g.prev.SetWriteDeadline(time.Now().Add(time.Second))
	g.prev.Write(msg)
	g.rmu.Unlock()
	g.wmu.Lock()
	if !g.midFrame {
		g.next.SetWriteDeadline(time.Now().Add(time.Second))
		g.next.Write(msg)
	}
	g.midFrame = true // nothing more goes forward
	g.wmu.Unlock()
	halfClose(g.next)
	halfClose(g.prev)
	return c
}

// rawTCP is the TCP connection under a TLS connection, nil for plain TCP.
func rawTCP(c conn) *net.TCPConn {
	if t, ok := c.(interface{ NetConn() net.Conn }); ok {
		tc, _ := t.NetConn().(*net.TCPConn)
		return tc
	}
	return nil
}

// halfClose ends this side's writes on c. A TLS connection is half-closed
// on its TCP connection, without a close_notify alert: a write that a
// deadline interrupted may have put part of a TLS record on the wire, and
// an alert after it reads at the peer as "bad record MAC" instead of the
// end of the stream (the ring's own Bye and abort frames say how it ends,
// so the alert carries nothing the peer needs).
func halfClose(c conn) {
	if tc := rawTCP(c); tc != nil {
		tc.CloseWrite()
		return
	}
	c.CloseWrite()
}

// closeConn closes c, a TLS connection on its TCP connection (see halfClose).
func closeConn(c conn) {
	if tc := rawTCP(c); tc != nil {
		tc.Close()
		return
	}
	c.Close()
}

// tellWait bounds opErr's wait for the abort to be sent: breakGroup's two
// writes have a second each.
const tellWait = 3 * time.Second

// abortGrace bounds how long a rank whose predecessor's connection ended
// without a Bye or an abort waits for the abort to come around the other
// way (awaitAbort).
const abortGrace = 250 * time.Millisecond

// Abort breaks the ring for every rank, as a failure of its own would: the
// ranks running or starting an operation on it get an error wrapping err's
// sentinel (collective.ErrPeerLost, ErrMismatch, ...) that blames
// collective.PeerOf(err) (no rank when err blames none), with err's text.
// A composite group (strategy/collective/hier) calls it when one of its
// levels fails, so that ranks waiting in another level learn of it at once.
func (g *Ring) Abort(err error) {
	peer := -1
	if p, ok := collective.PeerOf(err); ok && p < g.size {
		peer = p
	}
	g.breakGroup(cause{peer, err})
}

// Broken is closed once the ring is broken: a neighbour died or closed
// mid-operation, a rank aborted, or this rank closed the ring.
func (g *Ring) Broken() <-chan struct{} { return g.brokenCh }

// Cause returns why the ring broke (the blamed rank, -1 for none) and
// whether it has. When it has, it first waits (up to a few seconds) until
// the neighbours have been told, as a failed operation does: a program that
// exits at once on the error would otherwise take the abort with it.
func (g *Ring) Cause() (peer int, err error, broken bool) {
	c := g.brokenCause()
	if c == nil {
		return -1, nil, false
	}
	t := time.NewTimer(tellWait)
	select {
	case <-g.told:
	case <-t.C:
	}
	t.Stop()
	return c.peer, c.err, true
}

// awaitAbort waits up to abortGrace (a quarter of the timeout when that is
// shorter) for another rank's abort to break the group, and returns its
// cause, or nil. A predecessor that broke its group because a third rank
// died cannot always send its abort forward: its write to us may have been
// cut mid-frame (under TLS, a kicked write spoils the connection for good),
// so we see only the end of the stream. The ranks on the other side of the
// dead one send their abort back along the ring; without this wait, we would
// blame the live predecessor that merely closed (TestTLSConformance's
// ClosedPeer saw it about once in 100 runs). A predecessor that died itself
// costs this wait before it is blamed.
func (g *Ring) awaitAbort() *cause {
	t := time.NewTimer(min(abortGrace, g.cfg.Timeout/4))
	defer t.Stop()
	select {
	case <-g.brokenCh:
		return g.brokenCause()
	case <-t.C:
		return nil
	}
}

func (g *Ring) brokenCause() *cause {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.broken
}

// opErr is the error of operation h failed for c. When the group is
// broken, it first waits (up to tellWait) for the goroutine that broke it
// to have told both neighbours: an operation returns as soon as its kicked
// read sees the group broken, which can be before the abort is on the
// wire, and a program that exits at once on the error (not calling Close)
// would take the abort with it; the neighbour then saw only the end of the
// stream and blamed this live rank (TestKillRankProcess/tcp/kill=2 in CI:
// rank 0 blamed rank 1 for rank 2's death).
func (g *Ring) opErr(h collective.Header, c cause) error {
	if g.brokenCause() != nil {
		t := time.NewTimer(tellWait)
		select {
		case <-g.told:
		case <-t.C:
		}
		t.Stop()
	}
	return &collective.Error{Backend: "tcp", Self: g.rank, Kind: h.Kind, Seq: h.Seq, Peer: c.peer, Err: c.err}
}

// Close tells the neighbours this rank is leaving and closes its connections.
func (g *Ring) Close() error {
	if g.closing.Swap(true) {
		return nil
	}
	if g.size > 1 {
		if g.brokenCause() == nil {
			bye := wire.ControlFrame(wire.KindBye, 0, 0, nil)
			g.rmu.Lock()
			g.prev.SetWriteDeadline(time.Now().Add(time.Second))
			g.prev.Write(bye)
			g.rmu.Unlock()
			g.next.SetWriteDeadline(time.Unix(1, 0)) // kick a blocked sender
			g.wmu.Lock()
			if !g.midFrame {
				g.next.SetWriteDeadline(time.Now().Add(time.Second))
				g.next.Write(bye)
			}
			g.midFrame = true
			g.wmu.Unlock()
		}
		closeConn(g.next)
		closeConn(g.prev)
		<-g.readerDone
	}
	g.breakGroup(cause{-1, fmt.Errorf("%w: rank %d closed its group", collective.ErrClosed, g.rank)})
	g.mu.Lock()
	if g.unwatch != nil {
		g.unwatch() // the context may outlive the group: let go of it
		g.unwatch, g.watchDone = nil, nil
	}
	g.mu.Unlock()
	return g.rv.Close()
}

func (g *Ring) AllReduce(ctx context.Context, buf any, op collective.Op) error {
	return g.do(ctx, collective.KindAllReduce, buf, nil, op, 0)
}

func (g *Ring) Broadcast(ctx context.Context, buf any, root int) error {
	return g.do(ctx, collective.KindBroadcast, buf, nil, 0, root)
}

func (g *Ring) AllGather(ctx context.Context, send, recv any) error {
	return g.do(ctx, collective.KindAllGather, send, recv, 0, 0)
}

func (g *Ring) ReduceScatter(ctx context.Context, send, recv any, op collective.Op) error {
	return g.do(ctx, collective.KindReduceScatter, send, recv, op, 0)
}

func (g *Ring) Barrier(ctx context.Context) error {
	return g.do(ctx, collective.KindBarrier, nil, nil, 0, 0)
}

// span is a range of elements; flags say what a received span needs.
type span struct {
	lo, hi int
	reduce bool // received: reduce into the buffer (else copy)
	scale  bool // received: divide by Size afterwards (Mean, own block)
}

type plan struct {
	sends []span
	dep   []int // dep[i] >= 0: recvs[dep[i]] must land before sends[i] leaves
	recvs []span
	// peerFirst: the received values are the lower rank's, the first
	// operand of the reduction (two ranks gathering whole buffers).
	peerFirst bool
	free      bool // no send waits for a receive
	maxSend   int  // the most elements of one send
	sendElems int  // the elements of all sends
}

// planKey is what a plan depends on: the operation without its sequence
// number, and how it runs.
type planKey struct {
	h    collective.Header
	algo uint8
	pair bool
}

// maxPlans bounds the plans a ring keeps: a training step runs the same
// few shapes over and over, a program that runs more starts again.
const maxPlans = 64

// plan returns the plan of h run by algo, built once per shape: building
// one allocates its span lists.
func (g *Ring) plan(h collective.Header, algo uint8, pair bool) plan {
	h.Seq = 0
	k := planKey{h, algo, pair}
	if p, ok := g.plans[k]; ok {
		return p
	}
	p := g.makePlan(h, algo, pair)
	if g.plans == nil || len(g.plans) >= maxPlans {
		g.plans = make(map[planKey]plan)
	}
	g.plans[k] = p
	return p
}

func (g *Ring) do(ctx context.Context, kind collective.Kind, send, recv any, op collective.Op, root int) error {
	h, err := collective.Prepare(kind, g.rank, g.size, send, recv, op, root)
	h.Seq = g.seq + 1
	if err != nil {
		return &collective.Error{Backend: "tcp", Self: g.rank, Kind: kind, Seq: h.Seq, Peer: -1, Err: err}
	}
	g.seq++
	if c := g.brokenCause(); c != nil {
		return g.opErr(h, *c)
	}
	if err := ctx.Err(); err != nil {
		return g.opErr(h, cause{-1, err})
	}
	if g.nextClosed.Load() {
		return g.opErr(h, g.breakGroup(cause{g.nextRank(), fmt.Errorf("%w: rank %d %w", collective.ErrPeerLost, g.nextRank(), collective.ErrPeerClosed)}))
	}
	buf := send // the buffer the ring works on
	algo := g.algorithm(h)
	pair := algo == algoGather && g.pairGather(h)
	switch {
	case pair:
		// Each rank sends its own buffer and reduces the other's into it
		// as it lands (runInline writes a segment before it reads the one
		// that overwrites it): no copy, no workspace.
	case algo == algoGather:
		buf = g.gatherSpace(send, h.Len)
	case kind == collective.KindReduceScatter:
		buf = g.workspace(send)
		collective.Copy(buf, send)
	case kind == collective.KindAllGather:
		buf = recv
		lo := collective.Offset(h.Len, g.size, g.rank)
		collective.Copy(collective.Sub(recv, lo, lo+collective.BlockLen(h.Len, g.size, g.rank)), send)
	case kind == collective.KindBarrier:
		buf = []float32{}
	}
	if g.size > 1 {
		g.inOp.Store(true)
		err := g.runRing(ctx, h, buf, g.plan(h, algo, pair), algo)
		g.inOp.Store(false)
		if err != nil {
			return err
		}
	}
	switch {
	case pair: // reduced as it landed
	case algo == algoGather:
		switch b := send.(type) {
		case []float32:
			reduceGathered(b, g.gath32, g.size, h.Op)
		case []float64:
			reduceGathered(b, g.gath64, g.size, h.Op)
		}
	case kind == collective.KindReduceScatter:
		lo := collective.Offset(h.Len, g.size, g.rank)
		collective.Copy(recv, collective.Sub(buf, lo, lo+collective.BlockLen(h.Len, g.size, g.rank)))
	}
	return nil
}

// Algorithms of an all-reduce, sent in the Code field of its operation
// header frame so that ranks configured differently fail with a clear
// mismatch instead of misreading each other's frames.
const (
	algoRing   uint8 = iota // reduce-scatter then all-gather round the ring
	algoGather              // whole buffers round the ring, reduced by every rank
)

func algoName(a uint8) string {
	switch a {
	case algoRing:
		return "the ring"
	case algoGather:
		return "gathering whole buffers"
	}
	return fmt.Sprintf("algorithm %d", a)
}

// algorithm picks how to run h: an all-reduce of at most SmallBytes gathers
// whole buffers (n-1 steps of latency instead of 2(n-1); each rank sends
// (n-1) buffer lengths instead of 2(n-1)/n, and reduces n buffers), every
// other operation uses the ring.
func (g *Ring) algorithm(h collective.Header) uint8 {
	if h.Kind == collective.KindAllReduce && g.size > 1 && h.Len*h.DType.Size() <= g.cfg.SmallBytes {
		return algoGather
	}
	return algoRing
}

// window is the most bytes of its own data frames a rank of two may have
// written beyond those it has received (runInline): as the peer keeps the
// same rule, at most twice that, inlineMax, is ever unread on the way, and
// the kernel takes it without the peer reading.
func (g *Ring) window() int { return g.inlineMax / 2 }

// pairGather reports whether the all-reduce h, gathering whole buffers
// between two ranks, runs in place (runInline, which needs each segment to
// fit the window); otherwise it runs as for n ranks, from a copy in the
// gather workspace, and reduces once everything has landed. Both send the
// same frames.
func (g *Ring) pairGather(h collective.Header) bool {
	esz := h.DType.Size()
	return g.size == 2 && min(max(g.cfg.SegmentBytes/esz, 1), h.Len)*esz+wire.HeaderSize <= g.window()
}

// gatherSpace returns room for Size buffers of send's l elements, one
// after another (also left in gath32 or gath64), with send copied into
// this rank's place. Typed, with no view of send as an interface: each
// would be an allocation per operation.
func (g *Ring) gatherSpace(send any, l int) any {
	switch b := send.(type) {
	case []float32:
		g.gath32 = gathered(g.gath32, b, l, g.rank, g.size)
		return boxed(&g.gathBox, g.gath32)
	case []float64:
		g.gath64 = gathered(g.gath64, b, l, g.rank, g.size)
		return boxed(&g.gathBox, g.gath64)
	}
	return nil
}

// boxed returns s as an interface: the one in *box when that holds the
// same slice (a slice's conversion to an interface allocates), else a new
// one, kept there.
func boxed[T collective.Float](box *any, s []T) any {
	if v, ok := (*box).([]T); ok && len(v) == len(s) && unsafe.SliceData(v) == unsafe.SliceData(s) {
		return *box
	}
	*box = s
	return *box
}

func gathered[T collective.Float](space, send []T, l, rank, size int) []T {
	if cap(space) < l*size {
		space = make([]T, l*size)
	}
	space = space[:l*size]
	copy(space[rank*l:(rank+1)*l], send)
	return space
}

// reduceGathered reduces the n buffers of all, one after another, into
// dst in rank order: every rank reduces the same buffers in the same
// order, so every rank ends with the same bits.
func reduceGathered[T collective.Float](dst, all []T, n int, op collective.Op) {
	l := len(dst)
	collective.ReduceTo(dst, all[:l], all[l:2*l], op)
	for q := 2; q < n; q++ {
		collective.ReduceInto(dst, all[q*l:(q+1)*l], op)
	}
	if op == collective.Mean {
		collective.Scale(dst, n)
	}
}

func (g *Ring) workspace(like any) any {
	switch b := like.(type) {
	case []float32:
		if cap(g.work32) < len(b) {
			g.work32 = make([]float32, len(b))
		}
		return g.work32[:len(b)]
	case []float64:
		if cap(g.work64) < len(b) {
			g.work64 = make([]float64, len(b))
		}
		return g.work64[:len(b)]
	}
	return nil
}

func (g *Ring) makePlan(h collective.Header, algo uint8, pair bool) plan {
	p := g.spans(h, algo, pair)
	p.free = true
	for i, s := range p.sends {
		p.free = p.free && p.dep[i] < 0
		p.maxSend = max(p.maxSend, s.hi-s.lo)
		p.sendElems += s.hi - s.lo
	}
	return p
}

// spans lays out the frames of h run by algo: what each rank sends and
// receives, in order.
func (g *Ring) spans(h collective.Header, algo uint8, pair bool) plan {
	n, r, N := g.size, g.rank, h.Len
	esz := 4
	if h.DType == collective.Float64 {
		esz = 8
	}
	segElems := max(g.cfg.SegmentBytes/esz, 1)
	mod := func(x int) int { return ((x % n) + n) % n }
	chunk := func(c int, reduce, scale bool) []span {
		lo := collective.Offset(N, n, c)
		hi := lo + collective.BlockLen(N, n, c)
		if algo == algoGather { // block c is rank c's whole buffer
			lo, hi = c*N, (c+1)*N
		}
		if pair { // in place: every rank's buffer is buf
			lo, hi = 0, N
		}
		if lo == hi {
			return []span{{lo, hi, reduce, scale}} // an empty frame still synchronises
		}
		var out []span
		for s := lo; s < hi; s += segElems {
			out = append(out, span{s, min(s+segElems, hi), reduce, scale})
		}
		return out
	}
	var p plan
	if pair {
		// Two ranks, each sending its own buffer whole and reducing the
		// other's into it, segment by segment, in rank order.
		p.sends = chunk(r, false, false)
		p.dep = make([]int, len(p.sends))
		for i := range p.dep {
			p.dep[i] = -1
		}
		p.recvs = chunk(1-r, true, h.Op == collective.Mean)
		p.peerFirst = r == 1
		return p
	}
	var first []span
	last := 0 // spans received in the final step: nothing is sent after them
	kind := h.Kind
	if algo == algoGather {
		kind = collective.KindAllGather // of whole buffers
	}
	switch kind {
	case collective.KindBroadcast:
		all := chunk(0, false, false)
		if N > 0 {
			all = nil
			for s := 0; s < N; s += segElems {
				all = append(all, span{s, min(s+segElems, N), false, false})
			}
		}
		if r == h.Root {
			p.sends = all
			p.dep = make([]int, len(all))
			for i := range p.dep {
				p.dep[i] = -1
			}
			return p
		}
		p.recvs = all
		if mod(r+1) != h.Root {
			p.sends = all
			p.dep = make([]int, len(all))
			for i := range p.dep {
				p.dep[i] = i
			}
		}
		return p
	case collective.KindAllReduce, collective.KindReduceScatter, collective.KindBarrier:
		mean := h.Op == collective.Mean
		first = chunk(mod(r-1), false, false)
		for s := 0; s < n-1; s++ {
			lastRS := s == n-2
			got := chunk(mod(r-2-s), true, mean && lastRS)
			p.recvs = append(p.recvs, got...)
			last = len(got)
		}
		if h.Kind != collective.KindReduceScatter {
			for s := 0; s < n-1; s++ {
				got := chunk(mod(r-1-s), false, false)
				p.recvs = append(p.recvs, got...)
				last = len(got)
			}
		}
	case collective.KindAllGather:
		first = chunk(r, false, false)
		for s := 0; s < n-1; s++ {
			got := chunk(mod(r-1-s), false, false)
			p.recvs = append(p.recvs, got...)
			last = len(got)
		}
	}
	p.sends = append(p.sends, first...)
	for range first {
		p.dep = append(p.dep, -1)
	}
	for i := 0; i < len(p.recvs)-last; i++ {
		s := p.recvs[i]
		p.sends = append(p.sends, span{lo: s.lo, hi: s.hi})
		p.dep = append(p.dep, i)
	}
	return p
}

// runRing moves one operation's frames: a sender goroutine streams p.sends
// to the next rank, each as soon as the span it depends on has landed, while
// this goroutine reads p.recvs from the previous rank; or, where the
// kernel takes the sends without next reading (inline), runInline.
func (g *Ring) runRing(ctx context.Context, h collective.Header, buf any, p plan, algo uint8) error {
	if err := g.watch(ctx, h); err != nil {
		return err
	}
	defer g.activeGen.Store(0)
	esz := h.DType.Size()
	data := collective.Bytes(buf)
	oh := wire.OpHeader{Kind: uint8(h.Kind), DType: uint8(h.DType), Op: uint8(h.Op), Root: h.Root, Length: uint64(h.Len)}
	g.ohb = oh.Append(g.ohb[:0])
	if g.inline(p, esz) {
		g.rd.start(h.Seq, g.size > 2)
		return g.runInline(h, algo, data, buf, esz, p)
	}
	g.rd.start(h.Seq, false) // the sender goroutine sends the wait frames
	progress := make(chan struct{}, len(p.recvs))
	quit, finished := make(chan struct{}), make(chan struct{})
	sendErr := make(chan error, 1)
	go func() { sendErr <- g.sender(h, g.ohb, algo, data, esz, p, progress, quit, finished) }()

	landed := func(int) error { progress <- struct{}{}; return nil }
	if err := g.receiver(h, algo, data, buf, esz, p, landed); err != nil {
		close(quit)
		<-sendErr
		return err
	}
	close(finished) // every progress signal is buffered: the sender ends its sends
	return <-sendErr
}

// inline reports whether runInline runs p: all its sends together fit the
// window (a barrier, a small all-reduce of any number of ranks), so that
// only their receives hold them; or, with two ranks, no send waits for a
// receive and each fits the window.
func (g *Ring) inline(p plan, esz int) bool {
	if g.size == 2 && p.free && p.maxSend*esz+wire.HeaderSize <= g.window() {
		return true
	}
	return p.sendElems*esz+(len(p.sends)+1)*wire.HeaderSize <= g.window()
}

// runInline runs an operation (inline) on the caller's goroutine: it
// writes each send once the receive it waits for has landed and while it
// is at most window() bytes ahead of what it has received, and reads (and
// reduces) the predecessor's frames in between. A sender goroutine would
// only add a thread to wake, a goroutine, channels and a ticker to
// allocate, and a handoff per segment, each a wake-up on a host with more
// ranks than cores.
//
// With three or more ranks, all sends fit the window together: each rank's
// unread data on the way to next stays within what the kernel takes, so no
// write waits on a reader. While its reads wait, the rank sends next wait
// frames as the sender goroutine does (waitReader). With two ranks it
// sends none: they would tell next that this rank is alive while blocked
// on prev, which is next itself, not waiting on this rank: it has had
// everything this rank could send. Two ranks keep to the window, so what
// is on the way unread stays within what the kernel takes without the peer reading
// (window): neither waits in a write while the other does too. Gathering
// in place (pair), a rank writes a segment before it reads the peer's of
// the same place, which overwrites it: both lists are the same spans, so
// the window lets that segment go first. A send that waits for a receive
// runs only in an operation whose sends all fit the window together: then
// only receives hold sends, as in the ring with its sender goroutine,
// where each rank's next send waits for a frame its peer sent earlier.
func (g *Ring) runInline(h collective.Header, algo uint8, data []byte, buf any, esz int, p plan) error {
	win := g.window()
	opSent := false     // the operation header goes with the first data frame: one write
	sent, ahead := 0, 0 // sends written; their bytes beyond those received
	landed := 0         // receives landed
	flush := func(all bool) error {
		for ; sent < len(p.sends) && p.dep[sent] < landed; sent++ {
			s := p.sends[sent]
			n := (s.hi-s.lo)*esz + wire.HeaderSize
			if !all && ahead+n > win {
				break
			}
			d := frame{wire.KindData, 0, data[s.lo*esz : s.hi*esz]}
			var err error
			if opSent {
				err = g.writeFrames(h.Seq, d)
			} else {
				err = g.writeFrames(h.Seq, frame{wire.KindOp, algo, g.ohb}, d)
				opSent = true
			}
			if err != nil {
				return g.sendFailed(h, g.writeErr(err), nil)
			}
			ahead += n
		}
		if !opSent { // no data to send
			opSent = true
			if err := g.writeFrames(h.Seq, frame{wire.KindOp, algo, g.ohb}); err != nil {
				return g.sendFailed(h, g.writeErr(err), nil)
			}
		}
		return nil
	}
	if err := flush(false); err != nil {
		return err
	}
	onLanded := func(i int) error {
		s := p.recvs[i]
		ahead -= (s.hi-s.lo)*esz + wire.HeaderSize
		landed = i + 1
		return flush(false)
	}
	if err := g.receiver(h, algo, data, buf, esz, p, onLanded); err != nil {
		return err
	}
	return flush(true) // the peer has sent everything: it only reads now
}

// watch makes the cancellation of ctx during this operation break the
// group (a blocked read or write would otherwise wait for the timeout).
// One registration serves every operation on the same context; a
// cancellation between operations breaks nothing, and the next operation
// fails on the context's error.
func (g *Ring) watch(ctx context.Context, h collective.Header) error {
	done := ctx.Done()
	if done == nil {
		return nil
	}
	g.mu.Lock()
	if done != g.watchDone {
		if g.unwatch != nil {
			g.unwatch()
		}
		g.watchGen++
		gen := g.watchGen
		g.watchDone = done
		g.unwatch = context.AfterFunc(ctx, func() {
			if g.activeGen.Load() == gen {
				g.breakGroup(cause{-1, fmt.Errorf("rank %d gave up: %w", g.rank, ctx.Err())})
			}
		})
	}
	g.activeGen.Store(g.watchGen)
	g.mu.Unlock()
	// Cancelled before the store, its callback found no operation.
	if err := ctx.Err(); err != nil {
		return g.opErr(h, g.breakGroup(cause{-1, fmt.Errorf("rank %d gave up: %w", g.rank, err)}))
	}
	return nil
}

// sender streams p.sends to the next rank. While it waits for a span to land
// or, its sends done, for the receiver to finish, it sends a wait frame every
// quarter timeout: this rank is alive and blocked on its predecessor, so the
// next rank must not time out on it (see the package doc, Faults).
func (g *Ring) sender(h collective.Header, ohb []byte, algo uint8, data []byte, esz int, p plan, progress, quit, finished <-chan struct{}) error {
	fail := func(err error) error { return g.sendFailed(h, err, quit) }
	tick := time.NewTicker(max(g.cfg.Timeout/4, time.Millisecond))
	defer tick.Stop()
	// A wait frame is advice, never a reason to fail: the next rank may have
	// finished this operation and closed its group (it said bye, or its
	// socket is gone), and a broken connection fails the next data write
	// anyway.
	quiet := false
	wait := func() {
		if quiet || g.nextClosed.Load() {
			return
		}
		if g.writeFrame(wire.KindWait, 0, h.Seq, nil) != nil {
			quiet = true
		}
	}
	// The operation header goes out with the first data frame when that
	// one waits for nothing: one write, and one wake-up of the receiver.
	frames := []frame{{wire.KindOp, algo, ohb}}
	first := 0
	if len(p.sends) > 0 && p.dep[0] < 0 {
		s := p.sends[0]
		frames = append(frames, frame{wire.KindData, 0, data[s.lo*esz : s.hi*esz]})
		first = 1
	}
	if err := g.writeFrames(h.Seq, frames...); err != nil {
		return fail(g.writeErr(err))
	}
	done := 0
	for i := first; i < len(p.sends); i++ {
		s := p.sends[i]
		for done <= p.dep[i] {
			select {
			case <-progress:
				done++
			case <-quit:
				return nil
			case <-tick.C:
				wait()
			}
		}
		if err := g.writeFrame(wire.KindData, 0, h.Seq, data[s.lo*esz:s.hi*esz]); err != nil {
			return fail(g.writeErr(err))
		}
	}
	for {
		select {
		case <-quit:
			return nil
		case <-finished:
			return nil
		case <-tick.C:
			wait()
		}
	}
}

// sendFailed breaks the group after a failed write to next. A write fails
// when the next rank is gone; its abort on the back channel usually says
// why, so the reader gets a moment to see it (quit: the operation ended
// first).
func (g *Ring) sendFailed(h collective.Header, err error, quit <-chan struct{}) error {
	select {
	case <-g.brokenCh:
	case <-quit:
	case <-time.After(200 * time.Millisecond):
	}
	return g.opErr(h, g.breakGroup(cause{g.nextRank(), err}))
}

func (g *Ring) writeErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: rank %d accepted no data for %v%s", collective.ErrTimeout, g.nextRank(), g.cfg.Timeout, g.silenceHint(g.nextRank()))
	}
	return fmt.Errorf("%w: sending to rank %d: %v", collective.ErrPeerLost, g.nextRank(), err)
}

// silenceHint names the network as a cause of peer's silence when peer
// runs on another machine: no reset and no end of stream came, so its
// process may be alive, and a link, switch or firewall between the two
// machines that drops the traffic looks the same from here. "" when peer
// shares this machine.
func (g *Ring) silenceHint(peer int) string {
	if g.rv == nil {
		return ""
	}
	hosts := g.rv.Hosts()
	if g.rank >= len(hosts) || peer >= len(hosts) || hosts[peer] == hosts[g.rank] {
		return ""
	}
	addr := g.rv.Addr(peer)
	if h, _, err := net.SplitHostPort(addr); err == nil {
		addr = h
	}
	return fmt.Sprintf(": its process may be stopped or stuck, or the network between this machine and rank %d's (%s) drops their traffic; check that each machine still reaches the other (ping %s from here) and the links and firewalls between them", peer, addr, addr)
}

func (g *Ring) writeFrame(k wire.Kind, code uint8, seq uint64, payload []byte) error {
	return g.writeFrames(seq, frame{k, code, payload})
}

// frame is one frame to write: kind, code and payload.
type frame struct {
	kind    wire.Kind
	code    uint8
	payload []byte
}

// writeFrames writes up to two frames of operation seq in one write.
func (g *Ring) writeFrames(seq uint64, fs ...frame) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.midFrame {
		return net.ErrClosed
	}
	bufs := g.wbufs[:0]
	for i, f := range fs {
		hb := g.whb[i*wire.HeaderSize : (i+1)*wire.HeaderSize]
		wire.PutHeader(hb, wire.Header{Kind: f.kind, Code: f.code, Seq: seq, Length: uint32(len(f.payload))})
		bufs = append(bufs, hb, f.payload)
	}
	g.wnb = bufs
	defer clear(g.wbufs[:]) // hold no caller's buffer
	g.next.SetWriteDeadline(time.Now().Add(g.cfg.Timeout))
	// Re-check after arming the deadline: breakGroup and Close kick the
	// deadline only after setting their flags, so one of the two sees it.
	if g.closing.Load() || g.brokenCause() != nil {
		return net.ErrClosed
	}
	n, err := g.out(&g.wnb)
	if err != nil && (n > 0 || rawTCP(g.next) != nil) {
		// Part of the frame went out; or, over TLS, the write may have put
		// part of a record on the wire even when it reports none, and the
		// TLS connection refuses every later write anyway.
		g.midFrame = true
	}
	return err
}

// checkFrame handles a frame header from prev other than a wait frame:
// aborts and byes break the group, a frame of another operation is a
// mismatch.
func (g *Ring) checkFrame(h collective.Header, hdr wire.Header, prev int, fail func(cause) error, readErr func(string, error) error) (wire.Header, error) {
	switch hdr.Kind {
	case wire.KindAbort:
		pl := make([]byte, hdr.Length)
		if _, err := io.ReadFull(&g.rd, pl); err != nil {
			return hdr, readErr("abort", err)
		}
		a, err := wire.DecodeAbort(pl)
		if err != nil {
			return hdr, fail(cause{prev, fmt.Errorf("%w: rank %d sent a bad abort: %v", collective.ErrPeerLost, prev, err)})
		}
		return hdr, fail(cause{a.Blame, &remoteErr{sentinelOf(hdr.Code), fmt.Sprintf("%s (reported by rank %d)", a.Msg, a.From)}})
	case wire.KindBye:
		return hdr, fail(cause{prev, fmt.Errorf("%w: rank %d %w", collective.ErrPeerLost, prev, collective.ErrPeerClosed)})
	}
	if hdr.Seq != h.Seq {
		return hdr, fail(cause{prev, fmt.Errorf("%w: rank %d sent %s for operation #%d during #%d", collective.ErrMismatch, prev, hdr.Kind, hdr.Seq, h.Seq)})
	}
	return hdr, nil
}

// receiver reads the operation's frames from prev: its header, checked
// against this rank's, then p.recvs, calling landed with the index of each
// as it lands.
func (g *Ring) receiver(h collective.Header, algo uint8, data []byte, buf any, esz int, p plan, landed func(int) error) error {
	prev := g.prevRank()
	fail := func(c cause) error { return g.opErr(h, g.breakGroup(c)) }
	readErr := func(what string, err error) error {
		if c := g.brokenCause(); c != nil {
			return g.opErr(h, *c)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fail(cause{prev, fmt.Errorf("%w: rank %d sent nothing for %v (waiting for %s)%s", collective.ErrTimeout, prev, g.cfg.Timeout, what, g.silenceHint(prev))})
		}
		if c := g.awaitAbort(); c != nil {
			return g.opErr(h, *c)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fail(cause{prev, fmt.Errorf("%w: rank %d closed the connection (waiting for %s)", collective.ErrPeerLost, prev, what)})
		}
		return fail(cause{prev, fmt.Errorf("%w: reading %s from rank %d: %v", collective.ErrPeerLost, what, prev, err)})
	}
	// next reads a frame header from prev and handles everything but data:
	// wait frames (prev is alive and blocked on its own predecessor) re-arm
	// the deadline and are skipped.
	next := func(what string) (wire.Header, error) {
		g.rd.arm()
		if c := g.brokenCause(); c != nil {
			return wire.Header{}, g.opErr(h, *c)
		}
		for {
			if _, err := io.ReadFull(&g.rd, g.hb); err != nil {
				return wire.Header{}, readErr(what, err)
			}
			// The header came: prev is alive, and its payload (or next
			// frame) gets a whole timeout. (Under the deadline set before
			// the header, a frame that straddled it failed even with its
			// payload already received: Go checks the deadline before
			// reading buffered bytes.) Re-check after arming, as above, so a
			// kick from breakGroup is never lost.
			g.rd.arm()
			if c := g.brokenCause(); c != nil {
				return wire.Header{}, g.opErr(h, *c)
			}
			hdr, err := wire.DecodeHeader(g.hb)
			if err != nil {
				return hdr, fail(cause{prev, fmt.Errorf("%w: rank %d: %v", collective.ErrPeerLost, prev, err)})
			}
			if hdr.Kind == wire.KindWait && hdr.Seq <= h.Seq {
				// prev is in this operation or still finishing the one
				// before (it has sent us all of that one).
				if hdr.Length != 0 {
					return hdr, fail(cause{prev, fmt.Errorf("%w: rank %d sent a wait frame with %d payload bytes", collective.ErrPeerLost, prev, hdr.Length)})
				}
				continue
			}
			return g.checkFrame(h, hdr, prev, fail, readErr)
		}
	}

	hdr, err := next("operation header")
	if err != nil {
		return err
	}
	if hdr.Kind != wire.KindOp {
		return fail(cause{prev, fmt.Errorf("%w: rank %d sent %s before the operation header", collective.ErrPeerLost, prev, hdr.Kind)})
	}
	pl := g.rohb[:0]
	if int(hdr.Length) <= len(g.rohb) {
		pl = g.rohb[:hdr.Length]
	} else {
		pl = make([]byte, hdr.Length) // DecodeOpHeader says what is wrong with it
	}
	if _, err := io.ReadFull(&g.rd, pl); err != nil {
		return readErr("operation header", err)
	}
	oh, err := wire.DecodeOpHeader(pl)
	if err != nil {
		return fail(cause{prev, fmt.Errorf("%w: rank %d: %v", collective.ErrPeerLost, prev, err)})
	}
	theirs := collective.Header{Kind: collective.Kind(oh.Kind), DType: collective.DType(oh.DType), Op: collective.Op(oh.Op), Root: oh.Root, Len: int(oh.Length), Seq: hdr.Seq}
	if err := h.Mismatch(g.rank, prev, theirs); err != nil {
		return fail(cause{prev, err})
	}
	if hdr.Code != algo {
		return fail(cause{prev, fmt.Errorf("%w: rank %d runs %s by %s, rank %d by %s: give every rank the same tcp.Config.SmallBytes",
			collective.ErrMismatch, prev, h, algoName(hdr.Code), g.rank, algoName(algo))})
	}

	for i, s := range p.recvs {
		hdr, err := next("data")
		if err != nil {
			return err
		}
		want := (s.hi - s.lo) * esz
		if hdr.Kind != wire.KindData || int(hdr.Length) != want {
			return fail(cause{prev, fmt.Errorf("%w: rank %d sent %s of %d bytes, want data of %d", collective.ErrMismatch, prev, hdr.Kind, hdr.Length, want)})
		}
		if !s.reduce {
			if _, err := io.ReadFull(&g.rd, data[s.lo*esz:s.hi*esz]); err != nil {
				return readErr("data", err)
			}
		} else if err := g.readReduce(buf, s, esz, h.Op, p.peerFirst); err != nil {
			return readErr("data", err)
		}
		if err := landed(i); err != nil {
			return err
		}
	}
	return nil
}

// readReduce reads span s's payload from prev into scratch and reduces it
// into buf read by read, as it lands: the reduction of a segment overlaps
// its arrival instead of following it. Element by element, the same
// operations in the same order as reducing it whole: the same bits.
func (g *Ring) readReduce(buf any, s span, esz int, op collective.Op, peerFirst bool) error {
	want := (s.hi - s.lo) * esz
	got, done := 0, 0 // bytes read, elements reduced
	for got < want {
		n, err := g.rd.Read(g.scratch[got:want])
		got += n
		if k := got / esz; k > done {
			switch b := buf.(type) {
			case []float32:
				reduceLanded(b[s.lo:s.hi], g.scratch, done, k, op, peerFirst, s.scale, g.size)
			case []float64:
				reduceLanded(b[s.lo:s.hi], g.scratch, done, k, op, peerFirst, s.scale, g.size)
			}
			done = k
		}
		if err != nil && got < want {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// reduceLanded reduces elements lo..hi of a span that have landed in
// scratch into dst, the span's place in the buffer, with the lower rank's
// values first; scale: divide them by n (Mean, once summed).
func reduceLanded[T collective.Float](dst []T, scratch []byte, lo, hi int, op collective.Op, peerFirst, scale bool, n int) {
	src := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(scratch))), len(dst))[lo:hi]
	d := dst[lo:hi]
	if peerFirst {
		collective.ReduceTo(d, src, d, op)
	} else {
		collective.ReduceInto(d, src, op)
	}
	if scale {
		collective.Scale(d, n)
	}
}

// waitReader reads the ring's frames from prev for the receiver, under a
// deadline of Config.Timeout from each arm. For an operation that runs on
// the caller's goroutine with three or more ranks (runInline with waits
// set), it also does what the sender goroutine does in the ring: while a
// read waits, it sends next a wait frame every quarter timeout (this rank
// is alive and blocked on its predecessor; see the package doc, Faults).
// The connection's deadline then comes at the next wait frame due (or the
// whole timeout, if sooner): one that passes before the whole timeout sends
// the frame and reads on. The frames' pace is their own, not re-armed by
// what arrives: a predecessor that sends only wait frames, a little more
// often than every quarter timeout, would otherwise keep this rank's
// deadline from ever passing, and its silence would get it blamed by next
// for a rank stopped further back.
type waitReader struct {
	g     *Ring
	waits bool
	seq   uint64    // the operation the wait frames name
	until time.Time // the whole timeout, from the last arm
	due   time.Time // when the next wait frame is to go (zero: not yet set)
	quiet bool      // a wait frame failed: send no more (next fails the data anyway)
}

// tick is how often a waiting rank tells next it is alive.
func (w *waitReader) tick() time.Duration { return max(w.g.cfg.Timeout/4, time.Millisecond) }

// start readies w for operation seq; waits: send wait frames.
func (w *waitReader) start(seq uint64, waits bool) {
	w.seq, w.waits, w.quiet, w.due = seq, waits, false, time.Time{}
}

// arm starts a new whole timeout for what is read next. It leaves the
// wait frames' pace alone: a frame from prev says prev is alive, not that
// next has heard from us.
func (w *waitReader) arm() {
	now := time.Now()
	w.until = now.Add(w.g.cfg.Timeout)
	if w.waits {
		if w.due.IsZero() {
			w.due = now.Add(w.tick())
		}
		w.g.prev.SetReadDeadline(w.deadline())
		return
	}
	w.g.prev.SetReadDeadline(w.until)
}

// deadline is when a read of a rank that sends wait frames stops: the next
// frame due, or the whole timeout if sooner.
func (w *waitReader) deadline() time.Time {
	if w.due.Before(w.until) {
		return w.due
	}
	return w.until
}

func (w *waitReader) Read(p []byte) (int, error) {
	for {
		n, err := w.g.in.Read(p)
		if err == nil || !w.waits || !errors.Is(err, os.ErrDeadlineExceeded) || w.g.brokenCause() != nil {
			return n, err
		}
		now := time.Now()
		if !now.Before(w.until) {
			return n, err // the whole timeout: prev sent nothing, not even wait frames
		}
		if !now.Before(w.due) {
			if !w.quiet && !w.g.nextClosed.Load() {
				// Advice, never a reason to fail (see sender).
				w.quiet = w.g.writeFrame(wire.KindWait, 0, w.seq, nil) != nil
			}
			w.due = now.Add(w.tick())
		}
		w.g.prev.SetReadDeadline(w.deadline())
		// Re-check after arming: breakGroup kicks the deadline only after
		// recording the cause, so one of the two is seen.
		if w.g.brokenCause() != nil {
			return n, err
		}
		if n > 0 {
			return n, nil
		}
	}
}
