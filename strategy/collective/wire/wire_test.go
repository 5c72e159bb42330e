package wire

import (
	"bytes"
	"errors"
	"testing"
)

func TestDecodeFrame(t *testing.T) {
	good := ControlFrame(KindHello, 0, 0, Hello{Token: "t", Rank: 1, Size: 2, Host: "h", DataAddr: "1.2.3.4:5"}.Encode())
	n, err := DecodeFrame(good)
	if err != nil || n != len(good) {
		t.Fatalf("good Hello: n=%d err=%v", n, err)
	}
	bad := func(mut func(b []byte) []byte) []byte { return mut(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"short Header", good[:10]},
		{"bad magic", bad(func(b []byte) []byte { b[0] = 'X'; return b })},
		{"unknown kind", bad(func(b []byte) []byte { b[4] = 99; return b })},
		{"reserved set", bad(func(b []byte) []byte { b[21] = 1; return b })},
		{"code on Hello", bad(func(b []byte) []byte { b[5] = 1; return b })},
		{"truncated payload", good[:len(good)-1]},
		{"huge control", bad(func(b []byte) []byte { b[19] = 0x7f; return b })},
		{"trailing bytes in Hello", append(ControlFrame(KindHello, 0, 0, append(Hello{}.Encode(), 0)), 0)},
		{"string length past end", ControlFrame(KindAbort, 1, 0, []byte{0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255})},
		{"table too many ranks", ControlFrame(KindTable, 0, 0, []byte{255, 255, 255, 255})},
	} {
		if _, err := DecodeFrame(tc.b); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: got %v, want ErrFrame", tc.name, err)
		}
	}
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(ControlFrame(KindHello, 0, 0, Hello{Token: "t", Rank: 1, Size: 2, Host: "h", DataAddr: "a:1"}.Encode()))
	f.Add(ControlFrame(KindAbort, 1, 3, Abort{From: 1, Blame: 2, Msg: "x"}.Encode()))
	f.Add(ControlFrame(KindOp, 0, 7, OpHeader{Kind: 1, DType: 1, Op: 0, Root: 0, Length: 10}.Encode()))
	f.Add(ControlFrame(KindTable, 0, 0, EncodeTable([]string{"a", "b"}, []string{"x:1", "y:2"})))
	f.Add(ControlFrame(KindExchange, 0, 0, EncodeBlobs([][]byte{{1}, {2, 3}})))
	f.Add(ControlFrame(KindData, 0, 1, make([]byte, 16)))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := DecodeFrame(b)
		if err != nil {
			if !errors.Is(err, ErrFrame) {
				t.Fatalf("error %v does not wrap ErrFrame", err)
			}
			return
		}
		if n < HeaderSize || n > len(b) {
			t.Fatalf("DecodeFrame used %d of %d bytes", n, len(b))
		}
		// A frame that decodes re-encodes to the same bytes.
		h, _ := DecodeHeader(b)
		if again := ControlFrame(h.Kind, h.Code, h.Seq, b[HeaderSize:n]); !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoded frame differs")
		}
	})
}
