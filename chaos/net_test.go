//go:build chaos

package chaos_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The network faults run the two ranks as two "machines": network
// namespaces of their own, each with one end of a veth pair. The other
// ends stay in this process's namespace, where a relay copies Ethernet
// frames between them through AF_PACKET sockets, delaying or dropping them
// as the fault asks: tc netem's job, done here because kernels without
// sch_netem (CONFIG_NET_SCH_NETEM, absent on some CI kernels) are common.

const ethPAll = 0x0003 // ETH_P_ALL

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// relay copies frames between two interfaces of this namespace.
type relay struct {
	fds      [2]int
	delay    time.Duration
	loss     float64 // fraction of frames dropped
	cut      atomic.Bool
	stop     atomic.Bool
	wg       sync.WaitGroup
	frames   atomic.Int64
	dropped  atomic.Int64
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
	tv := syscall.NsecToTimeval(int64(100 * time.Millisecond))
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	return fd, nil
}

func newRelay(a, b string, delay time.Duration, loss float64) (*relay, error) {
	r := &relay{delay: delay, loss: loss}
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

func (r *relay) fail(err error) {
	r.errMu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.errMu.Unlock()
}

func (r *relay) copy(from, to int) {
	defer r.wg.Done()
	q := make(chan frame, 1<<16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range q {
			if d := time.Until(f.due); d > 0 {
				time.Sleep(d) // the frame's delay
			}
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

func (r *relay) close() error {
	r.stop.Store(true)
	r.wg.Wait()
	syscall.Close(r.fds[0])
	syscall.Close(r.fds[1])
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.firstErr
}

var netSeq atomic.Int32

// twoNodes makes two network namespaces, each with a veth whose other end
// is in this namespace, addresses 10.231.N.1 and .2, and a relay between
// the outer ends. It returns the namespaces, the inner interface names, the
// addresses and the relay.
type nodes struct {
	ns, dev, addr [2]string
	relay         *relay
}

func twoNodes(t *testing.T, delay time.Duration, loss float64) *nodes {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the network faults make network namespaces, which needs root (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("ip (iproute2) makes the namespaces: %v", err)
	}
	k := netSeq.Add(1)
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, k)
	var n nodes
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	outer := [2]string{}
	for i := range 2 {
		n.ns[i] = fmt.Sprintf("fulgur-chaos%s-%d", id, i)
		n.dev[i] = fmt.Sprintf("fc%s%c", id, 'a'+i)
		outer[i] = n.dev[i] + "o"
		n.addr[i] = fmt.Sprintf("10.231.%d.%d", k%250, i+1)
		ns, dev, out := n.ns[i], n.dev[i], outer[i]
		ip("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		ip("link", "add", dev, "type", "veth", "peer", "name", out)
		t.Cleanup(func() { exec.Command("ip", "link", "del", out).Run() })
		// Frames of at most the MTU, so that the relay can write each one.
		for _, d := range []string{dev, out} {
			ip("link", "set", d, "gso_max_size", "1500", "gro_max_size", "1500")
		}
		ip("link", "set", dev, "netns", ns)
		ip("-n", ns, "link", "set", "lo", "up")
		ip("-n", ns, "addr", "add", n.addr[i]+"/24", "dev", dev)
		ip("-n", ns, "link", "set", dev, "up")
		ip("link", "set", out, "up")
	}
	r, err := newRelay(outer[0], outer[1], delay, loss)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.close(); err != nil {
			t.Errorf("the relay: %v", err)
		}
	})
	n.relay = r
	return &n
}

// rank starts rank i of a two-node job in node i.
func (n *nodes) rank(t *testing.T, marker string, i, port int, token string, env []string, args ...string) *job {
	env = append([]string{"RANK=" + strconv.Itoa(i), "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1",
		"NODE_RANK=" + strconv.Itoa(i), "MASTER_ADDR=" + n.addr[0], "MASTER_PORT=" + strconv.Itoa(port),
		"FULGUR_TOKEN=" + token, "FULGUR_SOCKET_IFNAME=" + n.dev[i]}, env...)
	return startVia(t, []string{"ip", "netns", "exec", n.ns[i]}, marker, env, args...)
}

// TestNetworkFaults: the two ranks on two "machines" joined by a link
// that is clean, lossy and slow, or cut mid-training.
func TestNetworkFaults(t *testing.T) {
	want := baseline(t)
	var clean time.Duration
	t.Run("clean link", func(t *testing.T) { clean = netRun(t, want, 0, 0, 0) })
	t.Run("loss and delay", func(t *testing.T) { netRun(t, want, 50*time.Millisecond, 0.01, clean) })
	t.Run("partition", func(t *testing.T) { partition(t, want) })
}

// netRun trains the job across the link and returns how long it took.
func netRun(t *testing.T, want string, delay time.Duration, loss float64, clean time.Duration) time.Duration {
	r := row{section: sectionNet, fault: "none: the same job through the relay (the reference for the slowdown)",
		phase: "whole job", timeToError: "-"}
	if delay > 0 {
		r.fault = fmt.Sprintf("%.0f%% of frames dropped and %v added each way, both directions", loss*100, delay)
	}
	defer recordRow(t, &r)
	n := twoNodes(t, delay, loss)
	marker, token, port := newMarker(t), hex.EncodeToString([]byte(newMarker(t))), 29500
	began := time.Now()
	js := []*job{n.rank(t, marker, 0, port, token, nil, "-root", t.TempDir()), n.rank(t, marker, 1, port, token, nil, "-root", t.TempDir())}
	for i, j := range js {
		if !j.wait(t, 5*time.Minute) {
			r.outcome = "hang"
			return 0
		}
		if j.err != nil {
			t.Errorf("rank %d failed: %v\n%s", i, j.err, j.stderr.String())
			r.outcome = "rank " + strconv.Itoa(i) + " failed: " + trimProgram(lastLine(j.stderr.String()))
			return 0
		}
	}
	end := js[0].ended
	if js[1].ended.After(end) {
		end = js[1].ended
	}
	took := end.Sub(began)
	r.outcome = fmt.Sprintf("completes in %.1fs", took.Seconds())
	if clean > 0 {
		r.outcome += fmt.Sprintf(", %.1f× the clean link's %.1fs", took.Seconds()/clean.Seconds(), clean.Seconds())
	}
	checked := []string{fmt.Sprintf("%d frames relayed, %d dropped", n.relay.frames.Load(), n.relay.dropped.Load())}
	if got := js[0].result(t).SHA256; got != want {
		t.Errorf("weights %s across the link, undisturbed %s", got, want)
		checked = append(checked, "OTHER weights")
	} else {
		checked = append(checked, "weights = undisturbed run's")
	}
	r.checked = strings.Join(checked, "; ")
	return took
}

// partition cuts the link while rank 1 is held in a training step: every
// rank must end with an error within the timeout.
func partition(t *testing.T, want string) {
	r := row{section: sectionNet, fault: "partition: the link drops every frame from then on", phase: phaseNames["forward"]}
	defer recordRow(t, &r)
	n := twoNodes(t, 0, 0)
	marker, token, port, holdDir := newMarker(t), hex.EncodeToString([]byte(newMarker(t))), 29500, t.TempDir()
	root := t.TempDir()
	hold := []string{holdEnv + "=forward 1 " + holdDir}
	js := []*job{n.rank(t, marker, 0, port, token, hold, "-root", root), n.rank(t, marker, 1, port, token, hold, "-root", t.TempDir())}
	if !waitFile(t, js[1], filepath.Join(holdDir, "reached"), 5*time.Minute) {
		r.outcome = "phase not reached"
		return
	}
	n.relay.cut.Store(true)
	injected := time.Now()
	os.WriteFile(filepath.Join(holdDir, "go"), nil, 0o644)
	var outcomes []string
	var last time.Time
	for i, j := range js {
		if !j.wait(t, timeout+margin+timeout) {
			r.outcome = "hang"
			return
		}
		if j.ended.After(last) {
			last = j.ended
		}
		if j.err == nil {
			t.Errorf("rank %d succeeded across a partition", i)
			outcomes = append(outcomes, fmt.Sprintf("rank %d SUCCEEDED", i))
			continue
		}
		msg := lastLine(j.stderr.String())
		if other := "rank " + strconv.Itoa(1-i); !strings.Contains(msg, other) {
			t.Errorf("rank %d's error does not name %s:\n%s", i, other, j.stderr.String())
		}
		if d := j.ended.Sub(injected); d > timeout+margin {
			t.Errorf("rank %d's error came %v after the partition, past the timeout %v + %v", i, d, timeout, margin)
		}
		outcomes = append(outcomes, fmt.Sprintf("rank %d: %s", i, trimProgram(strings.ReplaceAll(msg, root, "ROOT"))))
	}
	r.outcome = "error on both ranks; " + strings.Join(outcomes, "; ")
	r.timeToError = last.Sub(injected).Round(10 * time.Millisecond).String()
	if left := survivors(marker, timeout+5*time.Second); len(left) > 0 {
		t.Errorf("processes %v of the job outlived it", left)
	}
	if p := findFile(root, "last.ckpt"); p != "" {
		r.checked = checkResume(t, p, want)
	}
}
