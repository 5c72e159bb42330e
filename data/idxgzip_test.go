package data_test

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

// A gzip IDX file cut short (an interrupted download of
// train-images-idx3-ubyte.gz) failed with "reading IDX data: unexpected
// EOF" or "after IDX data: unexpected EOF", which names neither the cause
// nor the fix. The error now says the file is incomplete, how much of the
// data was there, and to fetch it again.
func TestReadIDXCutGzipSaysTruncated(t *testing.T) {
	const n = 4000
	px := make([]byte, n)
	s := uint32(1)
	for i := range px { // incompressible, so that a cut lands inside the data
		s = s*1664525 + 1013904223
		px[i] = byte(s >> 24)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := data.WriteIDX(zw, []int{n}, px); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	gz := buf.Bytes()
	cases := []struct {
		name string
		in   []byte
		want []string
	}{
		{"cut in the data", gz[:len(gz)/2], []string{"IDX data truncated", "of the 4000 bytes that dimensions [4000] need", "fetch it again"}},
		{"cut in the trailer", gz[:len(gz)-3], []string{"after the 4000 bytes of IDX data", "gzip stream's end is missing or damaged", "fetch it again"}},
		{"bytes after the stream", append(bytes.Clone(gz), "xyz"...), []string{"gzip stream's end is missing or damaged", "extra bytes"}},
	}
	for _, c := range cases {
		_, _, err := data.ReadIDX(bytes.NewReader(c.in))
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q, want it to contain %q", c.name, err, w)
			}
		}
	}
	if _, got, err := data.ReadIDX(bytes.NewReader(gz)); err != nil || !bytes.Equal(got, px) {
		t.Errorf("the whole stream: err %v, %d bytes", err, len(got))
	}
}
