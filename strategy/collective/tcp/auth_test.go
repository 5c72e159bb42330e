package tcp_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// recordingListener keeps every byte read from and written to the
// connections it accepts.
type recordingListener struct {
	net.Listener
	mu  sync.Mutex
	all bytes.Buffer
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, l: l}, nil
}

func (l *recordingListener) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.all.Bytes())
}

type recordingConn struct {
	net.Conn
	l *recordingListener
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.mu.Lock()
	c.l.all.Write(p[:n])
	c.l.mu.Unlock()
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.l.all.Write(p)
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

// The token proves itself by HMAC over fresh nonces: a job of three ranks
// forms and reduces, and the rendezvous traffic, both ways, never holds the
// token (before the challenge-response it was the hello frame's first field).
func TestTokenIsNotSentInClear(t *testing.T) {
	cfgs := configs(t, 3)
	const secret = "a-token-that-must-stay-home-7f3a9c"
	for i := range cfgs {
		cfgs[i].Token = secret
	}
	rec := &recordingListener{Listener: cfgs[0].Listener}
	cfgs[0].Listener = rec
	cs := build(t, cfgs)
	bufs := [][]float32{{1}, {2}, {4}}
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for r, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = c.AllReduce(context.Background(), bufs[r], collective.Sum) }()
	}
	wg.Wait()
	for r := range cs {
		if errs[r] != nil || bufs[r][0] != 7 {
			t.Fatalf("rank %d: all-reduce gave %v (%v), want 7", r, bufs[r], errs[r])
		}
	}
	wire := rec.bytes()
	if len(wire) < 200 {
		t.Fatalf("recorded only %d bytes of rendezvous traffic: the recording listener saw no handshake", len(wire))
	}
	if bytes.Contains(wire, []byte(secret)) {
		t.Errorf("the token crossed the wire in clear (%d bytes recorded)", len(wire))
	}
	if bytes.Contains(wire, []byte(secret[:12])) {
		t.Errorf("a prefix of the token crossed the wire in clear")
	}
}
