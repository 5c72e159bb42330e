package tcp

import (
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// spinConn reads and writes a plain TCP connection for a rank that has
// one P (GOMAXPROCS=1, a rank pinned to one core) without parking in Go's
// network poller while its other goroutines compute: a read (or a write
// that would block) tries the system call without waiting and, while it
// would block, yields and tries again (spinner), parking only once nothing
// else of the process wants the P. A goroutine parked in the poller is
// woken only when the P finds nothing else to run, or by sysmon's poll
// every 10 ms: while backward computed, an asynchronous all-reduce's reply
// sat unread for 10-30 ms, and the gradient buckets' round trips ran one
// after another once backward ended. Trying between the backward pass's
// ops (the engine yields between them) moves the operation on as its data
// comes.
//
// With more Ps the connection's own Read and writes serve, parking at once
// as before: a spin of 10 or 50 µs before parking (with or without
// sched_yield between tries) made a 256 KB all-reduce of 2 ranks on a
// 2-core machine no faster, 0.23-0.37 ms against 0.20-0.30 (the spinning
// thread holds a core the peer wants).
//
// Deadlines hold as before: each try goes through the connection's
// RawConn, which fails once the deadline has passed (breakGroup's kick),
// and the park is the connection's own Read or write.
type spinConn struct {
	c  *net.TCPConn
	rc syscall.RawConn

	// One read and one write run at a time (the ring's receiver reads,
	// writes hold its wmu): their arguments and results live here, so the
	// functions handed to the RawConn are built once, not per call (a
	// closure over a call's locals is an allocation each time).
	rp     []byte
	rn     int
	rerr   error
	readFn func(fd uintptr) bool
	iov    [][]byte
	vecs   [8]unix.Iovec
	wn     int
	werr   error
	wrFn   func(fd uintptr) bool
}

// spinning returns c's spinning reader and writer (spinConn), or nils when
// c is not a plain TCP connection (TLS, or a test's wrapper): those keep the
// connection's own Read and Write.
func spinning(c conn) (io.Reader, func(*net.Buffers) (int64, error)) {
	t, ok := c.(*net.TCPConn)
	if !ok {
		return nil, nil
	}
	rc, err := t.SyscallConn()
	if err != nil {
		return nil, nil
	}
	s := &spinConn{c: t, rc: rc, iov: make([][]byte, 0, 8)}
	s.readFn = func(fd uintptr) bool {
		s.rn, s.rerr = unix.Read(int(fd), s.rp)
		return true // never park here
	}
	s.wrFn = func(fd uintptr) bool {
		s.wn, s.werr = s.writev(int(fd))
		return true
	}
	return s, s.writeBuffers
}

const (
	// spinNothing: a yield that came back sooner than this ran nothing
	// else (on a 2-core VM a yield to nothing took 0.1 µs, to another
	// goroutine's try 1.1 µs): the process has nothing to do but wait,
	// and the wait parks at once (the P's thread then blocks in the
	// poller, which wakes it as the data comes). Spinning on only took
	// the core from the peer on a loaded machine: a 256 KB all-reduce of 2
	// unpinned ranks at GOMAXPROCS=1, load average 5-6 on 2 cores, took
	// 0.34 ms spinning 50 µs before parking, 0.26 ms spinning 10 µs,
	// 0.21 ms parking at once (medians of 8 runs each).
	spinNothing = time.Microsecond
	// spinOther: a yield that took longer than this ran a piece of another
	// goroutine's work (or the thread lost its core), and the count of
	// spinIdle starts again.
	spinOther = 5 * time.Microsecond
	// spinIdle bounds the time spent in tries and in yields that ran only
	// short pieces (another goroutine spinning too, say the sender and
	// the receiver of one operation) before the wait parks.
	spinIdle = 50 * time.Microsecond
)

// spinner decides, each time a try would block, whether to try again.
type spinner struct {
	last time.Time
	idle time.Duration
}

// oneP reports whether this process runs goroutines on one P, where
// spinConn spins; with more, it parks at once (see spinConn).
func oneP() bool { return runtime.GOMAXPROCS(0) == 1 }

// again yields the P and reports whether to try again rather than park:
// not when the yield ran nothing else; always when it ran a piece of
// other work (the wait goes on, one try between two pieces, as long as
// they run); while short pieces ran, for spinIdle.
//
// What ran is judged by the wall clock: a yield during which the kernel
// gave the core to another process also reads as other work. The thread's
// CPU clock would tell the two apart, but not when the goroutine comes
// back on another thread, which it does when the computing goroutine's
// call into a C library (the BLAS) has its P handed off.
func (s *spinner) again() bool {
	t0 := time.Now()
	if s.last.IsZero() {
		s.last = t0
	}
	runtime.Gosched()
	t1 := time.Now()
	switch d := t1.Sub(t0); {
	case d < spinNothing:
		return false
	case d > spinOther:
		s.idle = 0
	default:
		s.idle += t1.Sub(s.last)
	}
	s.last = t1
	return s.idle < spinIdle
}

// Read reads like the connection's Read: at least one byte, io.EOF at the
// end of the stream.
func (s *spinConn) Read(p []byte) (int, error) {
	if len(p) == 0 || !oneP() {
		return s.c.Read(p)
	}
	var sp spinner
	s.rp = p
	defer func() { s.rp = nil }()
	for {
		err := s.rc.Read(s.readFn)
		n, serr := s.rn, s.rerr
		switch {
		case err != nil: // deadline passed, or closed
			return 0, err
		case serr == nil && n > 0:
			return n, nil
		case serr == nil:
			return 0, io.EOF
		case serr == unix.EINTR:
			continue
		case serr != unix.EAGAIN:
			return 0, s.opError("read", serr)
		}
		if !sp.again() {
			return s.c.Read(p)
		}
	}
}

// writeBuffers writes all of bufs (consuming them) like net.Buffers.WriteTo
// on the connection: one writev for the frames of one write.
func (s *spinConn) writeBuffers(bufs *net.Buffers) (int64, error) {
	if !oneP() {
		return bufs.WriteTo(s.c)
	}
	var total int64
	var sp spinner
	defer func() { clear(s.iov[:cap(s.iov)]); clear(s.vecs[:]) }() // hold no caller's buffer
	for len(*bufs) > 0 {
		s.iov = s.iov[:0]
		for _, b := range *bufs {
			if len(b) > 0 {
				s.iov = append(s.iov, b)
			}
		}
		if len(s.iov) == 0 {
			*bufs = (*bufs)[:0]
			break
		}
		err := s.rc.Write(s.wrFn)
		n, serr := s.wn, s.werr
		if err != nil {
			return total, err
		}
		if n > 0 {
			total += int64(n)
			consume(bufs, int64(n))
			sp = spinner{} // progress: a new wait
			continue
		}
		if serr == unix.EINTR {
			continue
		}
		if serr != nil && serr != unix.EAGAIN {
			return total, s.opError("write", serr)
		}
		if !sp.again() {
			n, err := bufs.WriteTo(s.c) // parks until the kernel takes the rest
			return total + n, err
		}
	}
	return total, nil
}

// writev is writev(2) of s.iov without the race detector's annotations that
// unix.Writev adds, as the standard library's own writev (net.Buffers on a
// connection) has none: a ring receives into a buffer it sent from, data
// its peer could send only after reading it, an order the network makes
// and the detector cannot see (it reported the receive as racing with the
// send).
func (s *spinConn) writev(fd int) (int, error) {
	iov := s.iov
	vecs := s.vecs[:0]
	if len(iov) > len(s.vecs) {
		vecs = make([]unix.Iovec, 0, len(iov))
	}
	vecs = vecs[:len(iov)]
	for i, b := range iov {
		vecs[i].Base = &b[0]
		vecs[i].SetLen(len(b))
	}
	n, _, e := unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&vecs[0])), uintptr(len(vecs)))
	runtime.KeepAlive(iov)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// consume drops the first n bytes of bufs.
func consume(bufs *net.Buffers, n int64) {
	for len(*bufs) > 0 {
		l := int64(len((*bufs)[0]))
		if l > n {
			(*bufs)[0] = (*bufs)[0][n:]
			return
		}
		n -= l
		*bufs = (*bufs)[1:]
	}
}

func (s *spinConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: s.c.LocalAddr(), Addr: s.c.RemoteAddr(), Err: os.NewSyscallError(op, err)}
}
