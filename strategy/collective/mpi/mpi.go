//go:build mpi

package mpi

/*
#cgo pkg-config: ompi-c
#include <mpi.h>
#include <stdint.h>

static MPI_Datatype fl_f32(void) { return MPI_FLOAT; }
static MPI_Datatype fl_f64(void) { return MPI_DOUBLE; }
static MPI_Datatype fl_i64(void) { return MPI_INT64_T; }
static MPI_Op fl_op(int op) {
	switch (op) {
	case 2: return MPI_MAX;
	case 3: return MPI_MIN;
	default: return MPI_SUM;
	}
}
static MPI_Comm fl_world(void) { return MPI_COMM_WORLD; }
static MPI_Comm fl_null(void) { return MPI_COMM_NULL; }
static int fl_undefined(void) { return MPI_UNDEFINED; }
static void *fl_in_place(void) { return MPI_IN_PLACE; }

// fl_init asks for MPI_THREAD_MULTIPLE: the groups of a split (sub-groups)
// run their operations at the same time, from their own goroutines.
static int fl_init(int *provided) {
	int done = 0;
	MPI_Initialized(&done);
	if (done) return MPI_Query_thread(provided);
	int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}
static int fl_thread_multiple(void) { return MPI_THREAD_MULTIPLE; }

// The calls of a plain MPI program, for BenchmarkAllReduceCost.
static int fl_world_allreduce(float *b, int n) { return MPI_Allreduce(MPI_IN_PLACE, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }
static int fl_world_allgather4(int64_t *mine, int64_t *all) { return MPI_Allgather(mine, 4, MPI_INT64_T, all, 4, MPI_INT64_T, MPI_COMM_WORLD); }
static int fl_world_barrier(void) { return MPI_Barrier(MPI_COMM_WORLD); }

static int fl_errstr(int rc, char *buf, int n) {
	int len = 0;
	if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return 0;
	return len;
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// ErrUnavailable is returned when MPI cannot start.
var ErrUnavailable = errors.New("mpi: unavailable")

var (
	initOnce sync.Once
	initErr  error
	// threadMultiple: MPI lets several threads call it at once, which
	// sub-groups (Split) need.
	threadMultiple bool
)

func initMPI() error {
	initOnce.Do(func() {
		var provided C.int
		rc := C.fl_init(&provided)
		threadMultiple = provided >= C.fl_thread_multiple()
		if rc != C.MPI_SUCCESS {
			initErr = fmt.Errorf("%w: MPI_Init_thread: %s", ErrUnavailable, errString(rc))
		}
	})
	return initErr
}

func errString(rc C.int) string {
	var buf [C.MPI_MAX_ERROR_STRING]C.char
	n := C.fl_errstr(rc, &buf[0], C.int(len(buf)))
	return C.GoStringN(&buf[0], n)
}

// Finalize shuts MPI down; call it once, when no group is in use.
func Finalize() error {
	if initErr != nil {
		return nil
	}
	if n := stuck.Load(); n > 0 {
		return fmt.Errorf("mpi: Finalize: %d collective call(s) timed out or were cancelled and are still blocked in MPI; exit without finalizing", n)
	}
	var done C.int
	C.MPI_Finalized(&done)
	if done != 0 {
		return nil
	}
	if rc := C.MPI_Finalize(); rc != C.MPI_SUCCESS {
		return fmt.Errorf("mpi: MPI_Finalize: %s", errString(rc))
	}
	return nil
}

// Timeout bounds every operation (a silent rank); it may be changed before
// groups are made.
var Timeout = collective.DefaultTimeout

// Group is one rank's handle on an MPI communicator.
type Group struct {
	comm       C.MPI_Comm
	rank, size int
	seq        uint64
	broken     error
	closed     bool
}

var _ collective.Collective = (*Group)(nil)

// New returns a group of every process of the job (a duplicate of
// MPI_COMM_WORLD), wrapped with collective.WithAsync.
func New() (collective.Group, error) {
	if err := initMPI(); err != nil {
		return nil, err
	}
	var comm C.MPI_Comm
	if rc := C.MPI_Comm_dup(C.fl_world(), &comm); rc != C.MPI_SUCCESS {
		return nil, fmt.Errorf("mpi: MPI_Comm_dup: %s", errString(rc))
	}
	return wrap(comm)
}

// Split returns a group of the first n world ranks; every world rank must
// call it, and ranks >= n get nil and no error.
func Split(n int) (collective.Group, error) {
	if err := initMPI(); err != nil {
		return nil, err
	}
	var wr, ws C.int
	C.MPI_Comm_rank(C.fl_world(), &wr)
	C.MPI_Comm_size(C.fl_world(), &ws)
	if n < 1 || n > int(ws) {
		return nil, fmt.Errorf("mpi: Split(%d): the job has %d ranks", n, ws)
	}
	color := C.int(0)
	if int(wr) >= n {
		color = C.fl_undefined()
	}
	var comm C.MPI_Comm
	if rc := C.MPI_Comm_split(C.fl_world(), color, wr, &comm); rc != C.MPI_SUCCESS {
		return nil, fmt.Errorf("mpi: MPI_Comm_split: %s", errString(rc))
	}
	if int(wr) >= n {
		return nil, nil
	}
	return wrap(comm)
}

func wrap(comm C.MPI_Comm) (collective.Group, error) {
	return collective.WithAsync(newGroup(comm)), nil
}

func newGroup(comm C.MPI_Comm) *Group {
	C.MPI_Comm_set_errhandler(comm, C.MPI_ERRORS_RETURN)
	var r, s C.int
	C.MPI_Comm_rank(comm, &r)
	C.MPI_Comm_size(comm, &s)
	return &Group{comm: comm, rank: int(r), size: int(s)}
}

func (g *Group) Rank() int { return g.rank }
func (g *Group) Size() int { return g.size }

// Close frees the communicator.
func (g *Group) Close() error {
	if g.closed {
		return nil
	}
	g.closed = true
	if g.broken != nil {
		return nil // a communicator with a pending collective cannot be freed safely
	}
	if rc := C.MPI_Comm_free(&g.comm); rc != C.MPI_SUCCESS {
		return fmt.Errorf("mpi: MPI_Comm_free: %s", errString(rc))
	}
	return nil
}

func (g *Group) AllReduce(ctx context.Context, buf any, op collective.Op) error {
	return g.do(ctx, collective.KindAllReduce, buf, nil, op, 0)
}
func (g *Group) Broadcast(ctx context.Context, buf any, root int) error {
	return g.do(ctx, collective.KindBroadcast, buf, nil, 0, root)
}
func (g *Group) AllGather(ctx context.Context, send, recv any) error {
	return g.do(ctx, collective.KindAllGather, send, recv, 0, 0)
}
func (g *Group) ReduceScatter(ctx context.Context, send, recv any, op collective.Op) error {
	return g.do(ctx, collective.KindReduceScatter, send, recv, op, 0)
}
func (g *Group) Barrier(ctx context.Context) error {
	return g.do(ctx, collective.KindBarrier, nil, nil, 0, 0)
}

func (g *Group) fail(h collective.Header, peer int, err error) error {
	return &collective.Error{Backend: "mpi", Self: g.rank, Kind: h.Kind, Seq: h.Seq, Peer: peer, Err: err}
}

// ptr returns the address of a buffer's first element (a dummy for empty
// buffers, which MPI never reads).
func ptr(buf any) unsafe.Pointer {
	b := collective.Bytes(buf)
	if len(b) == 0 {
		return unsafe.Pointer(&dummy)
	}
	return unsafe.Pointer(&b[0])
}

var dummy [8]byte

func dtype(d collective.DType) C.MPI_Datatype {
	if d == collective.Float64 {
		return C.fl_f64()
	}
	return C.fl_f32()
}

func (g *Group) do(ctx context.Context, kind collective.Kind, send, recv any, op collective.Op, root int) error {
	h, err := collective.Prepare(kind, g.rank, g.size, send, recv, op, root)
	h.Seq = g.seq + 1
	if err != nil {
		return g.fail(h, -1, err)
	}
	if h.Len > 1<<31-1 {
		return g.fail(h, -1, fmt.Errorf("%w: %d elements exceed MPI's int count: split the buffer", collective.ErrBadBuffer, h.Len))
	}
	g.seq++
	if g.closed {
		return g.fail(h, -1, collective.ErrClosed)
	}
	if g.broken != nil {
		return g.fail(h, -1, g.broken)
	}
	mine := [4]int64{int64(h.Kind) | int64(h.DType)<<8 | int64(h.Op)<<16, int64(h.Root), int64(h.Len), int64(h.Seq)}
	all := make([]int64, 4*g.size)
	res := make(chan outcome, 1)
	// One goroutine makes both calls: the header exchange, so that every
	// rank sees every rank's view of the operation, then the data.
	go func() {
		if rc := C.MPI_Allgather(unsafe.Pointer(&mine[0]), 4, C.fl_i64(), unsafe.Pointer(&all[0]), 4, C.fl_i64(), g.comm); rc != C.MPI_SUCCESS {
			res <- outcome{call: "MPI_Allgather", rc: rc}
			return
		}
		for q := 0; q < g.size; q++ {
			a := all[4*q:]
			theirs := collective.Header{Kind: collective.Kind(a[0] & 0xff), DType: collective.DType(a[0] >> 8 & 0xff), Op: collective.Op(a[0] >> 16 & 0xff), Root: int(a[1]), Len: int(a[2]), Seq: uint64(a[3])}
			if err := h.Mismatch(g.rank, q, theirs); err != nil {
				res <- outcome{peer: q, mismatch: err}
				return
			}
		}
		call, rc := g.data(h, send, recv)
		res <- outcome{call: call, rc: rc}
	}()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	select {
	case o := <-res:
		if o.mismatch != nil {
			return g.fail(h, o.peer, o.mismatch)
		}
		if o.rc != C.MPI_SUCCESS {
			g.broken = fmt.Errorf("%w: %s: %s", collective.ErrPeerLost, o.call, errString(o.rc))
			return g.fail(h, -1, g.broken)
		}
	case <-ctx.Done():
		stuck.Add(1)
		g.broken = fmt.Errorf("%w: abandoned by this rank: %v", collective.ErrClosed, ctx.Err())
		return g.fail(h, -1, ctx.Err())
	case <-timer.C:
		stuck.Add(1)
		g.broken = fmt.Errorf("%w: a rank did not take part within %v (MPI cannot say which)", collective.ErrTimeout, Timeout)
		return g.fail(h, -1, g.broken)
	}
	if op == collective.Mean {
		switch kind {
		case collective.KindAllReduce:
			collective.ScaleAny(send, g.size)
		case collective.KindReduceScatter:
			collective.ScaleAny(recv, g.size)
		}
	}
	return nil
}

// outcome is how an operation's MPI calls ended: a mismatched header (peer,
// mismatch), or the return code of the call that failed or the last one.
type outcome struct {
	call     string
	rc       C.int
	peer     int
	mismatch error
}

// stuck counts operations abandoned inside MPI (timed out or cancelled):
// Finalize must not run under them.
var stuck atomic.Int64

// data makes h's blocking MPI call and returns its name and return code.
// Blocking calls take Open MPI's tuned algorithms and progress without
// polling: the non-blocking collectives this backend polled before (libnbc)
// advance only inside MPI_Test, and polling them with sleeps made a 4 MB
// all-reduce over 2 ranks 10x slower than plain mpirun. do runs it on its
// own goroutine; MPI cannot cancel a collective, so one that does not
// finish in time is abandoned where it blocks: the group is broken, and the
// buffers it was given may still be written by MPI afterwards.
func (g *Group) data(h collective.Header, send, recv any) (string, C.int) {
	n := C.int(h.Len)
	switch h.Kind {
	case collective.KindBarrier:
		return "MPI_Barrier", C.MPI_Barrier(g.comm)
	case collective.KindAllReduce:
		return "MPI_Allreduce", C.MPI_Allreduce(C.fl_in_place(), ptr(send), n, dtype(h.DType), C.fl_op(C.int(h.Op)), g.comm)
	case collective.KindBroadcast:
		return "MPI_Bcast", C.MPI_Bcast(ptr(send), n, dtype(h.DType), C.int(h.Root), g.comm)
	case collective.KindAllGather:
		counts, displs := layout(h.Len, g.size)
		return "MPI_Allgatherv", C.MPI_Allgatherv(ptr(send), counts[g.rank], dtype(h.DType), ptr(recv), &counts[0], &displs[0], dtype(h.DType), g.comm)
	case collective.KindReduceScatter:
		counts, _ := layout(h.Len, g.size)
		return "MPI_Reduce_scatter", C.MPI_Reduce_scatter(ptr(send), ptr(recv), &counts[0], dtype(h.DType), C.fl_op(C.int(h.Op)), g.comm)
	}
	return "", C.MPI_SUCCESS
}

func layout(total, size int) (counts, displs []C.int) {
	counts, displs = make([]C.int, size), make([]C.int, size)
	for r := range counts {
		counts[r] = C.int(collective.BlockLen(total, size, r))
		displs[r] = C.int(collective.Offset(total, size, r))
	}
	return counts, displs
}

// worldAllReduce, worldHeader and worldBarrier make the calls of a plain
// MPI program on MPI_COMM_WORLD from the calling goroutine, with none of
// this backend's header exchange or goroutine: BenchmarkAllReduceCost sets
// the backend's all-reduce against them. (Test files cannot use cgo.)
func worldAllReduce(buf []float32) error {
	if rc := C.fl_world_allreduce((*C.float)(unsafe.Pointer(&buf[0])), C.int(len(buf))); rc != C.MPI_SUCCESS {
		return fmt.Errorf("mpi: MPI_Allreduce: %s", errString(rc))
	}
	return nil
}

func worldHeader(mine *[4]int64, all []int64) error {
	if rc := C.fl_world_allgather4((*C.int64_t)(unsafe.Pointer(&mine[0])), (*C.int64_t)(unsafe.Pointer(&all[0]))); rc != C.MPI_SUCCESS {
		return fmt.Errorf("mpi: MPI_Allgather: %s", errString(rc))
	}
	return nil
}

func worldBarrier() error {
	if rc := C.fl_world_barrier(); rc != C.MPI_SUCCESS {
		return fmt.Errorf("mpi: MPI_Barrier: %s", errString(rc))
	}
	return nil
}
