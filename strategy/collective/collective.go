package collective

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultTimeout is how long a backend waits for a silent peer before it
// reports the peer as lost, when its Config leaves Timeout at zero.
const DefaultTimeout = 3 * time.Minute

// Op is how AllReduce and ReduceScatter combine values.
type Op int

// Reduction operations. Mean is Sum divided by the group size.
const (
	Sum Op = iota
	Mean
	Max
	Min
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Mean:
		return "mean"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Valid reports whether o is one of Sum, Mean, Max, Min.
func (o Op) Valid() bool { return o >= Sum && o <= Min }

// Collective is one rank's handle on a group of ranks. All methods block until
// the operation is complete on this rank (or fails); buffers are used in place.
// See the package documentation for lengths, layout and errors.
type Collective interface {
	Rank() int
	Size() int
	// AllReduce combines buf across ranks with op; every rank ends with the result.
	AllReduce(ctx context.Context, buf any, op Op) error
	// Broadcast copies root's buf into every rank's buf.
	Broadcast(ctx context.Context, buf any, root int) error
	// AllGather concatenates every rank's send into recv, in rank order;
	// len(send) == Counts(len(recv), Size())[Rank()].
	AllGather(ctx context.Context, send any, recv any) error
	// ReduceScatter combines send across ranks and leaves block Rank() of the
	// result in recv; len(recv) == Counts(len(send), Size())[Rank()].
	ReduceScatter(ctx context.Context, send any, recv any, op Op) error
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) error
	// Close releases the rank's resources; peers see it as lost.
	Close() error
}

// Async starts an operation and returns at once, so the next gradient bucket
// can fill while this one is reduced (or a sharded strategy gathers the next
// block's parameters while this one computes). Operations run in submission
// order; buffers belong to the operation until its Handle's Wait returns.
type Async interface {
	AllReduceAsync(ctx context.Context, buf any, op Op) Handle
	AllGatherAsync(ctx context.Context, send, recv any) Handle
	ReduceScatterAsync(ctx context.Context, send, recv any, op Op) Handle
}

// Handle is an operation in flight.
type Handle interface {
	// Wait blocks until the operation is done and returns its error. It may be
	// called more than once and from several goroutines.
	Wait() error
}

// Sentinel errors, matched with errors.Is.
var (
	// ErrPeerLost: a peer died, closed or disconnected.
	ErrPeerLost = errors.New("peer lost")
	// ErrPeerClosed comes with ErrPeerLost when the peer closed its group
	// in order (Close) rather than died: it had finished the operations it
	// ran (a strategy's final barrier reads it as the peer being done).
	ErrPeerClosed = errors.New("closed its group")
	// ErrTimeout: a peer sent nothing for the backend's timeout.
	ErrTimeout = errors.New("peer timed out")
	// ErrMismatch: ranks called different operations, dtypes or lengths.
	ErrMismatch = errors.New("ranks disagree on the operation")
	// ErrClosed: this rank's group was closed or broken by an earlier error.
	ErrClosed = errors.New("group closed")
	// ErrBadBuffer: a buffer of the wrong type or length was passed.
	ErrBadBuffer = errors.New("bad buffer")
)

// Error is what backends return for a failed operation.
type Error struct {
	Backend string // "tcp", "inproc", ...
	Self    int    // rank reporting the error
	Kind    Kind   // operation that failed
	Seq     uint64 // the group's operation counter (1 = first operation)
	Peer    int    // the peer at fault, or -1 when none is known
	Err     error  // cause; wraps one of the sentinels above
	// Group, for an error of a sub-group (Splitter), lists the global ranks
	// of its members; Self and Peer are then global ranks too. nil for a
	// group built directly.
	Group []int
}

func (e *Error) Error() string {
	s := fmt.Sprintf("collective/%s: rank %d: %s #%d", e.Backend, e.Self, e.Kind, e.Seq)
	if e.Group != nil {
		s = fmt.Sprintf("collective/%s: rank %d of sub-group %s: %s #%d", e.Backend, e.Self, rankList(e.Group), e.Kind, e.Seq)
	}
	if e.Peer >= 0 {
		s += fmt.Sprintf(": rank %d", e.Peer)
	}
	s += ": " + e.Err.Error()
	if len(e.Group) > 0 {
		// The cause comes from the sub-group's backend, which numbers its
		// ranks from 0.
		s += fmt.Sprintf(" (the sub-group's ranks 0..%d are global ranks %s)", len(e.Group)-1, rankList(e.Group))
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// PeerOf returns the rank an error blames, if any.
func PeerOf(err error) (int, bool) {
	var e *Error
	if errors.As(err, &e) && e.Peer >= 0 {
		return e.Peer, true
	}
	return -1, false
}

// Kind names a collective operation on the wire and in errors.
type Kind uint8

// Operation kinds.
const (
	KindAllReduce Kind = iota + 1
	KindBroadcast
	KindAllGather
	KindReduceScatter
	KindBarrier
)

func (k Kind) String() string {
	switch k {
	case KindAllReduce:
		return "allreduce"
	case KindBroadcast:
		return "broadcast"
	case KindAllGather:
		return "allgather"
	case KindReduceScatter:
		return "reducescatter"
	case KindBarrier:
		return "barrier"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// DType is the element type of a buffer.
type DType uint8

// Element types.
const (
	Float32 DType = iota + 1
	Float64
)

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size is the element size in bytes.
func (d DType) Size() int {
	if d == Float64 {
		return 8
	}
	return 4
}

// Header describes one operation as a rank sees it. Backends compare headers
// across ranks before moving data.
type Header struct {
	Kind  Kind
	DType DType
	Op    Op
	Root  int    // Broadcast root, else 0
	Len   int    // total elements (AllReduce/Broadcast buf, ReduceScatter send, AllGather recv)
	Seq   uint64 // operation counter
}

// Mismatch returns nil when h and other describe the same operation, else an
// error wrapping ErrMismatch that names both ranks' views.
func (h Header) Mismatch(self, peer int, other Header) error {
	if h == other {
		return nil
	}
	err := fmt.Errorf("%w: rank %d called %s, rank %d called %s", ErrMismatch, self, h, peer, other)
	if (h.Kind == KindBarrier) != (other.Kind == KindBarrier) {
		waiting, busy := peer, self
		if h.Kind == KindBarrier {
			waiting, busy = self, peer
		}
		err = fmt.Errorf("%w (rank %d is in a barrier, such as the last one of a job: it may have skipped an operation that rank %d made; every rank must make the same calls in the same order)", err, waiting, busy)
	}
	return err
}

func (h Header) String() string {
	if h.Kind == KindBarrier {
		return fmt.Sprintf("%s #%d", h.Kind, h.Seq) // no elements
	}
	s := fmt.Sprintf("%s #%d of %d %s", h.Kind, h.Seq, h.Len, h.DType)
	switch h.Kind {
	case KindAllReduce, KindReduceScatter:
		s += " (" + h.Op.String() + ")"
	case KindBroadcast:
		s += fmt.Sprintf(" (root %d)", h.Root)
	}
	return s
}

// Counts splits n elements into size blocks: the first n%size blocks get one
// more element than the rest.
func Counts(n, size int) []int {
	c := make([]int, size)
	for r := range c {
		c[r] = BlockLen(n, size, r)
	}
	return c
}

// BlockLen is Counts(n, size)[r] without allocating.
func BlockLen(n, size, r int) int {
	b := n / size
	if r < n%size {
		b++
	}
	return b
}

// Offset is where block r of Counts(n, size) starts.
func Offset(n, size, r int) int {
	b, rem := n/size, n%size
	return r*b + min(r, rem)
}

// Describe checks buf and returns its dtype and length. Errors wrap ErrBadBuffer.
func Describe(buf any) (DType, int, error) {
	switch b := buf.(type) {
	case []float32:
		return Float32, len(b), nil
	case []float64:
		return Float64, len(b), nil
	case nil:
		return 0, 0, fmt.Errorf("%w: buffer is nil: pass a []float32 or []float64", ErrBadBuffer)
	}
	return 0, 0, fmt.Errorf("%w: buffer is %T: pass a []float32 or []float64", ErrBadBuffer, buf)
}

// Prepare validates the arguments of one operation on a rank of a group of
// size ranks and returns its header (Seq left zero). send and recv follow the
// interface: for AllReduce and Broadcast pass the buffer as send and nil recv;
// for Barrier both nil.
func Prepare(kind Kind, rank, size int, send, recv any, op Op, root int) (Header, error) {
	h := Header{Kind: kind}
	if kind == KindBarrier {
		return h, nil
	}
	dt, n, err := Describe(send)
	if err != nil {
		return h, fmt.Errorf("%s: %w", kind, err)
	}
	h.DType, h.Len = dt, n
	switch kind {
	case KindAllReduce, KindReduceScatter:
		if !op.Valid() {
			return h, fmt.Errorf("%s: %w: op %d is not Sum, Mean, Max or Min", kind, ErrBadBuffer, int(op))
		}
		h.Op = op
	case KindBroadcast:
		if root < 0 || root >= size {
			return h, fmt.Errorf("broadcast: %w: root %d is outside the group of %d ranks: use 0..%d", ErrBadBuffer, root, size, size-1)
		}
		h.Root = root
	}
	if kind != KindAllGather && kind != KindReduceScatter {
		return h, nil
	}
	rdt, rn, err := Describe(recv)
	if err != nil {
		return h, fmt.Errorf("%s: recv: %w", kind, err)
	}
	if rdt != dt {
		return h, fmt.Errorf("%s: %w: send is %s but recv is %s: use one dtype", kind, ErrBadBuffer, dt, rdt)
	}
	if kind == KindReduceScatter {
		if want := BlockLen(n, size, rank); rn != want {
			return h, fmt.Errorf("reducescatter: %w: recv has %d elements, rank %d's block of %d over %d ranks has %d (see collective.Counts)", ErrBadBuffer, rn, rank, n, size, want)
		}
		return h, nil
	}
	h.Len = rn
	if want := BlockLen(rn, size, rank); n != want {
		return h, fmt.Errorf("allgather: %w: send has %d elements, rank %d's block of recv (%d over %d ranks) has %d (see collective.Counts)", ErrBadBuffer, n, rank, rn, size, want)
	}
	return h, nil
}

// FinalBarrier is a job's last barrier before its ranks close their
// groups, so that no rank closes what a peer still reads. A peer that has
// closed its group in order (ErrPeerClosed) has left the job: it closes
// only after its own final barrier, or after an error that it reports
// itself (which fails the job there), so this rank has nothing left to
// wait for, and that is no error here. A peer that died or timed out is.
func FinalBarrier(ctx context.Context, c Collective) error {
	if err := c.Barrier(ctx); err != nil && !errors.Is(err, ErrPeerClosed) {
		return err
	}
	return nil
}
