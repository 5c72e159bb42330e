//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"golang.org/x/sys/unix"
)

// Dir is where shared-memory files are created.
const Dir = "/dev/shm"

// SlotBytes is the per-rank staging area of one round.
const SlotBytes = 1 << 20

const (
	ctrlBytes = 128 // one cache-line pair per rank: no false sharing
	headBytes = 256

	statusAlive  = 0
	statusClosed = 1
	statusDead   = 2
)

var fileMagic = [8]byte{'f', 'u', 'l', 'g', 'u', 'r', 's', 'm'}

// Auto returns a shared-memory group when every rank of rv is on this host
// and can map the shared file, and fallback(ctx, rv) otherwise (tcp.NewGroup:
// the TCP ring over the same rendezvous). All ranks take the same decision.
// The group returned takes rv over, as New's does, when fallback's does
// too (tcp.NewGroup's does): its Close closes rv. On an error rv is still
// the caller's to close, when fallback leaves it so on its errors.
func Auto(ctx context.Context, rv *rendezvous.Rendezvous, fallback func(context.Context, *rendezvous.Rendezvous) (collective.Group, error)) (collective.Group, error) {
	if rv.Size() > 1 && rv.SameHost() {
		g, err := open(ctx, rv)
		if err == nil {
			return collective.WithAsync(g), nil
		}
		if !errors.Is(err, errUnavailable) {
			return nil, err
		}
		rv.Config().Logger.Info().Err(err).Msg("shared memory unavailable; using the fallback")
	}
	return fallback(ctx, rv)
}

// New returns a shared-memory group, or an error when the ranks are not all
// on this host or cannot share memory. The group takes rv over: it watches
// rv's connections for a peer that dies, and its Close closes them, so the
// caller closes the group only. On an error rv is still the caller's to
// close.
func New(ctx context.Context, rv *rendezvous.Rendezvous) (collective.Group, error) {
	if !rv.SameHost() {
		return nil, fmt.Errorf("shm: %w: the ranks run on different hosts %v", errUnavailable, rv.Hosts())
	}
	g, err := open(ctx, rv)
	if err != nil {
		return nil, err
	}
	return collective.WithAsync(g), nil
}

var errUnavailable = errors.New("shared memory unavailable")

// Group is one rank's view of the shared segment.
type Group struct {
	rv         *rendezvous.Rendezvous
	rank, size int
	timeout    time.Duration
	mem        []byte
	slot       int // bytes per slot
	phase      uint64
	seq        uint64
	// tail is what the last operation may still be reading after its last
	// barrier on a slower rank (see fence).
	tail int

	opMu    sync.Mutex   // held by an operation; Close waits for it before unmapping
	memMu   sync.RWMutex // watchers read-lock it to touch the mapping; unmap write-locks
	closing atomic.Bool
	broken  error

	// oneP: the process ran with GOMAXPROCS=1 when the group was opened.
	oneP bool
	// lentSeq is the last operation (seq) in which a barrier's yield of
	// the only P ran another goroutine: this rank's P is shared with other work
	// (a training's backward pass beside an asynchronous reduction), and
	// two-rank all-reduces do not split (see allReducePair).
	lentSeq uint64
	// spinFar is how long a barrier spins for a rank on another core
	// (waitFor): spinFar when the host has a core for each rank, else 0.
	spinFar time.Duration

	// coreOf, when set (tests), stands for getcpu: the core this rank
	// runs on.
	coreOf func() uint32

	// scanned, when set (tests), runs in a barrier after a scan of the
	// counters found a rank behind, before its status is read.
	scanned func()
	// statusRead, when set (tests), runs in a barrier once the status of
	// the rank found behind has been read, before it is acted on.
	statusRead func()
	// yielding, when set (tests), runs before each sched_yield of a
	// barrier; the time it takes counts as the yield's.
	yielding func()
	// clock, when set (tests), stands for time.Now in a barrier.
	clock func() time.Time
	// goyield, when set (tests), stands for the runtime.Gosched with
	// which a barrier offers the P to the process's other goroutines.
	goyield func()
	// runnable reads the count of goroutines ready to run (offerP).
	runnable [1]metrics.Sample
	// paused, when set (tests), runs at each pause of a long barrier:
	// parked is true when it sleeps in Go's scheduler (time.Sleep), false
	// when in the kernel.
	paused func(parked bool)
}

var _ collective.Collective = (*Group)(nil)

func fileSize(n int) int { return headBytes + n*ctrlBytes + (n+1)*SlotBytes }

// open creates (rank 0) or maps (others) the segment; every rank learns
// whether all succeeded, so they fall back together.
func open(ctx context.Context, rv *rendezvous.Rendezvous) (*Group, error) {
	n := rv.Size()
	g := &Group{rv: rv, rank: rv.Rank(), size: n, timeout: rv.Config().Timeout, slot: SlotBytes, oneP: runtime.GOMAXPROCS(0) == 1}
	if n <= runtime.NumCPU() {
		g.spinFar = spinFar
	}
	var name string
	var mapErr error
	if g.rank == 0 {
		name, mapErr = g.create(n)
		if mapErr != nil {
			name = ""
		}
	}
	blobs, err := rv.Exchange(ctx, []byte(name))
	if err != nil {
		g.unmap()
		return nil, fmt.Errorf("shm: %w", err)
	}
	if g.rank != 0 {
		name = string(blobs[0])
		if name == "" {
			mapErr = errors.New("rank 0 could not create the file")
		} else {
			mapErr = g.attach(name, n)
		}
	}
	ok := []byte{1}
	if mapErr != nil {
		ok = []byte(mapErr.Error())
	}
	blobs, err = rv.Exchange(ctx, ok)
	if g.rank == 0 && name != "" {
		os.Remove(name) // every rank has mapped it (or given up): drop the name
	}
	if err != nil {
		g.unmap()
		return nil, fmt.Errorf("shm: %w", err)
	}
	for r, b := range blobs {
		if len(b) != 1 || b[0] != 1 {
			g.unmap()
			return nil, fmt.Errorf("shm: %w: rank %d: %s", errUnavailable, r, b)
		}
	}
	rv.Watch(g.lost)
	return g, nil
}

func (g *Group) create(n int) (string, error) {
	var id [8]byte
	rand.Read(id[:])
	name := filepath.Join(Dir, "fulgur-"+hex.EncodeToString(id[:]))
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", fmt.Errorf("%w: create %s: %v", errUnavailable, name, err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(fileSize(n))); err != nil {
		os.Remove(name)
		return "", fmt.Errorf("%w: size %s: %v", errUnavailable, name, err)
	}
	if err := g.mapFd(fd, n); err != nil {
		os.Remove(name)
		return "", err
	}
	copy(g.mem, fileMagic[:])
	binary.LittleEndian.PutUint32(g.mem[8:], uint32(n))
	return name, nil
}

func (g *Group) attach(name string, n int) error {
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: open %s: %v", errUnavailable, name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size != int64(fileSize(n)) {
		return fmt.Errorf("%w: %s has the wrong size", errUnavailable, name)
	}
	if err := g.mapFd(fd, n); err != nil {
		return err
	}
	if [8]byte(g.mem[:8]) != fileMagic || binary.LittleEndian.Uint32(g.mem[8:]) != uint32(n) {
		g.unmap()
		return fmt.Errorf("%w: %s is not this group's segment", errUnavailable, name)
	}
	return nil
}

func (g *Group) mapFd(fd, n int) error {
	m, err := unix.Mmap(fd, 0, fileSize(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("%w: mmap: %v", errUnavailable, err)
	}
	g.mem = m
	return nil
}

func (g *Group) unmap() {
	g.memMu.Lock()
	defer g.memMu.Unlock()
	if g.mem != nil {
		unix.Munmap(g.mem)
		g.mem = nil
	}
}

// Shared layout: head (magic, size, abort word), per-rank control blocks,
// n slots, one result slot.
func (g *Group) abortWord() *uint64 { return (*uint64)(unsafe.Pointer(&g.mem[64])) }
func (g *Group) abortMsg() []byte   { return g.mem[72:headBytes] }
func (g *Group) ctrl(r int) []byte  { return g.mem[headBytes+r*ctrlBytes : headBytes+(r+1)*ctrlBytes] }
func (g *Group) counter(r int) *uint64 {
	return (*uint64)(unsafe.Pointer(&g.ctrl(r)[0]))
}
func (g *Group) status(r int) *uint32 { return (*uint32)(unsafe.Pointer(&g.ctrl(r)[8])) }

// cpuWord is the core rank r last ran on when it began to wait in a
// barrier or came to a two-rank all-reduce of pairSplitBytes or more, plus
// one (see waitFor and pairWhole); after the headers.
func (g *Group) cpuWord(r int) *uint32 { return (*uint32)(unsafe.Pointer(&g.ctrl(r)[80])) }

// resultWord is the phase of the last two-rank all-reduce for which rank r
// published the result in its slot, not its part (see allReducePair).
func (g *Group) resultWord(r int) *uint64 { return (*uint64)(unsafe.Pointer(&g.ctrl(r)[88])) }

// wholeWord is the phase of the last two-rank all-reduce for which rank r
// published its whole part in its slot, where its peer, coming later, may
// reduce it for both (see allReducePair).
func (g *Group) wholeWord(r int) *uint64 { return (*uint64)(unsafe.Pointer(&g.ctrl(r)[96])) }

// hdr is rank r's published header for operations of seq's parity: a rank
// can be one operation ahead of a peer still reading the previous headers,
// never two (it would have to pass a barrier the peer has not reached).
func (g *Group) hdr(r int, seq uint64) []byte {
	o := 16 + 32*int(seq&1)
	return g.ctrl(r)[o : o+32]
}
func (g *Group) slotBytes(r int) []byte {
	o := headBytes + g.size*ctrlBytes + r*g.slot
	return g.mem[o : o+g.slot]
}

// lost is called by the liveness watcher when rank r's connection ends.
func (g *Group) lost(r int, err error) {
	g.memMu.RLock()
	defer g.memMu.RUnlock()
	if g.closing.Load() || g.mem == nil {
		return
	}
	// The dead rank cannot mark itself; its watcher (rank 0 watches every
	// rank, the others watch rank 0) does, unless it closed in order.
	atomic.CompareAndSwapUint32(g.status(r), statusAlive, statusDead)
}

// setAbort publishes a failure every rank will see: blame+1 in the low 32
// bits, the error class above, and the message.
func (g *Group) setAbort(blame int, class uint32, msg string) {
	m := g.abortMsg()
	if atomic.LoadUint64(g.abortWord()) != 0 {
		return
	}
	n := copy(m[1:], msg)
	m[0] = byte(n)
	atomic.CompareAndSwapUint64(g.abortWord(), 0, uint64(class)<<32|uint64(uint32(blame+1)))
}

const (
	classLost uint32 = iota + 1
	classTimeout
)

func (g *Group) Rank() int { return g.rank }
func (g *Group) Size() int { return g.size }

func (g *Group) fail(h collective.Header, peer int, err error) error {
	if g.broken == nil {
		g.broken = &collective.Error{Backend: "shm", Self: g.rank, Kind: h.Kind, Seq: h.Seq, Peer: peer, Err: err}
		return g.broken
	}
	return &collective.Error{Backend: "shm", Self: g.rank, Kind: h.Kind, Seq: h.Seq, Peer: peer, Err: err}
}

// barrier raises this rank's counter to the next phase and waits until every
// rank has reached it.
func (g *Group) barrier(ctx context.Context, h collective.Header) error {
	g.phase++
	target := g.phase
	atomic.StoreUint64(g.counter(g.rank), target)
	var start time.Time
	handedOff := false
	// The scans of the first, pure spin (see nearby), and how long the
	// rank waited for may keep this one spinning (see spinFor).
	spinScans, spinFor := 200, time.Duration(0)
	for spins := 0; ; spins++ {
		behind := -1
		for q := 0; q < g.size; q++ {
			if atomic.LoadUint64(g.counter(q)) < target {
				behind = q
				break
			}
		}
		if behind < 0 {
			return nil
		}
		if w := atomic.LoadUint64(g.abortWord()); w != 0 {
			m := g.abortMsg()
			msg := string(m[1 : 1+int(m[0])])
			sent := collective.ErrPeerLost
			if uint32(w>>32) == classTimeout {
				sent = collective.ErrTimeout
			}
			return g.fail(h, int(uint32(w))-1, fmt.Errorf("%w: %s", sent, msg))
		}
		if g.scanned != nil {
			g.scanned()
		}
		// The status is read once, and the counter after it: the rank may
		// have reached the phase since the scan, passed this barrier
		// (every other rank had reached it) and closed or exited, its
		// counter written before its status. A closed or dead status read
		// before the counter is then seen with the counter that says so;
		// a second read of the status after the counter could find the
		// rank closed after it passed, and fail an operation it completed.
		st := atomic.LoadUint32(g.status(behind))
		if g.statusRead != nil {
			g.statusRead()
		}
		if st != statusAlive && atomic.LoadUint64(g.counter(behind)) >= target {
			continue
		}
		switch st {
		case statusClosed:
			return g.fail(h, behind, fmt.Errorf("%w: rank %d %w", collective.ErrPeerLost, behind, collective.ErrPeerClosed))
		case statusDead:
			return g.fail(h, behind, fmt.Errorf("%w: rank %d's process is gone (its connection to rank 0 ended)", collective.ErrPeerLost, behind))
		}
		if spins == 0 {
			spinScans, spinFor = g.waitFor(behind)
		}
		if spins < spinScans {
			continue
		}
		if spins == spinScans {
			start = g.now()
		}
		if spins&63 == 0 {
			if g.now().Sub(start) > g.timeout {
				msg := fmt.Sprintf("rank %d made no progress for %v", behind, g.timeout)
				g.setAbort(behind, classTimeout, msg)
				return g.fail(h, behind, fmt.Errorf("%w: %s", collective.ErrTimeout, msg))
			}
			if err := ctx.Err(); err != nil {
				g.setAbort(g.rank, classLost, fmt.Sprintf("rank %d gave up: %v", g.rank, err))
				return g.fail(h, -1, err)
			}
			if g.closing.Load() {
				return g.fail(h, -1, fmt.Errorf("%w: closed during the operation", collective.ErrClosed))
			}
		}
		if spinFor > 0 && g.now().Sub(start) < spinFor {
			// The rank waited for runs on another core: it arrives
			// without this one's core, so keep it (with one P, let the
			// process's other goroutines have the P now and then).
			if g.oneP && spins&63 == 0 {
				g.yieldP()
			}
			continue
		}
		// With one P (GOMAXPROCS=1, a rank pinned to one core) let this
		// process's other goroutines run first: the backward pass that
		// produces the next bucket needs the P, which a system call does
		// not give up. (With more, they have other Ps, and a Gosched would
		// only cost a trip through the scheduler.) More ranks than cores
		// is common (4 ranks on 2 cores): hand the core to the rank we
		// wait for, and back off to short sleeps.
		//
		// A yield that took long ran another process on this core, and
		// the scheduler then lets that one run out its slice (about 3 ms)
		// before this rank may have the core back, however soon its peer
		// arrives: on a machine shared with other work, a rank that kept
		// yielding came out of a barrier 0.8-2.3 ms after a peer 5 ms late
		// (median of 200), against 56-79 µs when it goes on to the
		// pauses, whose timer wakes it. A yield to nothing takes under
		// 1 µs, so on cores of its own a rank keeps spinning as before.
		//
		// Such a yield returns after the other process's slice, past
		// yieldWindow, and so does the next; one that took long but
		// returned inside the window ran the kernel's own work (a
		// kworker, an interrupt, the host taking the virtual CPU for a
		// moment), and the rank yields on rather than go to its naps: it
		// pauses once a yield that took long ends past the window. On a
		// quiet 2-core VM, bound ranks whose 20 µs naps began after such a
		// yield woke late: a 256 KiB all-reduce took 0.079-0.103 ms at the
		// median of a series (8 series) against 0.066-0.078 when they
		// yielded on.
		waited := g.now().Sub(start)
		if spins < 4000 && (!handedOff || waited < yieldWindow) {
			if g.oneP {
				g.yieldP()
			}
			t0 := g.now()
			if g.yielding != nil {
				g.yielding()
			}
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			handedOff = g.now().Sub(t0) > yieldedTo
		} else {
			g.pause(waited)
		}
	}
}

// waitFor returns how a barrier waits for rank behind: the scans of its
// first spin, and how long it may then go on spinning before it yields.
//
// Ranks that share a core (the kernel often puts two on one core of a
// machine busy with other work, and every rank shares one when there are
// more ranks than cores) take turns on it: the rank waited for arrives only
// once this one hands its core over, so the wait yields at once. When the
// rank waited for last ran on another core and the group has a core for
// each rank (as mpirun's default binding gives Open MPI's ranks), it comes
// without this rank's core, typically tens of µs later (it started its
// copy or its sum that much later): this rank spins up to spinFar before it
// yields, where a yield to another thread would send it to its pauses and
// a nap past its peer's arrival would make it late for the next barrier in
// turn. Each rank publishes its core (plus one; 0: not yet known) when it
// starts to wait; an unknown core keeps the spin of 200 scans, then yields.
// So does every wait of a group with more ranks than cores (spinFar 0):
// its ranks take turns on the cores anyway, and their waits stay as they
// were measured (yielding at once, 3 and 4 ranks on 2 cores at 4 MB moved
// by as much as the same code did between two series).
func (g *Group) waitFor(behind int) (scans int, spin time.Duration) {
	if g.spinFar == 0 {
		return 200, 0
	}
	mine := g.cpu() + 1
	atomic.StoreUint32(g.cpuWord(g.rank), mine)
	switch peer := atomic.LoadUint32(g.cpuWord(behind)); {
	case peer == mine:
		return 0, 0
	case peer != 0:
		return 0, g.spinFar
	}
	return 200, 0
}

// now is time.Now, or the test's clock.
func (g *Group) now() time.Time {
	if g.clock != nil {
		return g.clock()
	}
	return time.Now()
}

// cpu returns the core this rank runs on (getcpu, or the test's coreOf).
func (g *Group) cpu() uint32 {
	if g.coreOf != nil {
		return g.coreOf()
	}
	return getcpu()
}

// getcpu returns the core the calling thread runs on.
func getcpu() uint32 {
	var cpu uint32
	unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0)
	return cpu
}

const (
	// spinFar is how long a barrier spins for a rank running on another
	// core, in a group with a core for each rank (see waitFor): past the
	// 30-77 µs by which one rank came to a two-rank all-reduce's barriers
	// after the other on a 2-core host, short of a time slice.
	spinFar = 100 * time.Microsecond
	// napShort is a barrier's pause once its spin is over, and napLong
	// its pause once it has waited napAfter: a long wait (a peer saving a
	// checkpoint) wakes 1,000 times a second rather than 15,000. Ranks
	// sharing a core (4 on 2) wait long for the rank whose turn it is,
	// and each short nap's wake-up takes the core from it for a few µs:
	// napAfter bounds that to about a hundred wake-ups a wait.
	napShort = 20 * time.Microsecond
	napLong  = time.Millisecond
	napAfter = 10 * time.Millisecond
	// yieldWindow: a barrier's yields go on this long into its wait
	// (from the end of its first spin) even after one that took long,
	// and past it while they are quick (see barrier).
	yieldWindow = 200 * time.Microsecond
	// yieldedTo: a Gosched that took longer than this may have run
	// another goroutine (offerP asks whether one did); a shorter one did
	// not, or not for long. A yield to nothing takes 0.1-0.4 µs (99%;
	// see the tcp backend's spinner), but 2-6 µs now and then right
	// after a kernel sleep; a backward op between two of the engine's
	// yields takes longer than this but for the smallest, which a
	// misjudged pause holds up by one nap.
	yieldedTo = 10 * time.Microsecond
	// ranFor: a yield whose thread spent more CPU than this in it ran
	// another goroutine (see offerP): past the 10-40 µs an interrupt or
	// the host's steal charged a bound rank's thread in its yields on a
	// loaded 2-core VM.
	ranFor = 100 * time.Microsecond
	// napSlack is the timer slack of a thread that naps holding the P
	// (rawNap).
	napSlack = time.Microsecond
)

// yieldP lets the process's other goroutines have the P, and notes when one
// ran (lentSeq).
func (g *Group) yieldP() {
	if g.offerP() {
		g.lentSeq = g.seq
	}
}

// offerP yields the P to the process's other goroutines (runtime.Gosched)
// and reports whether it lent the P to one: the yield took longer than
// yieldedTo, and then another goroutine is ready to run (it runs beside
// this rank, as a training's backward pass does, yielding between its
// ops), or this one came back on another thread (the one that ran handed
// the P over), or this thread spent more than ranFor of CPU in the yield
// (a goroutine ran that long, then ended or blocked). A yield that took long
// otherwise was not a goroutine's: the kernel ran another thread on the
// core (the rank's own runtime threads, bound to it too; a timer
// interrupt; other programs on a shared machine) or charged this thread
// for an interrupt or for time the host took its virtual CPU (a 200 µs
// sleep in the kernel was charged 20-40 µs of CPU on a loaded 2-core VM,
// now and then milliseconds). Timed alone, such a yield counted as a lent P
// and kept the two-rank all-reduce off its split for the next pairLentOps
// operations: a bench process of 256 KiB all-reduces (75 operations) that
// one hit early ran whole, 0.09 ms against 0.04 split.
func (g *Group) offerP() bool {
	tid, cpu0 := unix.Gettid(), threadCPU()
	t0 := time.Now()
	if g.goyield != nil {
		g.goyield()
	} else {
		runtime.Gosched()
	}
	if time.Since(t0) <= yieldedTo {
		return false
	}
	if unix.Gettid() != tid || threadCPU()-cpu0 > ranFor {
		return true
	}
	g.runnable[0].Name = "/sched/goroutines/runnable:goroutines"
	metrics.Read(g.runnable[:])
	v := g.runnable[0].Value
	return v.Kind() == metrics.KindUint64 && v.Uint64() > 0
}

// threadCPU returns the CPU time the calling thread has used.
func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.RawSyscall(unix.SYS_CLOCK_GETTIME, unix.CLOCK_THREAD_CPUTIME_ID, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// pause sleeps between two scans of a long barrier, waited so far. A
// time.Sleep of 20 µs is not 20 µs when the process has nothing else to
// do: the P's thread then blocks in Go's network poller, whose timeout
// counts whole milliseconds, so a rank whose peer came 3 ms late left the
// barrier up to 1.1 ms after it (GOMAXPROCS=1: time.Sleep(20µs) took
// 1.08-1.10 ms on a 2-core VM), and, the step being a collective, so did
// every rank. A sleep in the kernel (nanosleep) ends on time (plus the
// thread's timer slack; rawNap) but keeps the P, so it is taken only when a
// yield shows that no other goroutine of the process waits for one; when
// one ran in the yield (the backward pass producing the next bucket, on
// one P; a compute worker short of a P, on more), the pause parks in
// time.Sleep, and that work keeps the P.
func (g *Group) pause(waited time.Duration) {
	d := napShort
	if waited > napAfter {
		d = napLong
	}
	if g.offerP() {
		if g.oneP {
			g.lentSeq = g.seq
		}
		if g.paused != nil {
			g.paused(true)
		}
		time.Sleep(d)
		return
	}
	if g.paused != nil {
		g.paused(false)
	}
	ts := unix.NsecToTimespec(d.Nanoseconds())
	if g.oneP && d == napShort {
		rawNap(&ts)
		return
	}
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

// rawNap sleeps ts in the kernel keeping the P, for a rank with one P
// whose yield just showed that nothing else of the process wants it. A
// nanosleep through the runtime's system call path hands the P back:
// sysmon takes it from a thread asleep longer than its 20 µs tick and, one
// P having nothing idle to hand off to, wakes a second thread to look for
// work, on the rank's own core (pinned); that thread often still holds
// the P when the sleep ends, so the rank's goroutine moves to it (a
// 20 µs nap with GOMAXPROCS=1 on one core: 2.4 context switches and a
// change of thread in 6-13% of naps, against 1.0 and none here). The
// thread's timer slack (50 µs by default, which the kernel may add to
// every sleep) is set to 1 µs first: a nap of 20 µs took 100-110 µs on a
// 2-core VM, 44-49 µs with it, and a rank leaves a barrier up to a nap
// after its peer arrived. Long naps (a peer away for milliseconds) go
// through the runtime's path: they hold nothing up.
func rawNap(ts *unix.Timespec) {
	unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_TIMERSLACK, uintptr(napSlack.Nanoseconds()), 0, 0, 0, 0)
	for {
		_, _, e := unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(ts)), uintptr(unsafe.Pointer(ts)), 0)
		if e != unix.EINTR {
			return
		}
	}
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

// Close marks this rank closed (peers waiting on it fail naming it) and
// unmaps the segment once no operation is running.
func (g *Group) Close() error {
	if g.closing.Swap(true) {
		return nil
	}
	g.opMu.Lock()
	defer g.opMu.Unlock()
	if g.mem != nil {
		atomic.StoreUint32(g.status(g.rank), statusClosed)
	}
	g.rv.Close()
	g.unmap()
	return nil
}

func putHeader(b []byte, h collective.Header) {
	b[0], b[1], b[2] = byte(h.Kind), byte(h.DType), byte(h.Op)
	binary.LittleEndian.PutUint32(b[4:], uint32(h.Root))
	binary.LittleEndian.PutUint64(b[8:], uint64(h.Len))
	binary.LittleEndian.PutUint64(b[16:], h.Seq)
}

func getHeader(b []byte) collective.Header {
	return collective.Header{Kind: collective.Kind(b[0]), DType: collective.DType(b[1]), Op: collective.Op(b[2]),
		Root: int(binary.LittleEndian.Uint32(b[4:])), Len: int(binary.LittleEndian.Uint64(b[8:])), Seq: binary.LittleEndian.Uint64(b[16:])}
}

func (g *Group) do(ctx context.Context, kind collective.Kind, send, recv any, op collective.Op, root int) error {
	h, err := collective.Prepare(kind, g.rank, g.size, send, recv, op, root)
	h.Seq = g.seq + 1
	if err != nil {
		return &collective.Error{Backend: "shm", Self: g.rank, Kind: kind, Seq: h.Seq, Peer: -1, Err: err}
	}
	g.seq++
	g.opMu.Lock()
	defer g.opMu.Unlock()
	if g.closing.Load() || g.mem == nil {
		return g.fail(h, -1, collective.ErrClosed)
	}
	if g.broken != nil {
		var e *collective.Error
		errors.As(g.broken, &e)
		return &collective.Error{Backend: "shm", Self: g.rank, Kind: h.Kind, Seq: h.Seq, Peer: e.Peer, Err: e.Err}
	}
	// Publish the header, meet, and compare everyone's.
	putHeader(g.hdr(g.rank, h.Seq), h)
	local := kind == collective.KindAllReduce && localReduce(g.size, h.Len*h.DType.Size())
	if g.fence(kind, local) {
		if err := g.barrier(ctx, h); err != nil {
			return err
		}
	}
	g.tail = tailNone
	if local {
		if err := g.allReduceLocal(ctx, h, send); err != nil {
			return err
		}
		g.tail = tailSlots
		return nil
	}
	if err := g.barrier(ctx, h); err != nil {
		return err
	}
	if err := g.checkHeaders(h); err != nil {
		return err
	}
	switch kind {
	case collective.KindAllReduce:
		g.tail = tailResult
		return g.reduce(ctx, h, send, send, 0, h.Len)
	case collective.KindReduceScatter:
		g.tail = tailResult
		lo := collective.Offset(h.Len, g.size, g.rank)
		return g.reduce(ctx, h, send, recv, lo, lo+collective.BlockLen(h.Len, g.size, g.rank))
	case collective.KindBroadcast:
		return g.broadcast(ctx, h, send)
	case collective.KindAllGather:
		return g.allGather(ctx, h, send, recv)
	}
	return nil
}

// What an operation may still be reading after its last barrier, on a rank
// slower than this one (Group.tail).
const (
	tailNone   = iota
	tailSlots  // peers' slots: the one-barrier all-reduce reduces them after its barrier
	tailResult // the result slot: the blocked reduce copies its result out after its last barrier
)

// fence reports whether an operation must meet the other ranks before its
// first write, which comes before its first barrier: when that write lands
// where a slower rank may still be reading the last operation's data. A
// blocked all-reduce or reduce-scatter writes this rank's whole slot,
// which peers of a one-barrier all-reduce may still be reducing from; a
// broadcast's root and an all-gather write the result slot, which peers of
// a blocked reduce may still be copying out. Every rank runs the same
// operations, so every rank fences the same ones.
func (g *Group) fence(kind collective.Kind, local bool) bool {
	switch g.tail {
	case tailSlots:
		return !local && (kind == collective.KindAllReduce || kind == collective.KindReduceScatter)
	case tailResult:
		return kind == collective.KindBroadcast || kind == collective.KindAllGather
	}
	return false
}

func (g *Group) checkHeaders(h collective.Header) error {
	for q := 0; q < g.size; q++ {
		if err := h.Mismatch(g.rank, q, getHeader(g.hdr(q, h.Seq))); err != nil {
			return g.fail(h, q, err)
		}
	}
	return nil
}

// localBytes is the largest all-reduce, in bytes, that every rank of a group
// of 3 or more reduces whole for itself (see localReduce).
const localBytes = 256 << 10

// localReduce reports whether an all-reduce of the given size over size
// ranks takes the one-barrier path: each rank copies its buffer into its
// slot, and after one barrier reduces every rank's slot, in rank order, into
// its own buffer. It saves the result slot and two of the three barriers of
// a small operation on the blocked path, at the cost of each rank reading
// size buffers instead of one: worth it for 2 ranks at any size (5 buffer
// lengths read and written per rank against 5.5), and for small messages,
// where barriers dominate. Both paths reduce in rank order, so they give
// the same bits.
func localReduce(size, bytes int) bool { return size == 2 || size > 2 && bytes <= localBytes }

// half returns the first n elements of half h of rank r's slot typed like buf.
func (g *Group) half(buf any, r, h, n int) any {
	p := unsafe.Pointer(&g.slotBytes(r)[h*g.slot/2])
	switch buf.(type) {
	case []float32:
		return unsafe.Slice((*float32)(p), n)
	default:
		return unsafe.Slice((*float64)(p), n)
	}
}

// allReduceLocal is the one-barrier all-reduce (see localReduce), in rounds
// of half a slot. A round writes the half of its phase's parity: a rank
// reaches the next round's barrier only once every rank has left this
// round's reads, so a writer is never more than one half ahead of a reader.
// The header is checked after the first round's barrier, before any peer
// data is read. The reduction after the last barrier reads the peers'
// slots while a faster peer may have gone on to its next operation: one
// that writes its whole slot before its first barrier (a blocked
// all-reduce or reduce-scatter) meets the others first (fence).
func (g *Group) allReduceLocal(ctx context.Context, h collective.Header, buf any) error {
	per := g.slot / 2 / h.DType.Size()
	if g.size == 2 && h.Len > 0 && h.Len <= per {
		return g.allReducePair(ctx, h, buf)
	}
	for off, first := 0, true; first || off < h.Len; off, first = off+per, false {
		c := min(per, h.Len-off)
		half := int((g.phase + 1) & 1)
		mine := collective.Sub(buf, off, off+c)
		collective.Copy(g.half(buf, g.rank, half, c), mine)
		if err := g.barrier(ctx, h); err != nil {
			return err
		}
		if first {
			if err := g.checkHeaders(h); err != nil {
				return err
			}
		}
		if c == 0 {
			continue
		}
		collective.ReduceToAny(mine, g.half(buf, 0, half, c), g.half(buf, 1, half, c), h.Op)
		for q := 2; q < g.size; q++ {
			collective.ReduceAny(mine, g.half(buf, q, half, c), h.Op)
		}
		if h.Op == collective.Mean {
			collective.ScaleAny(mine, g.size)
		}
	}
	return nil
}

// pairChunk is the bytes allReducePair reduces before it copies them into
// its slot: they are still in the core's L1 cache.
const pairChunk = 8 << 10

// pairSplitBytes is the smallest two-rank all-reduce, in bytes, whose ranks
// split the reduction between them when they run on cores of their own (see
// allReducePair). Two threads bound to the two cores of a Zen 3 host,
// spinning on the counters, took 36 µs for 256 KiB when each reduced both
// parts against 17 µs split, 16 against 11 µs at 128 KiB, 8 against 7 at
// 64 KiB and 1.5 against 1.2 µs at 8 KiB, where the second barrier a split
// costs weighs more once a rank has to wait for it.
const pairSplitBytes = 64 << 10

// pairLentOps is how many operations after a barrier lent this rank's P to
// another goroutine its two-rank all-reduces publish whole parts, not half
// (see allReducePair).
const pairLentOps = 64

// allReducePair is the all-reduce of two ranks in one round (up to half a
// slot), in one of three ways that give the bits of the same rank-order
// reduction.
//
// Split (pairSplitBytes or more, the ranks on cores of their own): each
// rank owns half of the elements (rank 0 the first, cut at a cache line).
// It copies the other half of its buffer into its slot, and after a
// barrier reduces its own half, its buffer's and the peer's slot's in rank
// order, into its buffer and, a chunk at a time from L1, into its slot;
// after a second barrier it copies the peer's half of the result out of
// the peer's slot. Each rank reads and writes 4 buffer lengths in place of
// 5, and on two cores they work at once: the peer's part and the result
// cross between the cores once each, half of each a rank.
//
// Whole (smaller messages, or a peer that last ran on this rank's core,
// or whose core is not known yet): the rank copies its whole buffer into
// its slot (wholeWord says so). A rank that finds its peer's whole part
// already published (the peer came first) reduces both parts, in rank
// order, into its buffer and a chunk at a time into its own slot, marks it
// a result (resultWord) and passes the barrier at once; the peer, waiting
// there, copies the result out instead of reducing: one copy in, one
// reduction and one copy out between them instead of two copies in and two
// reductions, which halves the work of two ranks that take turns on one
// core. Both ranks cannot find the other first: a rank publishes its part
// (its counter) only after it has looked.
//
// Ranks that come together, both with whole parts, both reduce both slots
// into their buffers after the one barrier; from pairSplitBytes on, when
// either published half, both split (a whole part holds the half the peer
// needs). The split's second barrier skips a phase: after it a rank still
// reads the peer's slot half of this operation, which the peer's next
// operation must not write (it writes the half of the next phase's
// parity).
//
// A rank whose P was lent to another goroutine in a barrier of the last
// pairLentOps operations publishes whole parts: with GOMAXPROCS=1 and a
// training's backward pass running beside the reduction (ddp's overlap),
// a rank's part of the split waits for the P after each barrier, and the
// split's second meeting can cost a backward op's time, where a rank that
// comes later reducing for both leaves the first only a copy out. (A guard
// by reasoning: pinned ddp training on 2 cores measured no slower with the
// split, whose buckets ran after the backward pass; bench/RESULTS.md.)
func (g *Group) allReducePair(ctx context.Context, h collective.Header, buf any) error {
	peer := 1 - g.rank
	target := g.phase + 1
	half := int(target & 1)
	n := h.Len
	bytes := n * h.DType.Size()
	whole := bytes < pairSplitBytes || g.lentSeq != 0 && g.seq-g.lentSeq <= pairLentOps || g.pairWhole(peer)
	if atomic.LoadUint64(g.counter(peer)) >= target && atomic.LoadUint64(g.wholeWord(peer)) == target &&
		h.Mismatch(g.rank, peer, getHeader(g.hdr(peer, h.Seq))) == nil {
		theirs, out := g.half(buf, peer, half, n), g.half(buf, g.rank, half, n)
		g.reduceOwn(buf, theirs, out, 0, n, h)
		atomic.StoreUint64(g.resultWord(g.rank), target)
		return g.barrier(ctx, h) // the peer is there: passes at once
	}
	// This rank's elements of a split, [lo, hi), and the peer's.
	split := pairSplit(n, h.DType.Size())
	lo, hi, plo, phi := 0, split, split, n
	if g.rank == 1 {
		lo, hi, plo, phi = split, n, 0, split
	}
	mine := g.half(buf, g.rank, half, n)
	if whole {
		collective.Copy(mine, buf)
		atomic.StoreUint64(g.wholeWord(g.rank), target)
	} else {
		collective.Copy(collective.Sub(mine, plo, phi), collective.Sub(buf, plo, phi))
	}
	if err := g.barrier(ctx, h); err != nil {
		return err
	}
	if err := g.checkHeaders(h); err != nil {
		return err
	}
	if atomic.LoadUint64(g.resultWord(peer)) == target {
		collective.Copy(buf, g.half(buf, peer, half, n))
		return nil
	}
	// A peer that published its whole part and does not split may have gone
	// on to its next operation and published the next whole part by now:
	// at least target says whole (a peer that published half waits for
	// this rank at the split's second barrier, and cannot).
	if bytes < pairSplitBytes || whole && atomic.LoadUint64(g.wholeWord(peer)) >= target {
		collective.ReduceToAny(buf, g.half(buf, 0, half, n), g.half(buf, 1, half, n), h.Op)
		if h.Op == collective.Mean {
			collective.ScaleAny(buf, 2)
		}
		return nil
	}
	theirs := g.half(buf, peer, half, n)
	g.reduceOwn(buf, theirs, mine, lo, hi, h)
	g.phase++ // the skipped phase (see above)
	if err := g.barrier(ctx, h); err != nil {
		return err
	}
	collective.Copy(collective.Sub(buf, plo, phi), collective.Sub(theirs, plo, phi))
	return nil
}

// reduceOwn reduces elements [lo, hi) of buf (this rank's part) and theirs
// (the peer's) in rank order, by h's op, into buf, and copies them, a chunk at a time
// while they are in L1, into out.
func (g *Group) reduceOwn(buf, theirs, out any, lo, hi int, h collective.Header) {
	op, step := h.Op, pairChunk/h.DType.Size()
	for a := lo; a < hi; a += step {
		b := min(a+step, hi)
		m, t := collective.Sub(buf, a, b), collective.Sub(theirs, a, b)
		if g.rank == 0 {
			collective.ReduceToAny(m, m, t, op)
		} else {
			collective.ReduceToAny(m, t, m, op)
		}
		if op == collective.Mean {
			collective.ScaleAny(m, 2)
		}
		collective.Copy(collective.Sub(out, a, b), m)
	}
}

// pairSplit is the first element of rank 1's half of a split two-rank
// all-reduce of n elements of esz bytes: half of them, cut at a 64-byte
// line so that the ranks' halves share no line of a slot.
func pairSplit(n, esz int) int {
	line := 64 / esz
	return n / 2 / line * line
}

// pairWhole reports whether this rank publishes its whole part for a split
// all-reduce (see allReducePair): when the peer last ran on this rank's
// core, or its core is not known yet. It publishes this rank's core.
func (g *Group) pairWhole(peer int) bool {
	mine := g.cpu() + 1
	atomic.StoreUint32(g.cpuWord(g.rank), mine)
	p := atomic.LoadUint32(g.cpuWord(peer))
	return p == 0 || p == mine
}

// view returns the first n elements of shared slot r typed like buf.
func (g *Group) view(buf any, r, n int) any {
	p := unsafe.Pointer(&g.slotBytes(r)[0])
	switch buf.(type) {
	case []float32:
		return unsafe.Slice((*float32)(p), n)
	default:
		return unsafe.Slice((*float64)(p), n)
	}
}

// reduce combines send across ranks round by round; out receives elements
// [outLo, outHi) of the result (the whole buffer for all-reduce, this rank's
// block for reduce-scatter; out == send for all-reduce, in place).
func (g *Group) reduce(ctx context.Context, h collective.Header, send, out any, outLo, outHi int) error {
	esz := h.DType.Size()
	per := g.slot / esz
	for off := 0; off < h.Len; off += per {
		c := min(per, h.Len-off)
		collective.Copy(g.view(send, g.rank, c), collective.Sub(send, off, off+c))
		if err := g.barrier(ctx, h); err != nil {
			return err
		}
		// This rank reduces its block of the round, in rank order, into the
		// result slot.
		blo := collective.Offset(c, g.size, g.rank)
		bhi := blo + collective.BlockLen(c, g.size, g.rank)
		if bhi > blo {
			res := collective.Sub(g.view(send, g.size, c), blo, bhi)
			collective.Copy(res, collective.Sub(g.view(send, 0, c), blo, bhi))
			for q := 1; q < g.size; q++ {
				collective.ReduceAny(res, collective.Sub(g.view(send, q, c), blo, bhi), h.Op)
			}
			if h.Op == collective.Mean {
				collective.ScaleAny(res, g.size)
			}
		}
		if err := g.barrier(ctx, h); err != nil {
			return err
		}
		lo, hi := max(off, outLo), min(off+c, outHi)
		if lo < hi {
			collective.Copy(collective.Sub(out, lo-outLo, hi-outLo), collective.Sub(g.view(send, g.size, c), lo-off, hi-off))
		}
	}
	return nil
}

func (g *Group) broadcast(ctx context.Context, h collective.Header, buf any) error {
	per := g.slot / h.DType.Size()
	for off := 0; off < h.Len; off += per {
		c := min(per, h.Len-off)
		if g.rank == h.Root {
			collective.Copy(g.view(buf, g.size, c), collective.Sub(buf, off, off+c))
		}
		if err := g.barrier(ctx, h); err != nil {
			return err
		}
		if g.rank != h.Root {
			collective.Copy(collective.Sub(buf, off, off+c), g.view(buf, g.size, c))
		}
		if err := g.barrier(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

func (g *Group) allGather(ctx context.Context, h collective.Header, send, recv any) error {
	per := g.slot / h.DType.Size()
	mlo := collective.Offset(h.Len, g.size, g.rank)
	mhi := mlo + collective.BlockLen(h.Len, g.size, g.rank)
	for off := 0; off < h.Len; off += per {
		c := min(per, h.Len-off)
		if lo, hi := max(off, mlo), min(off+c, mhi); lo < hi {
			collective.Copy(collective.Sub(g.view(recv, g.size, c), lo-off, hi-off), collective.Sub(send, lo-mlo, hi-mlo))
		}
		if err := g.barrier(ctx, h); err != nil {
			return err
		}
		collective.Copy(collective.Sub(recv, off, off+c), g.view(recv, g.size, c))
		if err := g.barrier(ctx, h); err != nil {
			return err
		}
	}
	return nil
}
