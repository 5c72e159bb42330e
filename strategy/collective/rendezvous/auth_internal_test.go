package rendezvous

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/wire"
	"github.com/rs/zerolog"
)

func testConfig(t *testing.T, rank, size int, ln net.Listener, port int) Config {
	nop := zerolog.Nop()
	return Config{Rank: rank, Size: size, MasterAddr: "127.0.0.1", MasterPort: port, Token: "the-token",
		BindAddr: "127.0.0.1", Timeout: 10 * time.Second, Logger: &nop, Listener: ln}
}

// A hello recorded by an impostor posing as rank 0 cannot be replayed to the
// real rank 0: the proof covers rank 0's fresh nonce. The real rank 1 still
// joins afterwards.
func TestRecordedHelloCannotBeReplayed(t *testing.T) {
	// The impostor: a listener that sends a challenge and records the hello.
	fake, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	recorded := make(chan []byte, 1)
	go func() {
		c, err := fake.Accept()
		if err != nil {
			recorded <- nil
			return
		}
		defer c.Close()
		if _, err := sendChallenge(c); err != nil {
			recorded <- nil
			return
		}
		hdr, p, err := wire.ReadControl(c, make([]byte, wire.HeaderSize))
		if err != nil || hdr.Kind != wire.KindHello {
			recorded <- nil
			return
		}
		recorded <- wire.ControlFrame(wire.KindHello, 0, 0, p)
	}()
	victim := testConfig(t, 1, 2, nil, fake.Addr().(*net.TCPAddr).Port)
	victim.Timeout = 2 * time.Second
	_, err = Meet(context.Background(), victim)
	if err == nil {
		t.Fatal("rank 1 trusted a rank 0 that never proved it holds the token")
	}
	hello := <-recorded
	if hello == nil {
		t.Fatal("the impostor recorded no hello")
	}
	if strings.Contains(string(hello), victim.Token) {
		t.Fatal("the hello carries the token in clear")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	type result struct {
		r   *Rendezvous
		err error
	}
	rank0 := make(chan result, 1)
	go func() {
		r, err := Meet(context.Background(), testConfig(t, 0, 2, ln, port))
		rank0 <- result{r, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := readChallenge(c, make([]byte, wire.HeaderSize)); err != nil {
		t.Fatalf("rank 0 sent no challenge: %v", err)
	}
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	hdr, p, err := wire.ReadControl(c, make([]byte, wire.HeaderSize))
	if err != nil || hdr.Kind != wire.KindReject || !strings.Contains(string(p), "wrong token") {
		t.Fatalf("the replayed hello got %v %q (%v), want a refusal naming the token", hdr.Kind, p, err)
	}
	r1, err := Meet(context.Background(), testConfig(t, 1, 2, nil, port))
	if err != nil {
		t.Fatalf("the real rank 1 after the replay: %v", err)
	}
	defer r1.Close()
	r0 := <-rank0
	if r0.err != nil {
		t.Fatalf("rank 0: %v", r0.err)
	}
	r0.r.Close()
}

// A rank's data listener refuses a dialer without the token and keeps
// waiting for its real neighbour; a dialer refuses a listener that cannot
// prove the token.
func TestPeerHandshakeBothWays(t *testing.T) {
	token := "ring-token"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nop := zerolog.Nop()
	cfg := Config{Rank: 1, Size: 2, Token: token, Timeout: 5 * time.Second, Logger: &nop}
	g := &Rendezvous{cfg: cfg, ln: ln, addrs: []string{ln.Addr().String(), ln.Addr().String()}}
	type accepted struct {
		c   net.Conn
		err error
	}
	done := make(chan accepted, 1)
	go func() {
		c, err := g.AcceptPeer(context.Background(), 0)
		done <- accepted{c, err}
	}()

	dial := func(tok string) (wire.Header, []byte) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		hb := make([]byte, wire.HeaderSize)
		nonceA, err := readChallenge(c, hb)
		if err != nil {
			t.Fatal(err)
		}
		h := wire.Hello{Rank: 0, Size: 2, Host: "h", DataAddr: "-:0"}
		if _, err := signHello(&h, tok, nonceA); err != nil {
			t.Fatal(err)
		}
		c.Write(wire.ControlFrame(wire.KindHello, 0, 0, h.Encode()))
		hdr, p, err := wire.ReadControl(c, hb)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		return hdr, p
	}
	if hdr, p := dial("guess"); hdr.Kind != wire.KindReject || !strings.Contains(string(p), "wrong token") {
		t.Fatalf("a dialer with the wrong token got %v %q, want a refusal", hdr.Kind, p)
	}
	if hdr, _ := dial(token); hdr.Kind != wire.KindAccept {
		t.Fatalf("the right token got %v, want accept", hdr.Kind)
	}
	a := <-done
	if a.err != nil {
		t.Fatalf("AcceptPeer: %v", a.err)
	}
	a.c.Close()

	// The other way: a listener that answers the hello with a made-up proof.
	fake, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	go func() {
		c, err := fake.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		sendChallenge(c)
		wire.ReadControl(c, make([]byte, wire.HeaderSize))
		c.Write(wire.ControlFrame(wire.KindAccept, 0, 0, make([]byte, macSize)))
		wire.ReadControl(c, make([]byte, wire.HeaderSize)) // wait for the dialer to hang up
	}()
	d := &Rendezvous{cfg: cfg, addrs: []string{fake.Addr().String(), fake.Addr().String()}}
	_, err = d.DialPeer(context.Background(), 0)
	if err == nil || !strings.Contains(err.Error(), "did not prove it holds the token") {
		t.Fatalf("DialPeer to an impostor: %v, want a refusal", err)
	}
}

// A stranger that connects to the rendezvous port first and then says
// nothing does not hold the real rank 1 out: its handshake runs beside
// the others' (before, rank 0 waited on it until the timeout failed the
// job).
func TestSilentStrangerDoesNotBlockRendezvous(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	type result struct {
		r   *Rendezvous
		err error
	}
	rank0 := make(chan result, 1)
	go func() {
		r, err := Meet(context.Background(), testConfig(t, 0, 2, ln, port))
		rank0 <- result{r, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := readChallenge(c, make([]byte, wire.HeaderSize)); err != nil {
		t.Fatalf("rank 0 sent the stranger no challenge: %v", err)
	}
	// The stranger now stays silent, holding its connection open.
	r1, err := Meet(context.Background(), testConfig(t, 1, 2, nil, port))
	if err != nil {
		t.Fatalf("rank 1 with a silent stranger at the port: %v", err)
	}
	defer r1.Close()
	r0 := <-rank0
	if r0.err != nil {
		t.Fatalf("rank 0 with a silent stranger at the port: %v", r0.err)
	}
	r0.r.Close()
}
