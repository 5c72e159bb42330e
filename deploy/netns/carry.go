//go:build linux

package netns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// carryEnv names the variable that makes this program a carrier: the
// relay re-executes the program it runs in with it set (any program
// that imports netns), and this package's init then carries one
// direction of the link and exits, before the program's main runs.
const carryEnv = "FULGUR_NETNS_CARRY"

func init() {
	if spec, ok := os.LookupEnv(carryEnv); ok {
		os.Exit(carryMain(spec))
	}
}

// carrySpec is what a carrier is given: the direction it carries (dir
// carries node dir's frames to node 1-dir), the delay, the loss, and
// the receiving node's CPUs (nil: any).
type carrySpec struct {
	dir   int
	delay time.Duration
	loss  float64
	cpus  []int
}

func (s carrySpec) String() string {
	cpus := "any"
	if s.cpus != nil {
		cs := make([]string, len(s.cpus))
		for i, c := range s.cpus {
			cs[i] = strconv.Itoa(c)
		}
		cpus = strings.Join(cs, ",")
	}
	return fmt.Sprintf("%d %d %s %s", s.dir, s.delay.Nanoseconds(), strconv.FormatFloat(s.loss, 'g', -1, 64), cpus)
}

func parseCarrySpec(v string) (carrySpec, error) {
	var s carrySpec
	f := strings.Fields(v)
	bad := fmt.Errorf("%s is %q: the relay sets it, as \"direction delay-ns loss cpu,cpu\" (or any for the CPUs)", carryEnv, v)
	if len(f) != 4 {
		return s, bad
	}
	var err error
	var ns int64
	if s.dir, err = strconv.Atoi(f[0]); err != nil || s.dir < 0 || s.dir > 1 {
		return s, bad
	}
	if ns, err = strconv.ParseInt(f[1], 10, 64); err != nil || ns < 0 {
		return s, bad
	}
	s.delay = time.Duration(ns)
	if s.loss, err = strconv.ParseFloat(f[2], 64); err != nil || !(s.loss >= 0 && s.loss <= 1) {
		return s, bad
	}
	if f[3] == "any" {
		return s, nil
	}
	for _, c := range strings.Split(f[3], ",") {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 || n >= maxCPUs {
			return s, bad
		}
		s.cpus = append(s.cpus, n)
	}
	return s, nil
}

// The carrier's descriptors: the relay closes the write end of its
// stdin to stop it (and so does the relay's death), it says on stdout
// when it carries frames, and gets its sockets and the shared page as
// 3, 4 and 5.
const (
	stopFd   = 0
	readyFd  = 1
	fromFd   = 3
	toFd     = 4
	sharedFd = 5
)

// carryMain carries one direction until the relay stops it, and returns
// the exit status: 0, or 1 after it wrote what failed to stderr.
func carryMain(v string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return 1
	}
	spec, err := parseCarrySpec(v)
	if err != nil {
		return fail(err)
	}
	mem, err := unix.Mmap(sharedFd, 0, sharedLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("map the relay's shared page: %w", err))
	}
	// The slots' memory is mapped, not Go's heap: the pages of slots
	// never used are never touched.
	const slot = (vnetHdrLen + maxFrame + 63) &^ 63
	smem, err := unix.Mmap(-1, 0, queueFrames*slot, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return fail(fmt.Errorf("map the relay's queue (%d MiB): %w", queueFrames*slot>>20, err))
	}
	slots := make([][]byte, queueFrames)
	for j := range slots {
		slots[j] = smem[j*slot : (j+1)*slot : (j+1)*slot]
	}
	sh := (*shared)(unsafe.Pointer(&mem[0]))
	c := &carrier{d: &direction{from: fromFd, to: toFd, q: newDelayQueue(spec.delay, slots),
		bufs: make([][]byte, 0, batch), iov: make([]unix.Iovec, batch), msgs: make([]unix.Mmsghdr, batch), ctrl: make([]byte, batch*ctrlLen)},
		loss: spec.loss, counts: &sh.dir[spec.dir], cut: &sh.cut}
	// The work runs on a goroutine of its own: init's runs locked to the
	// main thread, where the monitor's preemption would hand the thread
	// over to another and back every 10 ms.
	status := make(chan int)
	go func() {
		rt, err := readyThreads(spec)
		if err != nil {
			status <- fail(err)
			return
		}
		msg := "carrying ordinary\n"
		if rt {
			msg = "carrying realtime\n"
		}
		if _, err := unix.Write(readyFd, []byte(msg)); err != nil {
			status <- fail(err)
			return
		}
		c.run()
		if c.err != nil {
			status <- fail(c.err)
			return
		}
		status <- 0
	}()
	return <-status
}

// readyThreads names every thread of this process after spec's
// direction, pins them to spec's CPUs and raises them to the relay's
// real-time priority where the process may, which it reports. Threads
// the runtime starts later inherit all three from the thread that
// starts them, one of these.
func readyThreads(spec carrySpec) (rt bool, err error) {
	rt = true
	for range 2 { // again, for a thread started meanwhile
		tasks, err := filepath.Glob("/proc/self/task/*")
		if err != nil || len(tasks) == 0 {
			return false, fmt.Errorf("list this process's threads: %v", err)
		}
		for _, task := range tasks {
			tid, err := strconv.Atoi(filepath.Base(task))
			if err != nil {
				continue
			}
			os.WriteFile(filepath.Join(task, "comm"), []byte(carrierName(spec.dir)), 0)
			if spec.cpus != nil {
				var set unix.CPUSet
				for _, c := range spec.cpus {
					set.Set(c)
				}
				if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
					return false, fmt.Errorf("pin the carrier of node %d's frames to node %d's CPUs %v: %w", spec.dir, 1-spec.dir, spec.cpus, err)
				}
			}
			if unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: relayPriority}, 0) != nil {
				rt = false
			}
		}
	}
	// Without a real-time priority, ppoll's wake-up is late by at least
	// the thread's timer slack, 50 µs by default: make it 1 ns. The rest
	// of the lateness, the wake-up's own cost, the pacer learns.
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	return rt, nil
}

// carrier carries one direction of the link, in its own process.
type carrier struct {
	d      *direction
	loss   float64      // fraction of frames dropped
	counts *dirCounts   // on the shared page
	cut    *atomic.Bool // the relay's, on the shared page
	err    error        // the first error met
}

func (c *carrier) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// direction is one way through the relay, with its queue and the
// system calls' buffers, reused for every call.
type direction struct {
	from, to int
	q        *delayQueue
	bufs     [][]byte
	iov      []unix.Iovec
	msgs     []unix.Mmsghdr
	ctrl     []byte        // each message's control buffer: its arrival time
	last     time.Duration // the latest frame's arrival, on the carrier's clock
}

// run carries c's frames until the relay closes the carrier's stdin. It
// wakes for a frame's arrival only when none is queued: a queued frame
// is due before any frame that arrives after it, so the wake-up at its
// due time receives whatever arrived meanwhile, with the kernel's
// arrival time of each, in time to send it at its own: a frame that
// arrives while the carrier sleeps wakes no one (no waiter on the
// socket, no inter-processor interrupt). Frames that tbf spaces wider
// than a few microseconds still need a wake-up each at their due time,
// which only sending them early would save. The wait for an arrival is
// a raw ppoll too: waiting in the runtime's poller instead (the P idle,
// so the runtime's monitor sleeps rather than wake every 10 ms) cost 4
// to 5 more wake-ups and 0.15-0.25 ms more CPU a step in
// BenchmarkRelayAllReduce, more than the monitor's wake-ups cost.
func (c *carrier) run() {
	d := c.d
	t0 := time.Now()
	clock := func() time.Duration { return time.Since(t0) }
	pfd := make([]unix.PollFd, 0, 2)
	var p pacer
	full := false // the sending socket is full
	for {
		now := clock()
		pfd = append(pfd[:0], unix.PollFd{Fd: stopFd, Events: unix.POLLIN})
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
			n, err := ppoll(pfd, ts)
			if err != nil && err != unix.EINTR {
				c.fail(fmt.Errorf("relay poll: %w", err))
				return
			}
			if n == 0 && err == nil && sleep > 0 {
				p.woke(sleep, clock()-now)
			}
			if err == nil && pfd[0].Revents != 0 {
				return // stdin closed: stop
			}
		}
		// Receive first: the head may not be due yet (the pacer wakes
		// the carrier early), and what arrived must not delay it.
		if !c.receive(clock) {
			return
		}
		if wait, queued := d.q.wait(clock()); queued && !full && wait > 0 && p.sleep(wait) == 0 {
			// Less than a wake-up's overshoot to go: spin on the clock
			// (no system call) until the head is due.
			for due := clock() + wait; clock() < due; {
			}
		}
		full = c.release(clock())
	}
}

// ppoll waits as unix.Ppoll does, as a raw system call: the carrier's
// goroutine keeps its P, and the runtime neither wakes nor is woken when
// it waits and returns (the carrier's process has nothing else to run).
func ppoll(fds []unix.PollFd, ts *unix.Timespec) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
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
// (MSG_DONTWAIT), as a raw system call, as ppoll.
func mmsg(trap uintptr, fd int, msgs []unix.Mmsghdr, flags int) (int, error) {
	n, _, e := unix.RawSyscall6(trap, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags|unix.MSG_DONTWAIT), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// arrival is when the kernel received the i-th frame of the last
// receive, on the carrier's clock (now is wall): its timestamp, or now
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

// receive takes every frame waiting on c's interface into its queue, due
// a delay after its arrival, until none waits or the queue is full. It
// reports false when the socket failed (its interface gone, say): the
// carrier stops rather than wake for the error again and again at a
// real-time priority.
func (c *carrier) receive(clock func() time.Duration) bool {
	d := c.d
	for !d.q.full() {
		d.bufs = d.q.freeSlots(batch, d.bufs)
		msgs := d.mmsgs(d.bufs, true)
		n, err := mmsg(unix.SYS_RECVMMSG, d.from, msgs, 0)
		now, wall := clock(), time.Now().UnixNano()
		if err != nil {
			if err != unix.EAGAIN && err != unix.EINTR {
				c.fail(fmt.Errorf("relay read: %w", err))
				return false
			}
			return true
		}
		kept := 0
		for i, m := range msgs[:n] {
			c.counts.frames.Add(1)
			if m.Hdr.Flags&unix.MSG_TRUNC != 0 || c.cut.Load() || (c.loss > 0 && rand.Float64() < c.loss) {
				c.counts.dropped.Add(1)
				continue
			}
			d.q.push(i-kept, int(m.Len), d.arrival(i, now, wall))
			kept++
		}
		if n < len(msgs) {
			return true
		}
	}
	return true
}

// release sends c's frames that are due at now. It reports whether the
// interface's socket is full (its frames not yet taken by the receiving
// stack): the carrier waits until it may write, and sends the rest then.
func (c *carrier) release(now time.Duration) (full bool) {
	d := c.d
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
			c.counts.dropped.Add(1)
			if err != unix.ENOBUFS {
				c.fail(fmt.Errorf("relay write (%d bytes): %w", len(d.bufs[0])-vnetHdrLen, err))
			}
			d.q.pop(1, now)
			continue
		}
		c.counts.late.Add(int64(d.q.pop(n, now)))
	}
}
