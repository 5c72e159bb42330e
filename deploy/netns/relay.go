//go:build linux

package netns

import (
	"errors"
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
	// drainEvery is the longest a relay thread sleeps with frames queued
	// and leaves new arrivals in its socket's buffer (8 MiB: 6 ms at 10
	// Gbit/s, 40 ms of 1500-byte frames at 1 Gbit/s), which drops what
	// does not fit and counts none of it. Links of 0.5 ms or less never
	// wait for it.
	drainEvery = 500 * time.Microsecond
	// relayPriority is the relay threads' SCHED_FIFO priority: above
	// every ordinary thread, so a frame leaves at its due time even
	// while the ranks keep every core busy, and below the kernel's own
	// real-time threads (50 and up).
	relayPriority = 10
)

// Relay copies frames between two interfaces of the caller's namespace,
// delaying or dropping them. One OS thread carries each direction, so
// each can run on the cores of the node that receives its frames
// (Config.NodeCPUs), which then pays for them as a host pays for its own
// network receive: the thread's send runs the receiving node's TCP. A
// thread sleeps in ppoll until a frame arrives or the next one is due (a
// high-resolution timer, not Go's timers, which wake in whole
// milliseconds), receives and sends up to batch frames per system call
// straight from and into its queues' slots, and runs at a real-time
// priority where the process may set one. A pacer learns how late its
// sleeps wake and wakes that much early. Each thread waits in ppoll
// holding one of the process's Ps (GOMAXPROCS): where none is left idle,
// the Go runtime's monitor takes it back after 20 µs and wakes itself
// to give one back when the thread returns, which costs the host's
// cores more wake-ups than the relay's own; a program that measures
// what the relay costs gives it two Ps more than it would use.
type Relay struct {
	fds      [2]int
	stopFd   int // an eventfd: Close wakes the thread with it
	dirs     [2]*direction
	mem      []byte  // the queues' slots
	loss     float64 // fraction of frames dropped
	realtime bool    // both threads run at a real-time priority
	cut      atomic.Bool
	stop     atomic.Bool
	done     sync.WaitGroup // both threads
	frames   atomic.Int64
	dropped  atomic.Int64
	late     atomic.Int64 // nanoseconds frames left after their due time, summed
	errMu    sync.Mutex
	firstErr error
}

// direction is one way through the relay, with its queue and the
// system calls' buffers, reused for every call, and its thread's CPU
// time.
type direction struct {
	from, to int
	cpus     []int // where its thread may run; nil: anywhere
	cpu      threadCPU
	q        *delayQueue
	bufs     [][]byte
	iov      []unix.Iovec
	msgs     []unix.Mmsghdr
	ctrl     []byte        // each message's control buffer: its arrival time
	last     time.Duration // the latest frame's arrival, on the relay's clock
}

// ctrlLen is one message's control buffer: a struct timespec.
var ctrlLen = unix.CmsgSpace(int(unsafe.Sizeof(unix.Timespec{})))

func openPacket(ifname string) (int, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return -1, err
	}
	// Protocol 0: no frame until bind names the protocol and the
	// interface together. A socket made for every protocol receives
	// from every interface of the namespace until it is bound, and would
	// relay what it took then (another program's loopback traffic) into
	// a node.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
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
	// The kernel's time of each frame's arrival: the delay counts from
	// it, not from when the relay's thread woke to receive it (on
	// another core than the sender's, a wake-up costs tens of
	// microseconds in a virtual machine).
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fail("SO_TIMESTAMPNS", err)
	}
	// The outer end's queue is noqueue anyway; skip it.
	unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(ethPAll), Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	// A burst of a TCP window must fit while the relay is not running: a
	// small buffer drops frames and TCP backs off. FORCE passes rmem_max
	// (we are root); the plain option is the fallback.
	// The same for sending: a frame the receiving node's stack has not
	// taken yet (its softirq deferred to ksoftirqd) still counts against
	// the relay's socket, and a full one makes the relay wait.
	for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], 8<<20) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[1], 8<<20)
		}
	}
	return fd, nil
}

// checkCPUs fails unless this process may run on every CPU in nodeCPUs.
func checkCPUs(nodeCPUs [2][]int) error {
	if nodeCPUs[0] == nil {
		return nil
	}
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return fmt.Errorf("netns: read this process's CPUs for NodeCPUs: %w", err)
	}
	var may []int
	for c := range maxCPUs {
		if allowed.IsSet(c) {
			may = append(may, c)
		}
	}
	var errs []error
	for i, cpus := range nodeCPUs {
		for _, c := range cpus {
			if !allowed.IsSet(c) {
				errs = append(errs, fmt.Errorf("netns: NodeCPUs[%d] has CPU %d, which this process may not run on: use CPUs of %v", i, c, may))
			}
		}
	}
	return errors.Join(errs...)
}

// threadName is how a direction's thread shows in /proc (comm, at most
// 15 bytes): the direction i carries node i's frames to node 1-i.
func threadName(i int) string { return fmt.Sprintf("fulgur-relay%d>%d", i, 1-i) }

// newRelay starts the relay between interfaces a and b, the outer ends
// of nodes 0 and 1; nodeCPUs, where not nil, are the CPUs of each node.
func newRelay(a, b string, delay time.Duration, loss float64, nodeCPUs [2][]int) (*Relay, error) {
	var err error
	r := &Relay{loss: loss, fds: [2]int{-1, -1}, stopFd: -1}
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
		// Node i's frames are received by node 1-i.
		r.dirs[i] = &direction{from: r.fds[i], to: r.fds[1-i], cpus: nodeCPUs[1-i], q: newDelayQueue(delay, slots),
			bufs: make([][]byte, 0, batch), iov: make([]unix.Iovec, batch), msgs: make([]unix.Mmsghdr, batch), ctrl: make([]byte, batch*ctrlLen)}
	}
	type start struct {
		rt  bool
		err error
	}
	started := make(chan start)
	r.realtime = true
	r.done.Add(2)
	for i, d := range r.dirs {
		go func() {
			defer r.done.Done()
			rt, restore, err := r.startThread(i, d)
			started <- start{rt, err}
			if err != nil {
				return
			}
			defer restore()
			r.run(d)
		}()
	}
	var errs []error
	for range r.dirs {
		s := <-started
		r.realtime = r.realtime && s.rt
		if s.err != nil {
			errs = append(errs, s.err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// startThread readies the calling goroutine's thread to carry d: locked
// to it, named, on d's CPUs and at a real-time priority where the
// process may set one, which it reports. The returned func gives the
// thread back as it was.
func (r *Relay) startThread(i int, d *direction) (rt bool, restore func(), err error) {
	runtime.LockOSThread()
	// What the thread was, to give it back so: the runtime may have put
	// the goroutine on the main thread, which never exits (the process's
	// name is its name), and another thread returns to the pool.
	var name [16]byte
	var mask unix.CPUSet
	slack, _ := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	attr, errAttr := unix.SchedGetAttr(0, 0)
	if unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0) != nil || unix.SchedGetaffinity(0, &mask) != nil || errAttr != nil {
		// Cannot be given back: the thread ends with the goroutine.
		restore = func() {}
	} else {
		restore = func() {
			ok := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0) == nil
			ok = ok && unix.SchedSetaffinity(0, &mask) == nil
			ok = ok && unix.SchedSetAttr(0, attr, 0) == nil
			ok = ok && unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0) == nil
			if ok {
				runtime.UnlockOSThread()
			}
		}
	}
	if n, err := unix.BytePtrFromString(threadName(i)); err == nil {
		unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(n)), 0, 0, 0)
	}
	if d.cpus != nil {
		var set unix.CPUSet
		for _, c := range d.cpus {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			restore()
			return false, nil, fmt.Errorf("pin the thread carrying node %d's frames to node %d's CPUs %v: %w", i, 1-i, d.cpus, err)
		}
	}
	rt = unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: relayPriority}, 0) == nil
	// Without a real-time priority, ppoll's wake-up is late by at least
	// the thread's timer slack, 50 µs by default: make it 1 ns. The rest
	// of the lateness, the wake-up's own cost, the pacer learns.
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	return rt, restore, nil
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

// threadCPU is the CPU time of a direction's thread while it carries
// frames. The thread does not read its own clock after every wake-up (a
// system call each): Stats reads it from outside through the thread's
// CPU clock, and the thread stores the final figure when it stops, as
// it goes back to the runtime's pool to run other goroutines.
type threadCPU struct {
	mu      sync.Mutex
	clock   int32 // the thread's CPU clock (clock_gettime's id); 0: not started
	start   int64 // its reading when the thread began to carry frames
	stopped bool
	total   time.Duration // the final figure, once stopped
}

// threadClock is the id of thread tid's CPU clock, as
// pthread_getcpuclockid makes it (Linux's MAKE_THREAD_CPUCLOCK with
// CPUCLOCK_SCHED): any thread of the process may read it.
func threadClock(tid int) int32 { return int32(^uint32(tid)<<3 | 6) }

func readClock(id int32) int64 {
	var ts unix.Timespec
	if unix.ClockGettime(id, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// begin starts counting the calling thread's CPU time: it may have run
// other goroutines before.
func (c *threadCPU) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock = threadClock(unix.Gettid())
	c.start = readClock(unix.CLOCK_THREAD_CPUTIME_ID)
}

// end stops counting, on the thread that called begin.
func (c *threadCPU) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total = time.Duration(readClock(unix.CLOCK_THREAD_CPUTIME_ID) - c.start)
	c.stopped = true
}

// used is the CPU time so far.
func (c *threadCPU) used() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.stopped:
		return c.total
	case c.clock == 0:
		return 0
	}
	return time.Duration(max(readClock(c.clock)-c.start, 0))
}

// run carries d's frames on the calling thread until Close. It wakes
// for a frame's arrival only when none is queued: a queued frame is due
// before any frame that arrives after it, so the wake-up at its due
// time receives whatever arrived meanwhile, with the kernel's arrival
// time of each, in time to send it at its own: a frame that arrives
// while the thread sleeps wakes no one (no waiter on the socket, no
// inter-processor interrupt). Frames that tbf spaces wider than a few
// microseconds still need a wake-up each at their due time, which only
// sending them early would save: the benchmark's link wakes the relay
// about 0.8 times a frame either way.
func (r *Relay) run(d *direction) {
	d.cpu.begin()
	defer d.cpu.end()
	t0 := time.Now()
	clock := func() time.Duration { return time.Since(t0) }
	pfd := make([]unix.PollFd, 0, 2)
	var p pacer
	full := false // the sending socket is full
	for {
		now := clock()
		pfd = append(pfd[:0], unix.PollFd{Fd: int32(r.stopFd), Events: unix.POLLIN})
		var ts *unix.Timespec // nil: until a frame arrives, or there is room to send
		wait, queued := d.q.wait(now)
		sleep := time.Duration(0)
		switch {
		case full:
			pfd = append(pfd, unix.PollFd{Fd: int32(d.to), Events: unix.POLLOUT})
		case !queued:
			pfd = append(pfd, unix.PollFd{Fd: int32(d.from), Events: unix.POLLIN})
		case wait > drainEvery:
			t := unix.NsecToTimespec(int64(drainEvery))
			ts = &t
		case wait > 0:
			if sleep = p.sleep(wait); sleep > 0 {
				t := unix.NsecToTimespec(int64(sleep))
				ts = &t
			}
		}
		if ts != nil || len(pfd) > 1 {
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
		// Receive first: the head may not be due yet (the pacer wakes
		// the thread early), and what arrived must not delay it.
		r.receive(d, clock)
		if wait, queued := d.q.wait(clock()); queued && !full && wait > 0 && p.sleep(wait) == 0 {
			// Less than a wake-up's overshoot to go: spin on the clock
			// (no system call) until the head is due.
			for due := clock() + wait; clock() < due && !r.stop.Load(); {
			}
		}
		full = r.release(d, clock())
	}
}

// mmsgs points d's message headers at bufs, one buffer each, and a
// control buffer each where they receive.
func (d *direction) mmsgs(bufs [][]byte, receive bool) []unix.Mmsghdr {
	for i, b := range bufs {
		d.iov[i].Base = &b[0]
		d.iov[i].SetLen(len(b))
		d.msgs[i] = unix.Mmsghdr{}
		d.msgs[i].Hdr.Iov = &d.iov[i]
		d.msgs[i].Hdr.SetIovlen(1)
		if receive {
			d.msgs[i].Hdr.Control = &d.ctrl[i*ctrlLen]
			d.msgs[i].Hdr.SetControllen(ctrlLen)
		}
	}
	return d.msgs[:len(bufs)]
}

// mmsg makes the recvmmsg or sendmmsg system call without blocking
// (MSG_DONTWAIT): the thread waits only in ppoll, where it also keeps
// time. (Not as a raw system call, which would keep the thread's P:
// the runtime's monitor then preempts the goroutine every 10 ms, and
// the locked thread's hand-off costs more wake-ups than the calls'
// own way in and out of the runtime; measured.)
func mmsg(trap uintptr, fd int, msgs []unix.Mmsghdr, flags int) (int, error) {
	n, _, e := unix.Syscall6(trap, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags|unix.MSG_DONTWAIT), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// arrival is when the kernel received the i-th frame of the last
// receive, on the relay's clock (now is wall): its timestamp, or now
// without one. Arrivals never go back, so frames leave in order.
func (d *direction) arrival(i int, now time.Duration, wall int64) time.Duration {
	at := now
	c := d.ctrl[i*ctrlLen:][:ctrlLen]
	h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	if int(d.msgs[i].Hdr.Controllen) >= ctrlLen && h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS {
		ts := (*unix.Timespec)(unsafe.Pointer(&c[unix.CmsgLen(0)]))
		// A wall clock stepped since is no arrival time: keep now.
		if age := time.Duration(wall - ts.Nano()); age >= 0 && age < time.Second {
			at = now - age
		}
	}
	at = max(at, d.last)
	d.last = at
	return at
}

// receive takes every frame waiting on d's interface into d's queue, due
// a delay after its arrival, until none waits or the queue is full.
func (r *Relay) receive(d *direction, clock func() time.Duration) {
	for !d.q.full() {
		d.bufs = d.q.freeSlots(batch, d.bufs)
		msgs := d.mmsgs(d.bufs, true)
		n, err := mmsg(unix.SYS_RECVMMSG, d.from, msgs, 0)
		now, wall := clock(), time.Now().UnixNano()
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
			d.q.push(i-kept, int(m.Len), d.arrival(i, now, wall))
			kept++
		}
		if n < len(msgs) {
			return
		}
	}
}

// release sends d's frames that are due at now. It reports whether the
// interface's socket is full (its frames not yet taken by the receiving
// stack): the relay waits until it may write, and sends the rest then.
func (r *Relay) release(d *direction, now time.Duration) (full bool) {
	for {
		d.bufs = d.q.ready(now, batch, d.bufs)
		if len(d.bufs) == 0 {
			return false
		}
		n, err := mmsg(unix.SYS_SENDMMSG, d.to, d.mmsgs(d.bufs, false), 0)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return true
		case err != nil:
			// The first frame failed: drop it, as a link drops what it
			// cannot carry, and go on with the rest.
			r.dropped.Add(1)
			if err != unix.ENOBUFS {
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
	// dirs[i] carries node i's frames to node 1-i.
	to := [2]time.Duration{r.dirs[1].cpu.used(), r.dirs[0].cpu.used()}
	return RelayStats{Frames: r.frames.Load(), Dropped: r.dropped.Load(), Late: time.Duration(r.late.Load()),
		CPU: to[0] + to[1], NodeCPU: to}
}

// Realtime reports whether the relay's threads run at a real-time
// priority (SCHED_FIFO, which needs CAP_SYS_NICE). Without it, a busy
// host delays frames past their due time; Stats' Late says by how much.
func (r *Relay) Realtime() bool { return r.realtime }

// close stops the relay and returns the first error it met.
func (r *Relay) close() error {
	if !r.stop.CompareAndSwap(false, true) {
		return nil
	}
	// The eventfd stays readable: it wakes both threads.
	unix.Write(r.stopFd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	r.done.Wait()
	r.closeFds()
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.firstErr
}
