//go:build linux

package netns

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
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
	// drainEvery is the longest a carrier sleeps with frames queued
	// and leaves new arrivals in its socket's buffer (8 MiB: 6 ms at 10
	// Gbit/s, 40 ms of 1500-byte frames at 1 Gbit/s), which drops what
	// does not fit and counts none of it. Links of 0.5 ms or less never
	// wait for it.
	drainEvery = 500 * time.Microsecond
	// relayPriority is the carriers' SCHED_FIFO priority: above
	// every ordinary thread, so a frame leaves at its due time even
	// while the ranks keep every core busy, and below the kernel's own
	// real-time threads (50 and up).
	relayPriority = 10
)

// Relay copies frames between two interfaces of the caller's namespace,
// delaying or dropping them. A process of its own carries each
// direction, so each can run on the cores of the node that receives its
// frames (Config.NodeCPUs), which then pays for them as a host pays for
// its own network receive: the process's send runs the receiving node's
// TCP. It is this program re-executed (see carry.go): a process of one
// thread of work that makes its system calls without the Go scheduler,
// where the relay threads of the caller's process woke that process's
// runtime on the ranks' cores (its monitor took their Ps back from
// every wait of 10 ms or more, and then watched every 20 µs for a
// millisecond or more). A carrier sleeps in ppoll until a frame arrives
// or the next one is due (a high-resolution timer, not Go's timers,
// which wake in whole milliseconds), receives and sends up to batch
// frames per system call straight from and into its queue's slots, and
// runs at a real-time priority where the process may set one. A pacer
// learns how late its sleeps wake and wakes that much early.
type Relay struct {
	fds      [2]int
	mem      []byte  // the page shared with the carriers
	sh       *shared // mem's counts and cut
	carriers [2]*carrierProc
	realtime bool // both carriers run at a real-time priority
	closed   bool
}

// shared is the page the relay shares with its carriers: each
// direction's counts, which its carrier writes, and the cut, which the
// relay writes.
type shared struct {
	dir [2]dirCounts
	cut atomic.Bool
}

// dirCounts are one direction's counts, each on a cache line of its own
// from the other direction's.
type dirCounts struct {
	frames, dropped atomic.Int64
	late            atomic.Int64 // nanoseconds frames left after their due time, summed
	_               [40]byte
}

// carrierProc is the process carrying one direction, seen from the
// relay's.
type carrierProc struct {
	cmd    *exec.Cmd
	stop   io.Closer // its stdin: closing it stops the carrier
	stderr bytes.Buffer
	cpu    procCPU
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
	// it, not from when the relay's carrier woke to receive it (on
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

// carrierName is how the threads of a direction's carrier show in /proc
// (comm, at most 15 bytes): the direction i carries node i's frames to
// node 1-i.
func carrierName(i int) string { return fmt.Sprintf("fulgur-relay%d>%d", i, 1-i) }

// newRelay starts the relay between interfaces a and b, the outer ends
// of nodes 0 and 1; nodeCPUs, where not nil, are the CPUs of each node.
func newRelay(a, b string, delay time.Duration, loss float64, nodeCPUs [2][]int) (*Relay, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to run the relay's carriers: %w", err)
	}
	r := &Relay{fds: [2]int{-1, -1}}
	for i, name := range []string{a, b} {
		if r.fds[i], err = openPacket(name); err != nil {
			r.closeFds()
			return nil, err
		}
	}
	memfd, err := unix.MemfdCreate("fulgur-relay", unix.MFD_CLOEXEC)
	if err != nil {
		r.closeFds()
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	defer unix.Close(memfd)
	if err := unix.Ftruncate(memfd, sharedLen); err != nil {
		r.closeFds()
		return nil, fmt.Errorf("size the relay's shared page: %w", err)
	}
	if r.mem, err = unix.Mmap(memfd, 0, sharedLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		r.closeFds()
		return nil, fmt.Errorf("map the relay's shared page: %w", err)
	}
	r.sh = (*shared)(unsafe.Pointer(&r.mem[0]))
	r.realtime = true
	var errs []error
	for i := range 2 {
		// Node i's frames are received by node 1-i.
		spec := carrySpec{dir: i, delay: delay, loss: loss, cpus: nodeCPUs[1-i]}
		c, rt, err := startCarrier(exe, spec, [3]int{r.fds[i], r.fds[1-i], memfd})
		r.carriers[i] = c
		r.realtime = r.realtime && rt
		if err != nil {
			errs = append(errs, fmt.Errorf("start the process carrying node %d's frames to node %d: %w", i, 1-i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, r.close())
	}
	return r, nil
}

// sharedLen is the shared page's size.
const sharedLen = 4096

// startCarrier starts the process that carries spec's direction, with
// fds (the receiving and the sending socket and the shared page) as its
// descriptors 3, 4 and 5, and waits until it carries frames. It reports
// whether the carrier runs at a real-time priority. The returned process,
// when not nil, must be stopped with stopCarrier even on an error.
func startCarrier(exe string, spec carrySpec, fds [3]int) (*carrierProc, bool, error) {
	c := &carrierProc{cmd: exec.Command(exe)}
	// The carrier's runtime: one P (it has one goroutine of work, which
	// the monitor's preemption every 10 ms puts straight back on its
	// thread, no other thread woken), no asynchronous preemption (its
	// signal would cut a wait short), and no collector (it allocates
	// nothing while it carries frames: the forced collection every two
	// minutes would stop it while it waits for a frame).
	c.cmd.Env = []string{carryEnv + "=" + spec.String(), "GOMAXPROCS=1", "GOGC=off", "GODEBUG=asyncpreemptoff=1"}
	for _, fd := range fds {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, false, fmt.Errorf("dup: %w", err)
		}
		f := os.NewFile(uintptr(d), "relay")
		defer f.Close()
		c.cmd.ExtraFiles = append(c.cmd.ExtraFiles, f)
	}
	stop, err := c.cmd.StdinPipe()
	if err != nil {
		return nil, false, err
	}
	c.stop = stop
	ready, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, false, err
	}
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		return nil, false, err
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(ready).ReadString('\n')
		line <- s
	}()
	var s string
	select {
	case s = <-line:
	case <-time.After(10 * time.Second):
		return c, false, errors.New("it did not start in 10 s")
	}
	if rt, ok := strings.CutPrefix(s, "carrying "); ok {
		c.cpu.begin(c.cmd.Process.Pid)
		return c, strings.TrimSpace(rt) == "realtime", nil
	}
	return c, false, errors.New("it ended before it carried a frame")
}

// stopCarrier stops c and returns what it failed with.
func (c *carrierProc) stopCarrier() error {
	c.cpu.end()
	c.stop.Close()
	if err := c.cmd.Wait(); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(c.stderr.String()))
	}
	return nil
}

func (r *Relay) closeFds() {
	for _, fd := range r.fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	r.fds = [2]int{-1, -1}
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
}

// procCPU is the CPU time of a carrier, its runtime's threads included,
// since it began to carry frames: read through the process's CPU clock,
// which another process may read, and kept when the carrier stops.
type procCPU struct {
	mu      sync.Mutex
	clock   int32 // the process's CPU clock (clock_gettime's id); 0: not started
	start   int64 // its reading when the carrier began to carry frames
	stopped bool
	total   time.Duration // the final figure, once stopped
}

// processClock is the id of process pid's CPU clock, as
// clock_getcpuclockid makes it (Linux's MAKE_PROCESS_CPUCLOCK with
// CPUCLOCK_SCHED).
func processClock(pid int) int32 { return int32(^uint32(pid)<<3 | 2) }

func readClock(id int32) (int64, bool) {
	var ts unix.Timespec
	if unix.ClockGettime(id, &ts) != nil {
		return 0, false
	}
	return ts.Nano(), true
}

func (c *procCPU) begin(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock = processClock(pid)
	c.start, _ = readClock(c.clock)
}

// end keeps the figure, before the carrier stops.
func (c *procCPU) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clock != 0 && !c.stopped {
		if now, ok := readClock(c.clock); ok {
			c.total = time.Duration(now - c.start)
		}
	}
	c.stopped = true
}

// used is the CPU time so far.
func (c *procCPU) used() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.clock == 0 {
		return c.total
	}
	if now, ok := readClock(c.clock); ok {
		c.total = time.Duration(max(now-c.start, 0))
	}
	return c.total
}

// Cut drops every frame from now on: a partition.
func (r *Relay) Cut() { r.sh.cut.Store(true) }

// Frames is how many frames reached the relay; Dropped how many of them
// it dropped (loss, a cut or a full queue).
func (r *Relay) Frames() int64  { return r.sh.dir[0].frames.Load() + r.sh.dir[1].frames.Load() }
func (r *Relay) Dropped() int64 { return r.sh.dir[0].dropped.Load() + r.sh.dir[1].dropped.Load() }

// Stats reads the counts (each exact, not all at one instant).
func (r *Relay) Stats() RelayStats {
	// carriers[i] carries node i's frames to node 1-i.
	to := [2]time.Duration{r.carriers[1].cpu.used(), r.carriers[0].cpu.used()}
	return RelayStats{Frames: r.Frames(), Dropped: r.Dropped(), Late: time.Duration(r.sh.dir[0].late.Load() + r.sh.dir[1].late.Load()),
		CPU: to[0] + to[1], NodeCPU: to}
}

// Realtime reports whether the relay's carriers run at a real-time
// priority (SCHED_FIFO, which needs CAP_SYS_NICE). Without it, a busy
// host delays frames past their due time; Stats' Late says by how much.
func (r *Relay) Realtime() bool { return r.realtime }

// close stops the relay and returns the first error it met.
func (r *Relay) close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	var errs []error
	for i, c := range r.carriers {
		if c == nil {
			continue
		}
		if err := c.stopCarrier(); err != nil {
			errs = append(errs, fmt.Errorf("relay (node %d to node %d): %w", i, 1-i, err))
		}
	}
	// Stats after Close reads the last counts, kept off the page.
	if r.sh != nil {
		kept := new(shared)
		for i := range r.sh.dir {
			kept.dir[i].frames.Store(r.sh.dir[i].frames.Load())
			kept.dir[i].dropped.Store(r.sh.dir[i].dropped.Load())
			kept.dir[i].late.Store(r.sh.dir[i].late.Load())
		}
		kept.cut.Store(r.sh.cut.Load())
		r.sh = kept
	}
	r.closeFds()
	return errors.Join(errs...)
}
