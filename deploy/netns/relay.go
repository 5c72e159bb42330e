package netns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const ethPAll = 0x0003 // ETH_P_ALL

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Relay copies frames between two interfaces of the caller's namespace,
// delaying or dropping them.
type Relay struct {
	fds      [2]int
	delay    time.Duration
	loss     float64 // fraction of frames dropped
	cut      atomic.Bool
	stop     atomic.Bool
	wg       sync.WaitGroup
	frames   atomic.Int64
	dropped  atomic.Int64
	late     atomic.Int64 // nanoseconds frames left after their due time, summed
	errMu    sync.Mutex
	firstErr error
}

func openPacket(ifname string) (int, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return -1, err
	}
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, int(htons(ethPAll)))
	if err != nil {
		return -1, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(ethPAll), Ifindex: ifi.Index}); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("bind to %s: %w", ifname, err)
	}
	// A burst of a TCP window must fit while the relay is not running: a
	// small buffer drops frames and TCP backs off. FORCE passes rmem_max
	// (we are root); the plain option is the fallback.
	if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 8<<20) != nil {
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<20)
	}
	tv := syscall.NsecToTimeval(int64(100 * time.Millisecond))
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	return fd, nil
}

func newRelay(a, b string, delay time.Duration, loss float64) (*Relay, error) {
	r := &Relay{delay: delay, loss: loss}
	var err error
	if r.fds[0], err = openPacket(a); err != nil {
		return nil, err
	}
	if r.fds[1], err = openPacket(b); err != nil {
		syscall.Close(r.fds[0])
		return nil, err
	}
	for i := range 2 {
		r.wg.Add(1)
		go r.copy(r.fds[i], r.fds[1-i])
	}
	return r, nil
}

type frame struct {
	due time.Time
	b   []byte
}

func (r *Relay) fail(err error) {
	r.errMu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.errMu.Unlock()
}

func (r *Relay) copy(from, to int) {
	defer r.wg.Done()
	q := make(chan frame, 1<<16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range q {
			r.wait(f.due) // the frame's delay
			r.late.Add(int64(time.Since(f.due)))
			if _, err := syscall.Write(to, f.b); err != nil && !errors.Is(err, syscall.ENOBUFS) {
				r.fail(fmt.Errorf("relay write (%d bytes): %w", len(f.b), err))
			}
		}
	}()
	buf := make([]byte, 1<<16)
	for !r.stop.Load() {
		n, from, err := syscall.Recvfrom(from, buf, 0)
		if err != nil {
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
				continue
			}
			r.fail(fmt.Errorf("relay read: %w", err))
			break
		}
		if ll, ok := from.(*syscall.SockaddrLinklayer); ok && ll.Pkttype == 4 { // PACKET_OUTGOING: our own writes
			continue
		}
		r.frames.Add(1)
		if r.cut.Load() || (r.loss > 0 && rand.Float64() < r.loss) {
			r.dropped.Add(1)
			continue
		}
		b := append([]byte(nil), buf[:n]...)
		fixTCPChecksum(b)
		select {
		case q <- frame{due: time.Now().Add(r.delay), b: b}:
		default:
			r.dropped.Add(1) // a full queue drops, as a router's would
		}
	}
	close(q)
	<-done
}

// spinBelow is how close to a frame's due time the relay stops sleeping
// and polls the clock, for delays under spinDelays: a sleep overshoots by
// 50 µs to milliseconds, as much as a data-centre link's whole delay. It
// spins only while a frame waits, so an idle link costs nothing; longer
// delays (a WAN's tens of milliseconds) only sleep, as the overshoot is
// small beside them.
const (
	spinBelow  = time.Millisecond
	spinDelays = 5 * time.Millisecond
)

// wait returns at due, or at once when due has passed.
func (r *Relay) wait(due time.Time) {
	d := time.Until(due)
	if r.delay >= spinDelays {
		if d > 0 {
			time.Sleep(d)
		}
		return
	}
	if d > spinBelow {
		time.Sleep(d - spinBelow)
	}
	for time.Now().Before(due) {
		runtime.Gosched()
	}
}

// fixTCPChecksum fills in the TCP checksum of an IPv4 frame: a veth
// leaves it to the receiver's offload (the sender computed only the
// pseudo-header's part), which a frame re-sent through a packet socket
// does not get.
func fixTCPChecksum(f []byte) {
	if len(f) < 14+20 || f[12] != 0x08 || f[13] != 0x00 {
		return
	}
	ip := f[14:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(ip[2])<<8 | int(ip[3])
	if ip[9] != 6 || ihl < 20 || total > len(ip) || total < ihl+20 {
		return
	}
	seg := ip[ihl:total]
	seg[16], seg[17] = 0, 0
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(ip[12:20]) // source and destination addresses
	sum += 6 + uint32(len(seg))
	add(seg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	seg[16], seg[17] = byte(c>>8), byte(c)
}

// Cut drops every frame from now on: a partition.
func (r *Relay) Cut() { r.cut.Store(true) }

// Frames is how many frames reached the relay; Dropped how many of them
// it dropped (loss, a cut or a full queue).
func (r *Relay) Frames() int64  { return r.frames.Load() }
func (r *Relay) Dropped() int64 { return r.dropped.Load() }

// RelayStats are the relay's counts since it started.
type RelayStats struct {
	Frames, Dropped int64
	// Late is the time frames left the relay after their due time,
	// summed: the sleep's overshoot and the wait behind earlier frames.
	// A frame's real delay is Config.Delay plus its share of this.
	Late time.Duration
}

// Stats reads the counts (each exact, not all at one instant).
func (r *Relay) Stats() RelayStats {
	return RelayStats{Frames: r.frames.Load(), Dropped: r.dropped.Load(), Late: time.Duration(r.late.Load())}
}

// Since is what happened after the counts in before.
func (s RelayStats) Since(before RelayStats) RelayStats {
	return RelayStats{Frames: s.Frames - before.Frames, Dropped: s.Dropped - before.Dropped, Late: s.Late - before.Late}
}

// MeanLate is the mean time frames left after their due time; 0 with no
// frame relayed.
func (s RelayStats) MeanLate() time.Duration {
	if n := s.Frames - s.Dropped; n > 0 {
		return s.Late / time.Duration(n)
	}
	return 0
}

// close stops the copying and returns the first error it met.
func (r *Relay) close() error {
	if !r.stop.CompareAndSwap(false, true) {
		return nil
	}
	r.wg.Wait()
	syscall.Close(r.fds[0])
	syscall.Close(r.fds[1])
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.firstErr
}
