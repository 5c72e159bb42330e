package tcp

import (
	"bytes"
	"errors"
	"testing"
)

func TestDecodeFrame(t *testing.T) {
	good := controlFrame(kindHello, 0, 0, hello{token: "t", rank: 1, size: 2, host: "h", dataAddr: "1.2.3.4:5"}.encode())
	n, err := DecodeFrame(good)
	if err != nil || n != len(good) {
		t.Fatalf("good hello: n=%d err=%v", n, err)
	}
	bad := func(mut func(b []byte) []byte) []byte { return mut(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"short header", good[:10]},
		{"bad magic", bad(func(b []byte) []byte { b[0] = 'X'; return b })},
		{"unknown kind", bad(func(b []byte) []byte { b[4] = 99; return b })},
		{"reserved set", bad(func(b []byte) []byte { b[21] = 1; return b })},
		{"code on hello", bad(func(b []byte) []byte { b[5] = 1; return b })},
		{"truncated payload", good[:len(good)-1]},
		{"huge control", bad(func(b []byte) []byte { b[19] = 0x7f; return b })},
		{"trailing bytes in hello", append(controlFrame(kindHello, 0, 0, append(hello{}.encode(), 0)), 0)},
		{"string length past end", controlFrame(kindAbort, 1, 0, []byte{0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255})},
		{"table too many ranks", controlFrame(kindTable, 0, 0, []byte{255, 255, 255, 255})},
	} {
		if _, err := DecodeFrame(tc.b); !errors.Is(err, errFrame) {
			t.Errorf("%s: got %v, want errFrame", tc.name, err)
		}
	}
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(controlFrame(kindHello, 0, 0, hello{token: "t", rank: 1, size: 2, host: "h", dataAddr: "a:1"}.encode()))
	f.Add(controlFrame(kindAbort, codeLost, 3, abort{from: 1, blame: 2, msg: "x"}.encode()))
	f.Add(controlFrame(kindOp, 0, 7, opHeader{kind: 1, dtype: 1, op: 0, root: 0, length: 10}.encode()))
	f.Add(controlFrame(kindTable, 0, 0, encodeTable([]string{"a", "b"}, []string{"x:1", "y:2"})))
	f.Add(controlFrame(kindExchange, 0, 0, encodeBlobs([][]byte{{1}, {2, 3}})))
	f.Add(controlFrame(kindData, 0, 1, make([]byte, 16)))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := DecodeFrame(b)
		if err != nil {
			if !errors.Is(err, errFrame) {
				t.Fatalf("error %v does not wrap errFrame", err)
			}
			return
		}
		if n < headerSize || n > len(b) {
			t.Fatalf("DecodeFrame used %d of %d bytes", n, len(b))
		}
		// A frame that decodes re-encodes to the same bytes.
		h, _ := decodeHeader(b)
		if again := controlFrame(h.kind, h.code, h.seq, b[headerSize:n]); !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoded frame differs")
		}
	})
}
