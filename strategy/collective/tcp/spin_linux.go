package tcp

import (
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

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
	s := &spinConn{c: t, rc: rc}
	return s, s.writeBuffers
}

const (
	// spinIdle is how long a wait spins, counting only the time during
	// which nothing else of this process ran, before it parks.
	spinIdle = 50 * time.Microsecond
	// spinOther: a yield that took longer than this ran another goroutine
	// (or the thread lost its core), and the idle count starts again. On
	// a 2-core VM a try that would block took 0.8 µs, a yield to nothing
	// 0.1 µs, a yield to another spinning goroutine 1.1 µs on average.
	spinOther = 5 * time.Microsecond
)

// spinner decides, each time a try would block, whether to try again.
type spinner struct {
	last time.Time
	idle time.Duration
}

// oneP reports whether this process runs goroutines on one P, where
// spinConn spins; with more, it parks at once (see spinConn).
func oneP() bool { return runtime.GOMAXPROCS(0) == 1 }

// again yields the P and reports whether to try again rather than park.
// A yield that ran other goroutines (it took over spinOther) starts the
// count again: the wait goes on, one try between two of their pieces, as
// long as they run, and ends after spinIdle in which nothing else ran (the
// tries and yields alone; two goroutines spinning so yield to each other
// in about a microsecond).
func (s *spinner) again() bool {
	t0 := time.Now()
	if s.last.IsZero() {
		s.last = t0
	}
	runtime.Gosched()
	t1 := time.Now()
	if t1.Sub(t0) > spinOther {
		s.idle = 0
	} else {
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
	for {
		var n int
		var serr error
		err := s.rc.Read(func(fd uintptr) bool {
			n, serr = unix.Read(int(fd), p)
			return true // never park here
		})
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
	iov := make([][]byte, 0, 8)
	for len(*bufs) > 0 {
		iov = iov[:0]
		for _, b := range *bufs {
			if len(b) > 0 {
				iov = append(iov, b)
			}
		}
		if len(iov) == 0 {
			*bufs = (*bufs)[:0]
			break
		}
		var n int
		var serr error
		err := s.rc.Write(func(fd uintptr) bool {
			n, serr = unix.Writev(int(fd), iov)
			return true
		})
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
