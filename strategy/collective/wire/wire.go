// Package wire is the frame format shared by the rendezvous and the tcp
// ring: every message on a fulgur connection is a frame: a 24-byte header
// followed by Length payload bytes.
//
//	0  magic   "FLG1"
//	4  kind    uint8
//	5  code    uint8  (abort: error class; else 0)
//	6  zero    uint16
//	8  seq     uint64 (operation sequence number; 0 outside operations)
//	16 length  uint32 (payload bytes)
//	20 zero    uint32
//
// Integers are little endian. Data payloads are raw elements in the host's
// little-endian layout (the package builds only for little-endian machines'
// wire compatibility).
//
// It imports only the standard library; backends under strategy/collective
// use it, nothing else may (internal/archtest checks it). It is public only
// so that a program linking the tcp backend links no internal package.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// HeaderSize is the size of every frame header.
const HeaderSize = 24

var magic = [4]byte{'F', 'L', 'G', '1'}

// Kind says what a frame carries.
type Kind uint8

const (
	KindHello     Kind = 1  // joiner -> rank 0 and ring dialer -> acceptor
	KindReject    Kind = 2  // refusal with a reason
	KindTable     Kind = 3  // rank 0 -> joiner: everyone's addresses
	KindExchange  Kind = 4  // small blob all-gather through rank 0
	KindOp        Kind = 5  // operation Header
	KindData      Kind = 6  // elements
	KindAbort     Kind = 7  // the group failed: who is blamed and why
	KindBye       Kind = 8  // orderly close
	KindChallenge Kind = 9  // acceptor -> dialer: a fresh nonce to sign (auth.go)
	KindAccept    Kind = 10 // ring acceptor -> dialer: its own proof
	KindWait      Kind = 11 // ring: the sender is alive, in operation Seq, waiting on its predecessor
)

func (k Kind) String() string {
	switch k {
	case KindHello:
		return "Hello"
	case KindReject:
		return "reject"
	case KindTable:
		return "table"
	case KindExchange:
		return "exchange"
	case KindOp:
		return "op"
	case KindData:
		return "data"
	case KindAbort:
		return "Abort"
	case KindBye:
		return "bye"
	case KindChallenge:
		return "challenge"
	case KindAccept:
		return "accept"
	case KindWait:
		return "wait"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Limits on payload sizes: control frames are small; a data frame holds one
// segment.
const (
	MaxControl = 1 << 20
	MaxData    = 1 << 30
	MaxRanks   = 1 << 16
)

// ErrFrame is wrapped by every error about malformed bytes from a peer.
var ErrFrame = errors.New("malformed frame")

// Header is a decoded frame header.
type Header struct {
	Kind   Kind
	Code   uint8  // abort: error class; op: the sender's algorithm (backend-defined); else 0
	Seq    uint64 // operation sequence number; 0 outside operations
	Length uint32 // payload bytes
}

// PutHeader writes h into the first HeaderSize bytes of b.
func PutHeader(b []byte, h Header) {
	copy(b[0:4], magic[:])
	b[4] = byte(h.Kind)
	b[5] = h.Code
	b[6], b[7] = 0, 0
	binary.LittleEndian.PutUint64(b[8:], h.Seq)
	binary.LittleEndian.PutUint32(b[16:], h.Length)
	binary.LittleEndian.PutUint32(b[20:], 0)
}

// DecodeHeader checks and decodes a frame header.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d header bytes, want %d", ErrFrame, len(b), HeaderSize)
	}
	if [4]byte(b[0:4]) != magic {
		return Header{}, fmt.Errorf("%w: bad magic %q (not a fulgur peer?)", ErrFrame, b[0:4])
	}
	h := Header{Kind: Kind(b[4]), Code: b[5], Seq: binary.LittleEndian.Uint64(b[8:]), Length: binary.LittleEndian.Uint32(b[16:])}
	if b[6] != 0 || b[7] != 0 || binary.LittleEndian.Uint32(b[20:]) != 0 {
		return Header{}, fmt.Errorf("%w: reserved bytes are not zero", ErrFrame)
	}
	switch h.Kind {
	case KindData:
		if h.Length > MaxData {
			return Header{}, fmt.Errorf("%w: data payload of %d bytes exceeds %d", ErrFrame, h.Length, MaxData)
		}
	case KindHello, KindReject, KindTable, KindExchange, KindOp, KindAbort, KindBye, KindChallenge, KindAccept, KindWait:
		if h.Length > MaxControl {
			return Header{}, fmt.Errorf("%w: %s payload of %d bytes exceeds %d", ErrFrame, h.Kind, h.Length, MaxControl)
		}
	default:
		return Header{}, fmt.Errorf("%w: unknown kind %d", ErrFrame, b[4])
	}
	if h.Kind != KindAbort && h.Kind != KindOp && h.Code != 0 {
		return Header{}, fmt.Errorf("%w: code %d on a %s frame", ErrFrame, h.Code, h.Kind)
	}
	return h, nil
}

// ReadControl reads one whole control frame.
func ReadControl(r io.Reader, hb []byte) (Header, []byte, error) {
	if _, err := io.ReadFull(r, hb[:HeaderSize]); err != nil {
		return Header{}, nil, err
	}
	h, err := DecodeHeader(hb)
	if err != nil {
		return h, nil, err
	}
	if h.Kind == KindData {
		return h, nil, fmt.Errorf("%w: data frame where a control frame was expected", ErrFrame)
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(r, p); err != nil {
		return h, nil, err
	}
	return h, p, nil
}

// ControlFrame encodes a whole control frame.
func ControlFrame(k Kind, code uint8, seq uint64, payload []byte) []byte {
	b := make([]byte, HeaderSize+len(payload))
	PutHeader(b, Header{Kind: k, Code: code, Seq: seq, Length: uint32(len(payload))})
	copy(b[HeaderSize:], payload)
	return b
}

// enc and dec build and parse control payloads: length-prefixed strings and
// fixed-size integers. dec records the first error and returns zero values
// afterwards, so a parse reads straight through and checks once.
type enc struct{ b []byte }

func (e *enc) u32(v uint32)   { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64)   { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) str(s string)   { e.u32(uint32(len(s))); e.b = append(e.b, s...) }
func (e *enc) i32(v int)      { e.u32(uint32(int32(v))) }
func (e *enc) bytes(p []byte) { e.u32(uint32(len(p))); e.b = append(e.b, p...) }
func (e *enc) done() []byte   { return e.b }

type dec struct {
	b   []byte
	err error
}

func (d *dec) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || len(d.b) < n {
		d.err = fmt.Errorf("%w: payload truncated", ErrFrame)
		return false
	}
	return true
}

func (d *dec) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *dec) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *dec) i32() int { return int(int32(d.u32())) }

func (d *dec) bytes() []byte {
	n := d.u32()
	if n > math.MaxInt32 {
		n = math.MaxInt32 // more than any payload: need reports truncation
	}
	if !d.need(int(n)) {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) str() string { return string(d.bytes()) }

func (d *dec) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing payload bytes", ErrFrame, len(d.b))
	}
	return d.err
}

// Hello is what a joining process presents.
type Hello struct {
	Token    string // the dialer's proof (nonce and HMAC), never the token itself
	Rank     int
	Size     int
	Host     string // host identity (name and boot id) for same-host detection
	DataAddr string // where its data listener accepts
	// Abort, when set, says the process failed before it could join, and
	// why: rank 0 ends the rendezvous and tells every rank. It is encoded
	// only when set, so a hello without it is the same bytes as before.
	Abort string
}

// Encode returns the frame payload.
func (h Hello) Encode() []byte {
	var e enc
	e.str(h.Token)
	e.i32(h.Rank)
	e.i32(h.Size)
	e.str(h.Host)
	e.str(h.DataAddr)
	if h.Abort != "" {
		e.str(h.Abort)
	}
	return e.done()
}

// DecodeHello parses a hello payload.
func DecodeHello(p []byte) (Hello, error) {
	d := dec{b: p}
	h := Hello{Token: d.str(), Rank: d.i32(), Size: d.i32(), Host: d.str(), DataAddr: d.str()}
	if d.err == nil && len(d.b) > 0 {
		h.Abort = d.str()
	}
	return h, d.end()
}

// OpHeader is the per-operation Header compared between ring neighbours.
type OpHeader struct {
	Kind, DType, Op uint8
	Root            int
	Length          uint64
}

// Encode returns the frame payload.
func (o OpHeader) Encode() []byte { return o.Append(nil) }

// Append appends the frame payload to b (a backend reuses one buffer for
// every operation's header).
func (o OpHeader) Append(b []byte) []byte {
	e := enc{b: b}
	e.b = append(e.b, o.Kind, o.DType, o.Op)
	e.i32(o.Root)
	e.u64(o.Length)
	return e.done()
}

// DecodeOpHeader parses an operation header payload.
func DecodeOpHeader(p []byte) (OpHeader, error) {
	d := dec{b: p}
	var o OpHeader
	if d.need(3) {
		o.Kind, o.DType, o.Op = d.b[0], d.b[1], d.b[2]
		d.b = d.b[3:]
	}
	o.Root = d.i32()
	o.Length = d.u64()
	return o, d.end()
}

// Abort says which rank the sender blames (-1: none) and why.
type Abort struct {
	From  int
	Blame int
	Msg   string
}

// Encode returns the frame payload.
func (a Abort) Encode() []byte {
	var e enc
	e.i32(a.From)
	e.i32(a.Blame)
	e.str(a.Msg)
	return e.done()
}

// DecodeAbort parses an abort payload.
func DecodeAbort(p []byte) (Abort, error) {
	d := dec{b: p}
	a := Abort{From: d.i32(), Blame: d.i32(), Msg: d.str()}
	return a, d.end()
}

// EncodeTable lists every rank's host identity and ring address, rank 0 first.
func EncodeTable(hosts, addrs []string) []byte {
	var e enc
	e.u32(uint32(len(hosts)))
	for i := range hosts {
		e.str(hosts[i])
		e.str(addrs[i])
	}
	return e.done()
}

// DecodeTable parses a table of size ranks (size < 0: any).
func DecodeTable(p []byte, size int) (hosts, addrs []string, err error) {
	d := dec{b: p}
	n := int(d.u32())
	if d.err == nil && (n > MaxRanks || (size >= 0 && n != size)) {
		return nil, nil, fmt.Errorf("%w: table of %d ranks, want %d", ErrFrame, n, size)
	}
	for i := 0; i < n && d.err == nil; i++ {
		hosts = append(hosts, d.str())
		addrs = append(addrs, d.str())
	}
	return hosts, addrs, d.end()
}

// EncodeBlobs/DecodeBlobs carry one small byte string per rank.
func EncodeBlobs(blobs [][]byte) []byte {
	var e enc
	e.u32(uint32(len(blobs)))
	for _, b := range blobs {
		e.bytes(b)
	}
	return e.done()
}

func DecodeBlobs(p []byte, size int) ([][]byte, error) {
	d := dec{b: p}
	n := int(d.u32())
	if d.err == nil && (n > MaxRanks || (size >= 0 && n != size)) {
		return nil, fmt.Errorf("%w: %d blobs, want %d", ErrFrame, n, size)
	}
	var out [][]byte
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.bytes())
	}
	return out, d.end()
}

// DecodeFrame parses one complete frame from b (Header, then the payload
// decoded according to its Kind) and returns how many bytes it used. It is
// what a peer's bytes go through; it rejects anything malformed with an error
// wrapping ErrFrame and never panics.
func DecodeFrame(b []byte) (n int, err error) {
	h, err := DecodeHeader(b)
	if err != nil {
		return 0, err
	}
	end := HeaderSize + int(h.Length)
	if len(b) < end {
		return 0, fmt.Errorf("%w: %s payload truncated: %d of %d bytes", ErrFrame, h.Kind, len(b)-HeaderSize, h.Length)
	}
	p := b[HeaderSize:end]
	switch h.Kind {
	case KindHello:
		_, err = DecodeHello(p)
	case KindOp:
		_, err = DecodeOpHeader(p)
	case KindAbort:
		_, err = DecodeAbort(p)
	case KindTable:
		_, _, err = DecodeTable(p, -1)
	case KindExchange:
		_, err = DecodeBlobs(p, -1)
	}
	if err != nil {
		return 0, err
	}
	return end, nil
}
