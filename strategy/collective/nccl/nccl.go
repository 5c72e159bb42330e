//go:build linux

package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
)

// ErrUnavailable means NCCL or the CUDA runtime could not be loaded.
var ErrUnavailable = errors.New("nccl: unavailable")

type uniqueID struct{ internal [128]byte }

// NCCL enums.
const (
	ncclInt64   = 4
	ncclFloat32 = 7
	ncclFloat64 = 8
	ncclSum     = 0
	ncclMax     = 2
	ncclMin     = 3

	cudaMemcpyHostToDevice = 1
	cudaMemcpyDeviceToHost = 2
	cudaErrorNotReady      = 600
)

// Lib is the loaded NCCL and CUDA runtime entry points.
type Lib struct {
	getUniqueID     func(*uniqueID) int32
	commInitRank    func(*uintptr, int32, uniqueID, int32) int32
	commDestroy     func(uintptr) int32
	commAbort       func(uintptr) int32
	commGetAsyncErr func(uintptr, *int32) int32
	getErrorString  func(int32) string
	allReduce       func(send, recv, count uintptr, dt, op int32, comm, stream uintptr) int32
	broadcast       func(send, recv, count uintptr, dt, root int32, comm, stream uintptr) int32
	allGather       func(send, recv, count uintptr, dt int32, comm, stream uintptr) int32
	reduceScatter   func(send, recv, count uintptr, dt, op int32, comm, stream uintptr) int32
	setDevice       func(int32) int32
	getDeviceCount  func(*int32) int32 // optional
	streamCreate    func(*uintptr) int32
	streamDestroy   func(uintptr) int32
	streamQuery     func(uintptr) int32
	malloc          func(*uintptr, uintptr) int32
	free            func(uintptr) int32
	memcpy          func(dst, src, n uintptr, kind int32) int32
	cudaErrorString func(int32) string
}

func dlopen(name string, fallbacks ...string) (uintptr, string, error) {
	var errs []string
	for _, n := range append([]string{name}, fallbacks...) {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, n, nil
		}
		errs = append(errs, err.Error())
	}
	return 0, "", errors.New(strings.Join(errs, "; "))
}

// Load opens the libraries named by cfg and resolves every symbol.
func Load(cfg Config) (*Lib, error) {
	var cudaNames []string
	if cfg.CUDARTPath == "" {
		cfg.CUDARTPath, cudaNames = "libcudart.so", []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}
	}
	ncclName := cfg.NCCLPath
	if ncclName == "" {
		ncclName = "libnccl.so.2"
	}
	cuda, _, err := dlopen(cfg.CUDARTPath, cudaNames...)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot load the CUDA runtime (%s): install CUDA or set Config.CUDARTPath: %v", ErrUnavailable, cfg.CUDARTPath, err)
	}
	nc, _, err := dlopen(ncclName)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot load %s: install NCCL (libnccl2) or set Config.NCCLPath: %v", ErrUnavailable, ncclName, err)
	}
	l := &Lib{}
	var missing []string
	reg := func(h uintptr, fptr any, name string) {
		sym, err := purego.Dlsym(h, name)
		if err != nil {
			missing = append(missing, name)
			return
		}
		purego.RegisterFunc(fptr, sym)
	}
	reg(nc, &l.getUniqueID, "ncclGetUniqueId")
	reg(nc, &l.commInitRank, "ncclCommInitRank")
	reg(nc, &l.commDestroy, "ncclCommDestroy")
	reg(nc, &l.commAbort, "ncclCommAbort")
	reg(nc, &l.commGetAsyncErr, "ncclCommGetAsyncError")
	reg(nc, &l.getErrorString, "ncclGetErrorString")
	reg(nc, &l.allReduce, "ncclAllReduce")
	reg(nc, &l.broadcast, "ncclBroadcast")
	reg(nc, &l.allGather, "ncclAllGather")
	reg(nc, &l.reduceScatter, "ncclReduceScatter")
	reg(cuda, &l.setDevice, "cudaSetDevice")
	reg(cuda, &l.streamCreate, "cudaStreamCreate")
	reg(cuda, &l.streamDestroy, "cudaStreamDestroy")
	reg(cuda, &l.streamQuery, "cudaStreamQuery")
	reg(cuda, &l.malloc, "cudaMalloc")
	reg(cuda, &l.free, "cudaFree")
	reg(cuda, &l.memcpy, "cudaMemcpy")
	reg(cuda, &l.cudaErrorString, "cudaGetErrorString")
	if sym, err := purego.Dlsym(cuda, "cudaGetDeviceCount"); err == nil {
		purego.RegisterFunc(&l.getDeviceCount, sym)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: the libraries lack %s (NCCL 2.x and CUDA 11+ needed)", ErrUnavailable, strings.Join(missing, ", "))
	}
	return l, nil
}

// Available reports nil when NCCL and the CUDA runtime load.
func Available(cfg Config) error {
	_, err := Load(cfg)
	return err
}

// Comm is one rank's NCCL communicator with its stream and staging buffers.
type Comm struct {
	lib        *Lib
	cfg        Config
	rv         *rendezvous.Rendezvous // the ranks' meeting, kept for Split
	rank, size int
	comm       uintptr
	stream     uintptr
	seq        uint64
	broken     error
	closed     bool

	mu    sync.Mutex
	bufs  [2]uintptr // device staging: send, recv
	caps  [2]uintptr
	dhdr  uintptr // device header buffers: own (4 int64) and all (4*size)
	dhdrs uintptr
	// Host header buffers live on the heap, held by the Comm: the library
	// gets their addresses as integers, and a buffer on a goroutine stack
	// could move (stack growth) between taking the address and the call.
	hmine []int64
	hall  []int64
}

var _ collective.Collective = (*Comm)(nil)

// New creates this rank's communicator: rank 0's unique id travels through
// rv. The result also implements collective.Async.
func New(ctx context.Context, rv *rendezvous.Rendezvous, cfg Config) (collective.Group, error) {
	c, err := NewComm(ctx, rv, cfg)
	if err != nil {
		return nil, err
	}
	return collective.WithAsync(c), nil
}

// NewComm is New without the async wrapper, for callers that use the Device
// methods.
func NewComm(ctx context.Context, rv *rendezvous.Rendezvous, cfg Config) (*Comm, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lib, err := Load(cfg)
	// CUDA's current device is per OS thread: keep this goroutine on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Every rank must learn whether every rank can run NCCL on its device,
	// or the others would wait in ncclCommInitRank for a rank that gave up
	// (a job with more local ranks than GPUs: cudaSetDevice fails on the
	// ranks beyond them).
	var id uniqueID
	var stream uintptr
	status := []byte{statusOK}
	switch {
	case err != nil:
		status = append([]byte{statusUnavailable}, "cannot load NCCL: "+err.Error()...)
	default:
		derr := useDevice(lib, cfg.Device, &stream)
		if derr == nil && rv.Rank() == 0 {
			if rc := lib.getUniqueID(&id); rc != 0 {
				derr = fmt.Errorf("ncclGetUniqueId: %s", lib.getErrorString(rc))
			}
		}
		if derr != nil {
			err = fmt.Errorf("nccl: rank %d: %w", rv.Rank(), derr)
			status = append([]byte{statusFailed}, derr.Error()...)
		}
	}
	if stream != 0 && err != nil {
		lib.streamDestroy(stream)
	}
	blob := status
	if rv.Rank() == 0 && err == nil {
		blob = append([]byte{statusOK}, id.internal[:]...)
	}
	all, xerr := rv.Exchange(ctx, blob)
	if xerr != nil {
		if err == nil {
			lib.streamDestroy(stream)
		}
		return nil, fmt.Errorf("nccl: exchange unique id: %w", xerr)
	}
	if err != nil {
		return nil, err // Load's error wraps ErrUnavailable
	}
	for r, b := range all {
		switch {
		case len(b) == 0:
			err = fmt.Errorf("nccl: rank %d sent no status", r)
		case b[0] == statusUnavailable:
			err = fmt.Errorf("nccl: %w: rank %d: %s", ErrUnavailable, r, b[1:])
		case b[0] != statusOK:
			err = fmt.Errorf("nccl: rank %d: %s", r, b[1:])
		}
		if err != nil {
			lib.streamDestroy(stream)
			return nil, err
		}
	}
	if len(all[0]) != 1+len(id.internal) {
		lib.streamDestroy(stream)
		return nil, fmt.Errorf("nccl: rank 0 sent a unique id of %d bytes, want %d", len(all[0])-1, len(id.internal))
	}
	copy(id.internal[:], all[0][1:])
	c := &Comm{lib: lib, cfg: cfg, rv: rv, rank: rv.Rank(), size: rv.Size(), stream: stream}
	comm, err := initRank(ctx, lib, cfg, c.size, id, c.rank)
	if err != nil {
		lib.streamDestroy(stream)
		return nil, err
	}
	c.comm = comm
	if rc := lib.malloc(&c.dhdr, 32); rc != 0 {
		c.free()
		return nil, fmt.Errorf("nccl: cudaMalloc: %s", lib.cudaErrorString(rc))
	}
	if rc := lib.malloc(&c.dhdrs, uintptr(32*c.size)); rc != 0 {
		c.free()
		return nil, fmt.Errorf("nccl: cudaMalloc: %s", lib.cudaErrorString(rc))
	}
	return c, nil
}

// A rank's status in NewComm's exchange.
const (
	statusOK          = 1
	statusUnavailable = 2 // the libraries cannot be loaded
	statusFailed      = 3 // the device or NCCL failed
)

// useDevice makes device current on this OS thread and creates the
// communicator's stream there.
func useDevice(lib *Lib, device int, stream *uintptr) error {
	if rc := lib.setDevice(int32(device)); rc != 0 {
		err := fmt.Errorf("cudaSetDevice(%d): %s", device, lib.cudaErrorString(rc))
		var n int32
		if lib.getDeviceCount != nil && lib.getDeviceCount(&n) == 0 {
			if n == 0 {
				err = fmt.Errorf("%w: this host shows no CUDA device (check the driver and CUDA_VISIBLE_DEVICES)", err)
			} else {
				err = fmt.Errorf("%w: this host shows %d CUDA device(s), 0 to %d: start at most %d rank(s) a node, or set CUDA_VISIBLE_DEVICES", err, n, n-1, n)
			}
		}
		return err
	}
	if rc := lib.streamCreate(stream); rc != 0 {
		return fmt.Errorf("cudaStreamCreate on device %d: %s", device, lib.cudaErrorString(rc))
	}
	return nil
}

// initRank runs ncclCommInitRank, which blocks until every rank has joined
// and cannot be interrupted, on a thread of its own (device current), and
// gives up when ctx ends (a launcher cancels it when a rank exits) or after
// cfg.Timeout: a rank that died after the exchange would otherwise leave
// the others waiting in NCCL for good. A communicator NCCL makes after that
// is aborted.
func initRank(ctx context.Context, lib *Lib, cfg Config, size int, id uniqueID, rank int) (uintptr, error) {
	type result struct {
		comm uintptr
		rc   int32
	}
	done := make(chan result, 1)
	var claimed atomic.Bool // by the goroutine when it finished first, else by the caller giving up
	go func() {
		runtime.LockOSThread() // left locked: the thread ends with the goroutine
		var r result
		if r.rc = lib.setDevice(int32(cfg.Device)); r.rc == 0 {
			r.rc = lib.commInitRank(&r.comm, int32(size), id, int32(rank))
		}
		if !claimed.CompareAndSwap(false, true) { // the caller gave up
			if r.rc == 0 {
				lib.commAbort(r.comm)
			}
			return
		}
		done <- r
	}()
	t := time.NewTimer(cfg.Timeout)
	defer t.Stop()
	var err error
	select {
	case r := <-done:
		if r.rc != 0 {
			return 0, fmt.Errorf("nccl: ncclCommInitRank(rank %d of %d): %s", rank, size, lib.getErrorString(r.rc))
		}
		return r.comm, nil
	case <-ctx.Done():
		err = fmt.Errorf("nccl: ncclCommInitRank(rank %d of %d) gave up waiting for the other ranks: %w", rank, size, ctx.Err())
	case <-t.C:
		err = fmt.Errorf("nccl: ncclCommInitRank(rank %d of %d): %w: the ranks did not all join within %v (a rank died or never started)", rank, size, collective.ErrTimeout, cfg.Timeout)
	}
	if !claimed.CompareAndSwap(false, true) { // finished as we gave up
		if r := <-done; r.rc == 0 {
			lib.commAbort(r.comm)
		}
	}
	return 0, err
}

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// Close destroys the communicator, frees device memory and closes the
// rendezvous New was given.
func (c *Comm) Close() error {
	if c.closed {
		return nil
	}
	c.free()
	return c.rv.Close()
}

// free destroys the communicator and frees device memory: Close but for
// the rendezvous, which stays the caller's when NewComm fails.
func (c *Comm) free() {
	c.closed = true
	for i, b := range c.bufs {
		if b != 0 {
			c.lib.free(b)
			c.bufs[i] = 0
		}
	}
	for _, b := range []uintptr{c.dhdr, c.dhdrs} {
		if b != 0 {
			c.lib.free(b)
		}
	}
	if c.comm != 0 {
		if c.broken != nil {
			c.lib.commAbort(c.comm)
		} else {
			c.lib.commDestroy(c.comm)
		}
	}
	if c.stream != 0 {
		c.lib.streamDestroy(c.stream)
	}
}

func (c *Comm) AllReduce(ctx context.Context, buf any, op collective.Op) error {
	return c.do(ctx, collective.KindAllReduce, buf, nil, op, 0)
}
func (c *Comm) Broadcast(ctx context.Context, buf any, root int) error {
	return c.do(ctx, collective.KindBroadcast, buf, nil, 0, root)
}
func (c *Comm) AllGather(ctx context.Context, send, recv any) error {
	return c.do(ctx, collective.KindAllGather, send, recv, 0, 0)
}
func (c *Comm) ReduceScatter(ctx context.Context, send, recv any, op collective.Op) error {
	return c.do(ctx, collective.KindReduceScatter, send, recv, op, 0)
}
func (c *Comm) Barrier(ctx context.Context) error {
	return c.do(ctx, collective.KindBarrier, nil, nil, 0, 0)
}

// DeviceAllReduce all-reduces count elements of dtype at device address ptr,
// in place, on the communicator's stream, and waits for it.
func (c *Comm) DeviceAllReduce(ctx context.Context, ptr uintptr, count int, dt collective.DType, op collective.Op) error {
	h := collective.Header{Kind: collective.KindAllReduce, DType: dt, Op: op, Len: count, Seq: c.seq + 1}
	if !op.Valid() || (dt != collective.Float32 && dt != collective.Float64) || count < 0 {
		return c.fail(h, fmt.Errorf("%w: DeviceAllReduce(%d %s, %s)", collective.ErrBadBuffer, count, dt, op))
	}
	c.seq++
	if err := c.checkHeader(ctx, h); err != nil {
		return err
	}
	if rc := c.lib.allReduce(ptr, ptr, uintptr(count), ncclType(dt), ncclOp(op), c.comm, c.stream); rc != 0 {
		return c.fail(h, c.ncclErr("ncclAllReduce", rc))
	}
	return c.wait(ctx, h)
}

func (c *Comm) fail(h collective.Header, err error) error {
	return &collective.Error{Backend: "nccl", Self: c.rank, Kind: h.Kind, Seq: h.Seq, Peer: -1, Err: err}
}

func (c *Comm) ncclErr(call string, rc int32) error {
	c.broken = fmt.Errorf("%w: %s: %s", collective.ErrPeerLost, call, c.lib.getErrorString(rc))
	return c.broken
}

func ncclType(dt collective.DType) int32 {
	if dt == collective.Float64 {
		return ncclFloat64
	}
	return ncclFloat32
}

func ncclOp(op collective.Op) int32 {
	switch op {
	case collective.Max:
		return ncclMax
	case collective.Min:
		return ncclMin
	}
	return ncclSum // Mean is a sum scaled afterwards
}

// staging returns device buffer i with room for n bytes.
func (c *Comm) staging(i int, n uintptr) (uintptr, error) {
	if c.caps[i] >= n && c.bufs[i] != 0 {
		return c.bufs[i], nil
	}
	if c.bufs[i] != 0 {
		c.lib.free(c.bufs[i])
		c.bufs[i], c.caps[i] = 0, 0
	}
	var p uintptr
	if rc := c.lib.malloc(&p, max(n, 8)); rc != 0 {
		return 0, fmt.Errorf("cudaMalloc(%d bytes): %s", n, c.lib.cudaErrorString(rc))
	}
	c.bufs[i], c.caps[i] = p, max(n, 8)
	return p, nil
}

func (c *Comm) toDevice(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if rc := c.lib.memcpy(dst, uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), cudaMemcpyHostToDevice); rc != 0 {
		return fmt.Errorf("cudaMemcpy to device: %s", c.lib.cudaErrorString(rc))
	}
	return nil
}

func (c *Comm) toHost(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	if rc := c.lib.memcpy(uintptr(unsafe.Pointer(&dst[0])), src, uintptr(len(dst)), cudaMemcpyDeviceToHost); rc != 0 {
		return fmt.Errorf("cudaMemcpy to host: %s", c.lib.cudaErrorString(rc))
	}
	return nil
}

// wait polls the stream until the queued work is done, the context ends or
// the timeout passes (then the communicator is aborted).
func (c *Comm) wait(ctx context.Context, h collective.Header) error {
	deadline := time.Now().Add(c.cfg.Timeout)
	for spins := 0; ; spins++ {
		rc := c.lib.streamQuery(c.stream)
		if rc == 0 {
			var async int32
			if c.lib.commGetAsyncErr(c.comm, &async); async != 0 {
				return c.fail(h, c.ncclErr("asynchronous NCCL error", async))
			}
			return nil
		}
		if rc != cudaErrorNotReady {
			c.broken = fmt.Errorf("%w: stream: %s", collective.ErrPeerLost, c.lib.cudaErrorString(rc))
			return c.fail(h, c.broken)
		}
		if err := ctx.Err(); err != nil {
			c.broken = fmt.Errorf("%w: abandoned: %v", collective.ErrClosed, err)
			return c.fail(h, err)
		}
		if time.Now().After(deadline) {
			c.broken = fmt.Errorf("%w: the operation did not finish within %v (NCCL cannot say which rank is missing)", collective.ErrTimeout, c.cfg.Timeout)
			return c.fail(h, c.broken)
		}
		if spins < 1000 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// checkHeader all-gathers every rank's header through NCCL and compares.
func (c *Comm) checkHeader(ctx context.Context, h collective.Header) error {
	if c.closed {
		return c.fail(h, collective.ErrClosed)
	}
	if c.broken != nil {
		return c.fail(h, c.broken)
	}
	if c.hmine == nil {
		c.hmine, c.hall = make([]int64, 4), make([]int64, 4*c.size)
	}
	mine, all := c.hmine, c.hall
	mine[0], mine[1], mine[2], mine[3] = int64(h.Kind)|int64(h.DType)<<8|int64(h.Op)<<16, int64(h.Root), int64(h.Len), int64(h.Seq)
	clear(all)
	if err := c.toDevice(c.dhdr, int64Bytes(mine)); err != nil {
		return c.fail(h, err)
	}
	if rc := c.lib.allGather(c.dhdr, c.dhdrs, 4, ncclInt64, c.comm, c.stream); rc != 0 {
		return c.fail(h, c.ncclErr("ncclAllGather (header)", rc))
	}
	if err := c.wait(ctx, h); err != nil {
		return err
	}
	if err := c.toHost(int64Bytes(all), c.dhdrs); err != nil {
		return c.fail(h, err)
	}
	for q := 0; q < c.size; q++ {
		a := all[4*q:]
		theirs := collective.Header{Kind: collective.Kind(a[0] & 0xff), DType: collective.DType(a[0] >> 8 & 0xff), Op: collective.Op(a[0] >> 16 & 0xff), Root: int(a[1]), Len: int(a[2]), Seq: uint64(a[3])}
		if err := h.Mismatch(c.rank, q, theirs); err != nil {
			e := &collective.Error{Backend: "nccl", Self: c.rank, Kind: h.Kind, Seq: h.Seq, Peer: q, Err: err}
			return e
		}
	}
	return nil
}

func int64Bytes(v []int64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*8)
}

func (c *Comm) do(ctx context.Context, kind collective.Kind, send, recv any, op collective.Op, root int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, err := collective.Prepare(kind, c.rank, c.size, send, recv, op, root)
	h.Seq = c.seq + 1
	if err != nil {
		return c.fail(h, err)
	}
	c.seq++
	runtime.LockOSThread() // CUDA's current device is per thread
	defer runtime.UnlockOSThread()
	if rc := c.lib.setDevice(int32(c.cfg.Device)); rc != 0 {
		return c.fail(h, fmt.Errorf("cudaSetDevice(%d): %s", c.cfg.Device, c.lib.cudaErrorString(rc)))
	}
	if err := c.checkHeader(ctx, h); err != nil {
		return err
	}
	if kind == collective.KindBarrier {
		return nil // the header all-gather was the barrier
	}
	esz := uintptr(h.DType.Size())
	n := uintptr(h.Len)
	dt := ncclType(h.DType)
	// Uneven blocks are padded to the largest, B elements per rank.
	B := uintptr(collective.BlockLen(h.Len, c.size, 0))
	var s, r uintptr
	var rc int32
	var call string
	switch kind {
	case collective.KindAllReduce, collective.KindBroadcast:
		if s, err = c.staging(0, n*esz); err != nil {
			return c.fail(h, err)
		}
		if err := c.toDevice(s, collective.Bytes(send)); err != nil {
			return c.fail(h, err)
		}
		if kind == collective.KindAllReduce {
			call, rc = "ncclAllReduce", c.lib.allReduce(s, s, n, dt, ncclOp(op), c.comm, c.stream)
		} else {
			call, rc = "ncclBroadcast", c.lib.broadcast(s, s, n, dt, int32(root), c.comm, c.stream)
		}
	case collective.KindAllGather:
		if s, err = c.staging(0, B*esz); err != nil {
			return c.fail(h, err)
		}
		if r, err = c.staging(1, B*esz*uintptr(c.size)); err != nil {
			return c.fail(h, err)
		}
		if err := c.toDevice(s, collective.Bytes(send)); err != nil {
			return c.fail(h, err)
		}
		call, rc = "ncclAllGather", c.lib.allGather(s, r, B, dt, c.comm, c.stream)
	case collective.KindReduceScatter:
		if s, err = c.staging(0, B*esz*uintptr(c.size)); err != nil {
			return c.fail(h, err)
		}
		if r, err = c.staging(1, B*esz); err != nil {
			return c.fail(h, err)
		}
		sb := collective.Bytes(send)
		for q := 0; q < c.size; q++ {
			lo := uintptr(collective.Offset(h.Len, c.size, q)) * esz
			hi := lo + uintptr(collective.BlockLen(h.Len, c.size, q))*esz
			if err := c.toDevice(s+uintptr(q)*B*esz, sb[lo:hi]); err != nil {
				return c.fail(h, err)
			}
		}
		call, rc = "ncclReduceScatter", c.lib.reduceScatter(s, r, B, dt, ncclOp(op), c.comm, c.stream)
	}
	if rc != 0 {
		return c.fail(h, c.ncclErr(call, rc))
	}
	if err := c.wait(ctx, h); err != nil {
		return err
	}
	switch kind {
	case collective.KindAllReduce, collective.KindBroadcast:
		err = c.toHost(collective.Bytes(send), s)
		if op == collective.Mean && kind == collective.KindAllReduce {
			collective.ScaleAny(send, c.size)
		}
	case collective.KindAllGather:
		rb := collective.Bytes(recv)
		for q := 0; q < c.size && err == nil; q++ {
			lo := uintptr(collective.Offset(h.Len, c.size, q)) * esz
			hi := lo + uintptr(collective.BlockLen(h.Len, c.size, q))*esz
			err = c.toHost(rb[lo:hi], r+uintptr(q)*B*esz)
		}
	case collective.KindReduceScatter:
		err = c.toHost(collective.Bytes(recv), r)
		if op == collective.Mean {
			collective.ScaleAny(recv, c.size)
		}
	}
	if err != nil {
		return c.fail(h, err)
	}
	return nil
}
