package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Every message on a fulgur TCP connection is a frame: a 24-byte header
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
// wire compatibility; see doc.go).
const headerSize = 24

var magic = [4]byte{'F', 'L', 'G', '1'}

type kind uint8

const (
	kindHello     kind = 1  // joiner -> rank 0 and ring dialer -> acceptor
	kindReject    kind = 2  // refusal with a reason
	kindTable     kind = 3  // rank 0 -> joiner: everyone's addresses
	kindExchange  kind = 4  // small blob all-gather through rank 0
	kindOp        kind = 5  // operation header
	kindData      kind = 6  // elements
	kindAbort     kind = 7  // the group failed: who is blamed and why
	kindBye       kind = 8  // orderly close
	kindChallenge kind = 9  // acceptor -> dialer: a fresh nonce to sign (auth.go)
	kindAccept    kind = 10 // ring acceptor -> dialer: its own proof
)

func (k kind) String() string {
	switch k {
	case kindHello:
		return "hello"
	case kindReject:
		return "reject"
	case kindTable:
		return "table"
	case kindExchange:
		return "exchange"
	case kindOp:
		return "op"
	case kindData:
		return "data"
	case kindAbort:
		return "abort"
	case kindBye:
		return "bye"
	case kindChallenge:
		return "challenge"
	case kindAccept:
		return "accept"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Limits on payload sizes: control frames are small; a data frame holds one
// segment.
const (
	maxControl = 1 << 20
	maxData    = 1 << 30
	maxRanks   = 1 << 16
)

var errFrame = errors.New("malformed frame")

type header struct {
	kind   kind
	code   uint8
	seq    uint64
	length uint32
}

func putHeader(b []byte, h header) {
	copy(b[0:4], magic[:])
	b[4] = byte(h.kind)
	b[5] = h.code
	b[6], b[7] = 0, 0
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint32(b[16:], h.length)
	binary.LittleEndian.PutUint32(b[20:], 0)
}

func decodeHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, fmt.Errorf("%w: %d header bytes, want %d", errFrame, len(b), headerSize)
	}
	if [4]byte(b[0:4]) != magic {
		return header{}, fmt.Errorf("%w: bad magic %q (not a fulgur peer?)", errFrame, b[0:4])
	}
	h := header{kind: kind(b[4]), code: b[5], seq: binary.LittleEndian.Uint64(b[8:]), length: binary.LittleEndian.Uint32(b[16:])}
	if b[6] != 0 || b[7] != 0 || binary.LittleEndian.Uint32(b[20:]) != 0 {
		return header{}, fmt.Errorf("%w: reserved bytes are not zero", errFrame)
	}
	switch h.kind {
	case kindData:
		if h.length > maxData {
			return header{}, fmt.Errorf("%w: data payload of %d bytes exceeds %d", errFrame, h.length, maxData)
		}
	case kindHello, kindReject, kindTable, kindExchange, kindOp, kindAbort, kindBye, kindChallenge, kindAccept:
		if h.length > maxControl {
			return header{}, fmt.Errorf("%w: %s payload of %d bytes exceeds %d", errFrame, h.kind, h.length, maxControl)
		}
	default:
		return header{}, fmt.Errorf("%w: unknown kind %d", errFrame, b[4])
	}
	if h.kind != kindAbort && h.code != 0 {
		return header{}, fmt.Errorf("%w: code %d on a %s frame", errFrame, h.code, h.kind)
	}
	return h, nil
}

// readControl reads one whole control frame.
func readControl(r io.Reader, hb []byte) (header, []byte, error) {
	if _, err := io.ReadFull(r, hb[:headerSize]); err != nil {
		return header{}, nil, err
	}
	h, err := decodeHeader(hb)
	if err != nil {
		return h, nil, err
	}
	if h.kind == kindData {
		return h, nil, fmt.Errorf("%w: data frame where a control frame was expected", errFrame)
	}
	p := make([]byte, h.length)
	if _, err := io.ReadFull(r, p); err != nil {
		return h, nil, err
	}
	return h, p, nil
}

func controlFrame(k kind, code uint8, seq uint64, payload []byte) []byte {
	b := make([]byte, headerSize+len(payload))
	putHeader(b, header{kind: k, code: code, seq: seq, length: uint32(len(payload))})
	copy(b[headerSize:], payload)
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
		d.err = fmt.Errorf("%w: payload truncated", errFrame)
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
		d.err = fmt.Errorf("%w: %d trailing payload bytes", errFrame, len(d.b))
	}
	return d.err
}

// hello is what a joining process presents.
type hello struct {
	token    string
	rank     int
	size     int
	host     string // host identity (name and boot id) for same-host detection
	dataAddr string // where its ring listener accepts
}

func (h hello) encode() []byte {
	var e enc
	e.str(h.token)
	e.i32(h.rank)
	e.i32(h.size)
	e.str(h.host)
	e.str(h.dataAddr)
	return e.done()
}

func decodeHello(p []byte) (hello, error) {
	d := dec{b: p}
	h := hello{token: d.str(), rank: d.i32(), size: d.i32(), host: d.str(), dataAddr: d.str()}
	return h, d.end()
}

// opHeader is the per-operation header compared between ring neighbours.
type opHeader struct {
	kind, dtype, op uint8
	root            int
	length          uint64
}

func (o opHeader) encode() []byte {
	var e enc
	e.b = append(e.b, o.kind, o.dtype, o.op)
	e.i32(o.root)
	e.u64(o.length)
	return e.done()
}

func decodeOpHeader(p []byte) (opHeader, error) {
	d := dec{b: p}
	var o opHeader
	if d.need(3) {
		o.kind, o.dtype, o.op = d.b[0], d.b[1], d.b[2]
		d.b = d.b[3:]
	}
	o.root = d.i32()
	o.length = d.u64()
	return o, d.end()
}

// abort says which rank the sender blames (-1: none) and why.
type abort struct {
	from  int
	blame int
	msg   string
}

func (a abort) encode() []byte {
	var e enc
	e.i32(a.from)
	e.i32(a.blame)
	e.str(a.msg)
	return e.done()
}

func decodeAbort(p []byte) (abort, error) {
	d := dec{b: p}
	a := abort{from: d.i32(), blame: d.i32(), msg: d.str()}
	return a, d.end()
}

// table lists every rank's host identity and ring address, rank 0 first.
func encodeTable(hosts, addrs []string) []byte {
	var e enc
	e.u32(uint32(len(hosts)))
	for i := range hosts {
		e.str(hosts[i])
		e.str(addrs[i])
	}
	return e.done()
}

func decodeTable(p []byte, size int) (hosts, addrs []string, err error) {
	d := dec{b: p}
	n := int(d.u32())
	if d.err == nil && (n > maxRanks || (size >= 0 && n != size)) {
		return nil, nil, fmt.Errorf("%w: table of %d ranks, want %d", errFrame, n, size)
	}
	for i := 0; i < n && d.err == nil; i++ {
		hosts = append(hosts, d.str())
		addrs = append(addrs, d.str())
	}
	return hosts, addrs, d.end()
}

// encodeBlobs/decodeBlobs carry one small byte string per rank.
func encodeBlobs(blobs [][]byte) []byte {
	var e enc
	e.u32(uint32(len(blobs)))
	for _, b := range blobs {
		e.bytes(b)
	}
	return e.done()
}

func decodeBlobs(p []byte, size int) ([][]byte, error) {
	d := dec{b: p}
	n := int(d.u32())
	if d.err == nil && (n > maxRanks || (size >= 0 && n != size)) {
		return nil, fmt.Errorf("%w: %d blobs, want %d", errFrame, n, size)
	}
	var out [][]byte
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.bytes())
	}
	return out, d.end()
}

// DecodeFrame parses one complete frame from b (header, then the payload
// decoded according to its kind) and returns how many bytes it used. It is
// what a peer's bytes go through; it rejects anything malformed with an error
// wrapping errFrame and never panics.
func DecodeFrame(b []byte) (n int, err error) {
	h, err := decodeHeader(b)
	if err != nil {
		return 0, err
	}
	end := headerSize + int(h.length)
	if len(b) < end {
		return 0, fmt.Errorf("%w: %s payload truncated: %d of %d bytes", errFrame, h.kind, len(b)-headerSize, h.length)
	}
	p := b[headerSize:end]
	switch h.kind {
	case kindHello:
		_, err = decodeHello(p)
	case kindOp:
		_, err = decodeOpHeader(p)
	case kindAbort:
		_, err = decodeAbort(p)
	case kindTable:
		_, _, err = decodeTable(p, -1)
	case kindExchange:
		_, err = decodeBlobs(p, -1)
	}
	if err != nil {
		return 0, err
	}
	return end, nil
}
