package rendezvous

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/wire"
)

// The token never crosses the wire. Every connection, to the rendezvous and
// between ring neighbours, is authenticated both ways with HMAC-SHA256 keyed
// by the token over fresh nonces:
//
//	acceptor -> dialer:   challenge  nonceA (32 random bytes)
//	dialer   -> acceptor: hello      proof = nonceD || HMAC(token, "join" || nonceA || nonceD || hello fields)
//	acceptor -> dialer:   table/accept, led by HMAC(token, "accept" || nonceA || nonceD)
//
// The dialer's proof binds its rank, world size, host and address, so a
// stranger can neither join without the token, nor replay a recorded hello
// (nonceA is new per connection), nor alter the fields. The acceptor's reply
// proves to the dialer that it, too, holds the token before the dialer trusts
// the address table or sends data.

const (
	nonceSize = 32
	macSize   = sha256.Size
	proofSize = nonceSize + macSize
)

func newNonce() ([]byte, error) {
	n := make([]byte, nonceSize)
	if _, err := rand.Read(n); err != nil {
		return nil, fmt.Errorf("random nonce: %w", err)
	}
	return n, nil
}

func mac(token, label string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("fulgur/tcp/v1 " + label))
	for _, p := range parts {
		var n [4]byte
		n[0], n[1], n[2], n[3] = byte(len(p)), byte(len(p)>>8), byte(len(p)>>16), byte(len(p)>>24)
		m.Write(n[:])
		m.Write(p)
	}
	return m.Sum(nil)
}

// helloFields is what the dialer's proof covers besides the nonces.
func helloFields(h wire.Hello) []byte {
	h.Token = ""
	return h.Encode()
}

// sendChallenge starts an accepted connection: it sends a fresh nonce and
// returns it.
func sendChallenge(c net.Conn) ([]byte, error) {
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(wire.ControlFrame(wire.KindChallenge, 0, 0, nonce)); err != nil {
		return nil, fmt.Errorf("send challenge: %w", err)
	}
	return nonce, nil
}

// readChallenge reads the acceptor's nonce on a dialed connection.
func readChallenge(c net.Conn, hb []byte) ([]byte, error) {
	hdr, p, err := wire.ReadControl(c, hb)
	if err != nil {
		return nil, err
	}
	switch {
	case hdr.Kind == wire.KindReject:
		return nil, fmt.Errorf("refused: %s", p)
	case hdr.Kind != wire.KindChallenge:
		return nil, fmt.Errorf("sent %s instead of a challenge (not a fulgur peer of this version?)", hdr.Kind)
	case len(p) != nonceSize:
		return nil, fmt.Errorf("challenge of %d bytes, want %d", len(p), nonceSize)
	}
	return p, nil
}

// signHello fills h.token with the dialer's proof for the acceptor's nonce
// and returns the dialer's own nonce.
func signHello(h *wire.Hello, token string, nonceA []byte) ([]byte, error) {
	nonceD, err := newNonce()
	if err != nil {
		return nil, err
	}
	h.Token = ""
	proof := append(nonceD, mac(token, "join", nonceA, nonceD, helloFields(*h))...)
	h.Token = string(proof)
	return nonceD, nil
}

// checkHello verifies a dialer's proof and returns its nonce.
func checkHello(h wire.Hello, token string, nonceA []byte) ([]byte, bool) {
	if len(h.Token) != proofSize {
		return nil, false
	}
	nonceD := []byte(h.Token[:nonceSize])
	want := mac(token, "join", nonceA, nonceD, helloFields(h))
	return nonceD, hmac.Equal(want, []byte(h.Token[nonceSize:]))
}

// acceptProof is the acceptor's answer to a verified hello.
func acceptProof(token string, nonceA, nonceD []byte) []byte {
	return mac(token, "accept", nonceA, nonceD)
}

// checkAccept splits the acceptor's proof off a reply payload.
func checkAccept(p []byte, token string, nonceA, nonceD []byte) ([]byte, bool) {
	if len(p) < macSize {
		return nil, false
	}
	return p[macSize:], hmac.Equal(p[:macSize], acceptProof(token, nonceA, nonceD))
}

// handshakeDeadline bounds one connection's handshake.
func handshakeDeadline(timeout time.Duration) time.Time {
	return time.Now().Add(min(timeout, 10*time.Second))
}
