//go:build linux

package netns_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fulgur-ml/fulgur/deploy/netns"
)

// inNS runs f on an OS thread inside namespace ns: a socket keeps the
// namespace it was made in, whichever thread uses it later.
func inNS(ns string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread, in ns, ends with the goroutine
		nsfd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(nsfd)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("enter %s: %w", ns, err)
			return
		}
		done <- f()
	}()
	return <-done
}

// udpIn opens a UDP socket inside namespace ns, bound to addr:port.
func udpIn(t *testing.T, ns, addr string, port int) int {
	t.Helper()
	fd := -1
	err := inNS(ns, func() (err error) {
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: netip.MustParseAddr(addr).As4()}); err != nil {
			return fmt.Errorf("bind %s:%d in %s: %w", addr, port, ns, err)
		}
		return nil
	})
	if fd >= 0 {
		t.Cleanup(func() { unix.Close(fd) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// datagram is one the receiver got: its sequence number, when the
// sender sent it and when node 1's stack received it (the kernel's
// timestamp: when the relay handed it over), both on the wall clock
// the two nodes share.
type datagram struct {
	seq      uint64
	sent, in time.Time
}

// receiveAll reads datagrams on fd (with SO_TIMESTAMPNS) until want
// arrived or none came for quiet. A datagram the socket itself dropped
// (its buffer full: the test fell behind) is an error, not the relay's
// loss.
func receiveAll(fd, want int, quiet time.Duration) ([]datagram, error) {
	for _, o := range [][2]int{{unix.SO_TIMESTAMPNS, 1}, {unix.SO_RXQ_OVFL, 1}, {unix.SO_RCVBUFFORCE, 8 << 20}} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], o[1]); err != nil {
			return nil, err
		}
	}
	tv := unix.NsecToTimeval(int64(quiet))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, err
	}
	var got []datagram
	buf, oob := make([]byte, 64), make([]byte, 128)
	for len(got) < want {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return got, nil
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return got, fmt.Errorf("receive on node 1: %w", err)
		}
		if n != 16 {
			continue
		}
		d := datagram{seq: binary.LittleEndian.Uint64(buf), sent: time.Unix(0, int64(binary.LittleEndian.Uint64(buf[8:])))}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return got, err
		}
		for _, m := range msgs {
			switch {
			case m.Header.Level != unix.SOL_SOCKET:
			case m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})):
				ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
				d.in = time.Unix(ts.Unix())
			case m.Header.Type == unix.SO_RXQ_OVFL && len(m.Data) >= 4:
				if n := binary.NativeEndian.Uint32(m.Data); n > 0 {
					return got, fmt.Errorf("node 1's socket dropped %d datagrams: the test's receiver fell behind", n)
				}
			}
		}
		if d.in.IsZero() {
			return got, fmt.Errorf("datagram %d came without the kernel's receive time", d.seq)
		}
		got = append(got, d)
	}
	return got, nil
}

// link is two nodes and a UDP socket on each: tx on node 0 sends to
// rx on node 1.
type link struct {
	p      *netns.Pair
	tx, rx int
	port   int
}

// udpLink brings two nodes up with c, for the test's time.
func udpLink(t *testing.T, c netns.Config) *link {
	t.Helper()
	needRoot(t)
	p, err := netns.Up(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	const port = 7311
	return &link{p: p, rx: udpIn(t, p.NS[1], p.Addr[1], port), tx: udpIn(t, p.NS[0], p.Addr[0], 0), port: port}
}

// warmUp sends datagrams from tx until one reaches rx (the first waits
// for ARP, and a lossy link drops some), then reads the stragglers, and
// returns the next sequence number.
func (l *link) warmUp(t *testing.T) uint64 {
	t.Helper()
	var next uint64
	for i := 0; ; i++ {
		next = sendTrains(t, l.tx, l.p.Addr[1], l.port, next, 1, 1, 0, 0)
		got, err := receiveAll(l.rx, 1, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			break
		}
		if i == 200 {
			t.Fatal("no datagram reached node 1 in 10 s")
		}
	}
	if _, err := receiveAll(l.rx, 1<<20, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	return next
}

// exchange sends trains of datagrams from node 0 to node 1 while node
// 1 receives them, and returns those received.
func (l *link) exchange(t *testing.T, first uint64, trains, perTrain int, gap time.Duration, quiet time.Duration) []datagram {
	t.Helper()
	var got []datagram
	var err error
	done := make(chan struct{})
	go func() { defer close(done); got, err = receiveAll(l.rx, trains*perTrain, quiet) }()
	sendTrains(t, l.tx, l.p.Addr[1], l.port, first, trains, perTrain, gap, time.Millisecond)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// sendTrains sends trains datagrams of perTrain each from fd to node 1,
// numbered from first, spaced by gap within a train (later ones arrive
// at the relay while earlier ones wait their delay there) and a pause
// between trains. Each carries its number and its send time.
func sendTrains(t *testing.T, fd int, to string, port int, first uint64, trains, perTrain int, gap, pause time.Duration) uint64 {
	t.Helper()
	sa := &unix.SockaddrInet4{Port: port, Addr: netip.MustParseAddr(to).As4()}
	b := make([]byte, 16)
	seq := first
	for range trains {
		for range perTrain {
			binary.LittleEndian.PutUint64(b, seq)
			binary.LittleEndian.PutUint64(b[8:], uint64(time.Now().UnixNano()))
			if err := unix.Sendto(fd, b, 0, sa); err != nil {
				t.Fatalf("send datagram %d from node 0: %v", seq, err)
			}
			seq++
			// Spin: a sleep this short lasts far longer.
			for t0 := time.Now(); time.Since(t0) < gap; {
			}
		}
		time.Sleep(pause)
	}
	return seq
}

// Every frame waits at least the link's delay from the moment it reached
// the relay (after the sender sent it) to the moment the receiving stack
// took it (after the relay sent it), and the frames of one direction
// leave in the order they came, also when later frames of a train reach
// the relay while earlier ones still wait there.
func TestRelayDelaysEveryFrameAndKeepsTheirOrder(t *testing.T) {
	for _, c := range []struct {
		name  string
		delay time.Duration
	}{
		{"a data-centre link", 300 * time.Microsecond},
		// Longer than the relay sleeps with frames queued: it wakes to
		// take arrivals in before the head is due.
		{"a WAN link", 3 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := udpLink(t, netns.Config{Delay: c.delay})
			first := l.warmUp(t)
			const trains, perTrain = 25, 16
			got := l.exchange(t, first, trains, perTrain, 40*time.Microsecond, 2*time.Second)
			if len(got) != trains*perTrain {
				t.Fatalf("node 1 received %d of %d datagrams on a link without loss", len(got), trains*perTrain)
			}
			early := 0
			for i, d := range got {
				if want := first + uint64(i); d.seq != want {
					t.Fatalf("datagram %d arrived %dth: out of order (the relay must keep each direction's order)", d.seq, i)
				}
				if lat := d.in.Sub(d.sent); lat < c.delay {
					if early++; early <= 5 {
						t.Errorf("datagram %d took %v from node 0's send to node 1's receive, less than the link's %v delay", d.seq, lat, c.delay)
					}
				}
			}
			if early > 0 {
				t.Errorf("%d of %d datagrams beat the delay", early, len(got))
			}
		})
	}
}

// The relay's counts account for every frame it lost: each datagram that
// did not arrive is one the relay dropped, and it dropped no more than
// those and the other frames it carried.
func TestRelayCountsTheFramesItDrops(t *testing.T) {
	l := udpLink(t, netns.Config{Delay: 100 * time.Microsecond, Loss: 0.25})
	next := l.warmUp(t)
	before := l.p.Relay.Stats()
	const trains, perTrain = 40, 25
	got := l.exchange(t, next, trains, perTrain, 20*time.Microsecond, 500*time.Millisecond)
	st := l.p.Relay.Stats().Since(before)
	sent := int64(trains * perTrain)
	lost := sent - int64(len(got))
	if lost <= 0 || lost > sent/2 {
		t.Errorf("%d of %d datagrams lost on a link that drops 25%% of frames", lost, sent)
	}
	if st.Frames < sent {
		t.Errorf("the relay counted %d frames, fewer than the %d datagrams sent", st.Frames, sent)
	}
	// Frames other than the datagrams (ARP, IPv6 neighbour discovery)
	// may have crossed or been dropped too.
	if others := st.Frames - sent; st.Dropped < lost || st.Dropped > lost+others {
		t.Errorf("the relay counted %d dropped of %d frames; %d of the %d datagrams were lost (and %d other frames crossed)", st.Dropped, st.Frames, lost, sent, others)
	}
}
