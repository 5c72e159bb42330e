//go:build linux

package netns

import (
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const ethPAll = 0x0003 // ETH_P_ALL

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// The relay's tuning.
const (
	// batch is how many frames one system call receives or sends.
	batch = 64
	// queueFrames bounds each direction's queue: 200 ms of 64 KiB
	// offload frames at 10 Gbit/s, or 50 ms of 1500-byte frames at 1
	// Gbit/s (the fault suite's lossy WAN); beyond, frames drop, as a
	// router's full queue drops them.
	queueFrames = 4096
	// vnetHdrLen is the virtio_net_hdr before every frame with
	// PACKET_VNET_HDR: it carries the checksum offload across the
	// relay, so no frame's checksum is computed in user space.
	vnetHdrLen = 10
	// relayPriority is the relay thread's SCHED_FIFO priority: above
	// every ordinary thread, so a frame leaves at its due time even
	// while the ranks keep every core busy, and below the kernel's own
	// real-time threads (50 and up).
	relayPriority = 10
)

// Relay copies frames between two interfaces of the caller's namespace,
// delaying or dropping them. One OS thread carries both directions: it
// sleeps in ppoll until a frame arrives or the next one is due (a
// high-resolution timer, not Go's timers, which wake in whole
// milliseconds), receives and sends up to batch frames per system call
// straight from and into its queues' slots, and runs at a real-time
// priority where the process may set one. A pacer learns how late its
// sleeps wake and wakes that much early.
type Relay struct {
	fds      [2]int
	stopFd   int // an eventfd: Close wakes the thread with it
	dirs     [2]*direction
	mem      []byte  // the queues' slots
	loss     float64 // fraction of frames dropped
	realtime bool
	cut      atomic.Bool
	stop     atomic.Bool
	done     chan struct{}
	frames   atomic.Int64
	dropped  atomic.Int64
	late     atomic.Int64 // nanoseconds frames left after their due time, summed
	cpu      atomic.Int64 // nanoseconds of CPU the relay's thread used
	errMu    sync.Mutex
	firstErr error
}

// direction is one way through the relay, with its queue and the
// system calls' buffers, reused for every call.
type direction struct {
	from, to int
	q        *delayQueue
	bufs     [][]byte
	iov      []unix.Iovec
	msgs     []unix.Mmsghdr
}

func openPacket(ifname string) (int, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(ethPAll)))
	if err != nil {
		return -1, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("%s on %s: %w", what, ifname, err)
	}
	// Our own writes to this interface must not come back to us.
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING (Linux 4.20 or later)", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		return fail("PACKET_VNET_HDR", err)
	}
	// The outer end's queue is noqueue anyway; skip it.
	unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(ethPAll), Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	// A burst of a TCP window must fit while the relay is not running: a
	// small buffer drops frames and TCP backs off. FORCE passes rmem_max
	// (we are root); the plain option is the fallback.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	}
	return fd, nil
}

func newRelay(a, b string, delay time.Duration, loss float64) (*Relay, error) {
	var err error
	r := &Relay{loss: loss, done: make(chan struct{}), fds: [2]int{-1, -1}, stopFd: -1}
	for i, name := range []string{a, b} {
		if r.fds[i], err = openPacket(name); err != nil {
			r.closeFds()
			return nil, err
		}
	}
	if r.stopFd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		r.closeFds()
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	// The slots' memory is mapped, not Go's heap: the pages of slots
	// never used are never touched, and Close returns it all at once.
	const slot = (vnetHdrLen + maxFrame + 63) &^ 63
	if r.mem, err = unix.Mmap(-1, 0, 2*queueFrames*slot, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE); err != nil {
		r.closeFds()
		return nil, fmt.Errorf("map the relay's queues (%d MiB): %w", 2*queueFrames*slot>>20, err)
	}
	for i := range 2 {
		slots := make([][]byte, queueFrames)
		for j := range slots {
			off := (i*queueFrames + j) * slot
			slots[j] = r.mem[off : off+slot : off+slot]
		}
		r.dirs[i] = &direction{from: r.fds[i], to: r.fds[1-i], q: newDelayQueue(delay, slots),
			bufs: make([][]byte, 0, batch), iov: make([]unix.Iovec, batch), msgs: make([]unix.Mmsghdr, batch)}
	}
	started := make(chan bool)
	go r.run(started)
	r.realtime = <-started
	return r, nil
}

func (r *Relay) closeFds() {
	for _, fd := range []int{r.fds[0], r.fds[1], r.stopFd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	if r.mem != nil {
		unix.Munmap(r.mem)
	}
}

func (r *Relay) fail(err error) {
	r.errMu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.errMu.Unlock()
}

// run is the relay's thread. It sends started whether it runs at a
// real-time priority, then carries frames until Close.
func (r *Relay) run(started chan<- bool) {
	// Never unlocked: the thread, with its priority, ends with the
	// goroutine instead of going back to the runtime's pool.
	runtime.LockOSThread()
	defer close(r.done)
	rt := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: relayPriority}, 0) == nil
	// Without a real-time priority, ppoll's wake-up is late by at least
	// the thread's timer slack, 50 µs by default: make it 1 ns. The rest
	// of the lateness, the wake-up's own cost, the pacer learns.
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	var cpu0 unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &cpu0) // the thread may have run other goroutines before
	started <- rt
	t0 := time.Now()
	clock := func() time.Duration { return time.Since(t0) }
	pfd := make([]unix.PollFd, 3)
	var p pacer
	for {
		wait := time.Duration(-1) // until a frame arrives
		now := clock()
		pfd[0] = unix.PollFd{Fd: int32(r.stopFd), Events: unix.POLLIN}
		for i, d := range r.dirs {
			pfd[1+i] = unix.PollFd{Fd: int32(d.from), Events: unix.POLLIN}
			if d.q.full() {
				pfd[1+i].Events = 0 // nothing to receive into: wait for the head to leave
			}
			if w, ok := d.q.wait(now); ok && (wait < 0 || w < wait) {
				wait = w
			}
		}
		var ts *unix.Timespec // nil: until a frame arrives
		sleep := time.Duration(-1)
		if wait >= 0 {
			sleep = p.sleep(wait)
			t := unix.NsecToTimespec(int64(sleep))
			ts = &t
		}
		polled := wait != 0
		if polled {
			n, err := unix.Ppoll(pfd, ts, nil)
			if err != nil && err != unix.EINTR {
				r.fail(fmt.Errorf("relay poll: %w", err))
				return
			}
			if n == 0 && err == nil && sleep > 0 {
				p.woke(sleep, clock()-now)
			}
		}
		if r.stop.Load() {
			return
		}
		for i, d := range r.dirs {
			// A receive costs a system call: only where a frame waits.
			if !polled || pfd[1+i].Revents&unix.POLLIN != 0 {
				r.receive(d, clock())
			}
		}
		for _, d := range r.dirs {
			r.release(d, clock())
		}
		var cpu unix.Timespec
		if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &cpu) == nil {
			r.cpu.Store(cpu.Nano() - cpu0.Nano())
		}
	}
}

// mmsgs points d's message headers at bufs, one buffer each.
func (d *direction) mmsgs(bufs [][]byte) []unix.Mmsghdr {
	for i, b := range bufs {
		d.iov[i].Base = &b[0]
		d.iov[i].SetLen(len(b))
		d.msgs[i] = unix.Mmsghdr{}
		d.msgs[i].Hdr.Iov = &d.iov[i]
		d.msgs[i].Hdr.SetIovlen(1)
	}
	return d.msgs[:len(bufs)]
}

// mmsg makes the recvmmsg or sendmmsg system call.
func mmsg(trap uintptr, fd int, msgs []unix.Mmsghdr, flags int) (int, error) {
	n, _, e := unix.Syscall6(trap, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// receive takes every frame waiting on d's interface into d's queue, due
// a delay after now, until none waits or the queue is full.
func (r *Relay) receive(d *direction, now time.Duration) {
	for !d.q.full() {
		d.bufs = d.q.freeSlots(batch, d.bufs)
		msgs := d.mmsgs(d.bufs)
		n, err := mmsg(unix.SYS_RECVMMSG, d.from, msgs, unix.MSG_DONTWAIT)
		if err != nil {
			if err != unix.EAGAIN && err != unix.EINTR {
				r.fail(fmt.Errorf("relay read: %w", err))
			}
			return
		}
		kept := 0
		for i, m := range msgs[:n] {
			r.frames.Add(1)
			if m.Hdr.Flags&unix.MSG_TRUNC != 0 || r.cut.Load() || (r.loss > 0 && rand.Float64() < r.loss) {
				r.dropped.Add(1)
				continue
			}
			d.q.push(i-kept, int(m.Len), now)
			kept++
		}
		if n < len(msgs) {
			return
		}
	}
}

// release sends d's frames that are due at now.
func (r *Relay) release(d *direction, now time.Duration) {
	for {
		d.bufs = d.q.ready(now, batch, d.bufs)
		if len(d.bufs) == 0 {
			return
		}
		n, err := mmsg(unix.SYS_SENDMMSG, d.to, d.mmsgs(d.bufs), 0)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			// The first frame failed: drop it, as a link drops what it
			// cannot carry, and go on with the rest.
			r.dropped.Add(1)
			if err != unix.ENOBUFS && err != unix.EAGAIN {
				r.fail(fmt.Errorf("relay write (%d bytes): %w", len(d.bufs[0])-vnetHdrLen, err))
			}
			d.q.pop(1, now)
			continue
		}
		r.late.Add(int64(d.q.pop(n, now)))
	}
}

// Cut drops every frame from now on: a partition.
func (r *Relay) Cut() { r.cut.Store(true) }

// Frames is how many frames reached the relay; Dropped how many of them
// it dropped (loss, a cut or a full queue).
func (r *Relay) Frames() int64  { return r.frames.Load() }
func (r *Relay) Dropped() int64 { return r.dropped.Load() }

// Stats reads the counts (each exact, not all at one instant).
func (r *Relay) Stats() RelayStats {
	return RelayStats{Frames: r.frames.Load(), Dropped: r.dropped.Load(), Late: time.Duration(r.late.Load()), CPU: time.Duration(r.cpu.Load())}
}

// Realtime reports whether the relay's thread runs at a real-time
// priority (SCHED_FIFO, which needs CAP_SYS_NICE). Without it, a busy
// host delays frames past their due time; Stats' Late says by how much.
func (r *Relay) Realtime() bool { return r.realtime }

// close stops the relay and returns the first error it met.
func (r *Relay) close() error {
	if !r.stop.CompareAndSwap(false, true) {
		return nil
	}
	unix.Write(r.stopFd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	<-r.done
	r.closeFds()
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.firstErr
}
