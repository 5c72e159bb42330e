package tcp

import (
	"context"
	"math"
	"net"
	"testing"
	"time"
	"unsafe"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/wire"
	"github.com/rs/zerolog"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// A frame whose header arrives just before the read deadline gets a fresh
// deadline for its payload: the peer is alive. Before, the payload read ran
// under the deadline set before the header, so a frame that straddled it
// failed, blaming a live rank "waiting for abort" or "waiting for data"
// (TestSilentPeer failed so, 1 run in 10, on a loaded machine).
func TestFrameStraddlingTheDeadline(t *testing.T) {
	const timeout = 2 * time.Second
	nop := zerolog.Nop()
	cfg := Config{Rank: 1, Size: 2, Timeout: timeout, Logger: &nop, SmallBytes: -1} // the ring's frames, below
	cfg.setRingDefaults()
	next, nextPeer := tcpPair(t)
	prev, prevPeer := tcpPair(t)
	go func() { // rank 0's sends arrive at prevPeer's other end; drain ours
		buf := make([]byte, 1024)
		for {
			if _, err := nextPeer.Read(buf); err != nil {
				return
			}
		}
	}()
	sc := make([]float64, cfg.SegmentBytes/8)
	g := &Ring{cfg: cfg, rank: 1, size: 2, hb: make([]byte, wire.HeaderSize), whb: make([]byte, 2*wire.HeaderSize),
		scratch: unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(sc))), len(sc)*8), brokenCh: make(chan struct{}), readerDone: make(chan struct{})}
	g.attach(next, prev)

	// Rank 0's side of an all-reduce of two float32 (its values 10 and 20):
	// rank 1 receives block 1 to reduce, then the reduced block 0.
	f32 := func(v float32) []byte {
		b := make([]byte, 4)
		*(*uint32)(unsafe.Pointer(&b[0])) = math.Float32bits(v)
		return b
	}
	data := func(p []byte) []byte { return wire.ControlFrame(wire.KindData, 0, 1, p) }
	go func() {
		oh := wire.OpHeader{Kind: uint8(collective.KindAllReduce), DType: uint8(collective.Float32), Op: uint8(collective.Sum), Length: 2}
		prevPeer.Write(wire.ControlFrame(wire.KindOp, 0, 1, oh.Encode()))
		first := data(f32(20))
		time.Sleep(timeout * 7 / 10)
		prevPeer.Write(first[:wire.HeaderSize]) // the header before the deadline ...
		time.Sleep(timeout * 6 / 10)
		prevPeer.Write(first[wire.HeaderSize:]) // ... its payload after it
		prevPeer.Write(data(f32(11)))
	}()
	buf := []float32{1, 2}
	if err := g.AllReduce(context.Background(), buf, collective.Sum); err != nil {
		t.Fatalf("a frame straddling the deadline failed the operation: %v", err)
	}
	if buf[0] != 11 || buf[1] != 22 {
		t.Fatalf("all-reduce gave %v, want [11 22]", buf)
	}
}
