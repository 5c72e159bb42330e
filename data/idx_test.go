package data

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func idxBytes(t testing.TB, dims []int, data []byte, gz bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	if gz {
		zw := gzip.NewWriter(&buf)
		if err := WriteIDX(zw, dims, data); err != nil {
			t.Fatal(err)
		}
		zw.Close()
	} else if err := WriteIDX(&buf, dims, data); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadIDXRoundTrip(t *testing.T) {
	pix := make([]byte, 2*3*4)
	for i := range pix {
		pix[i] = byte(i * 7)
	}
	for _, gz := range []bool{false, true} {
		dims, data, err := ReadIDX(bytes.NewReader(idxBytes(t, []int{2, 3, 4}, pix, gz)))
		if err != nil {
			t.Fatalf("gz=%v: %v", gz, err)
		}
		if !slices.Equal(dims, []int{2, 3, 4}) || !bytes.Equal(data, pix) {
			t.Errorf("gz=%v: got dims %v data %v", gz, dims, data)
		}
	}
}

func TestReadIDXErrors(t *testing.T) {
	good := idxBytes(t, []int{3, 2, 2}, make([]byte, 12), false)
	gz := idxBytes(t, []int{3, 2, 2}, make([]byte, 12), true)
	badSum := slices.Clone(gz)
	badSum[len(badSum)-6] ^= 0xff // inside the CRC-32 trailer
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "magic number: file truncated"},
		{"short magic", []byte{0, 0}, "magic number: file truncated"},
		{"text", []byte("hello world"), "not an IDX file: magic number 0x68656c6c"},
		{"float32", []byte{0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0}, "element type 0x0d (float32) is not supported"},
		{"zero dims", []byte{0, 0, 8, 0}, "declares 0 dimensions"},
		{"short dims", []byte{0, 0, 8, 3, 0, 0, 0, 3}, "reading 3 IDX dimensions: file truncated"},
		{"truncated data", good[:len(good)-5], "dimensions [3 2 2] need 12 bytes after the header, found 7"},
		{"trailing", append(slices.Clone(good), 1), "trailing bytes"},
		{"huge header", []byte{0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 9}, "the header is corrupt"},
		{"gzip truncated", gz[:len(gz)/2], "IDX"},
		{"gzip checksum", badSum, "checksum"},
		{"gzip garbage", []byte{0x1f, 0x8b, 1, 2, 3}, "gzip header"},
	}
	for _, c := range cases {
		_, _, err := ReadIDX(bytes.NewReader(c.in))
		if err == nil || !contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestReadIDXFilesNamePath(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img.gz")
	lbl := filepath.Join(dir, "lbl")
	os.WriteFile(img, idxBytes(t, []int{2, 28, 28}, make([]byte, 2*784), true), 0o644)
	os.WriteFile(lbl, idxBytes(t, []int{3}, []byte{1, 2, 3}, false), 0o644)
	if n, r, c, px, err := ReadIDXImages(img); err != nil || n != 2 || r != 28 || c != 28 || len(px) != 2*784 {
		t.Errorf("ReadIDXImages = %d %d %d len %d, %v", n, r, c, len(px), err)
	}
	cases := []struct {
		name string
		err  func() error
		want []string
	}{
		{"missing", func() error { _, err := ReadIDXLabels(filepath.Join(dir, "nope")); return err }, []string{filepath.Join(dir, "nope"), "file not found"}},
		{"labels as images", func() error { _, _, _, _, err := ReadIDXImages(lbl); return err }, []string{lbl, "1 dimensions [3], want 3", "label file"}},
		{"images as labels", func() error { _, err := ReadIDXLabels(img); return err }, []string{img, "want 1 (count)"}},
		{"count mismatch", func() error { _, err := NewMNIST(img, lbl); return err }, []string{lbl, "3 labels", img, "2 images"}},
	}
	for _, c := range cases {
		err := c.err()
		for _, w := range c.want {
			if err == nil || !contains(err.Error(), w) {
				t.Errorf("%s: error %v, want it to contain %q", c.name, err, w)
			}
		}
	}
	os.WriteFile(lbl, idxBytes(t, []int{2}, []byte{1, 12}, false), 0o644)
	if _, err := NewMNIST(img, lbl); err == nil || !contains(err.Error(), "label 1 is 12, want a class index 0..9") {
		t.Errorf("bad label: %v", err)
	}
	small := filepath.Join(dir, "small")
	os.WriteFile(small, idxBytes(t, []int{2, 5, 5}, make([]byte, 50), false), 0o644)
	if _, err := NewMNIST(small, lbl); err == nil || !contains(err.Error(), "images are 5x5, want 28x28") {
		t.Errorf("5x5 images: %v", err)
	}
}

func FuzzReadIDX(f *testing.F) {
	f.Add(idxBytes(f, []int{2, 3, 3}, make([]byte, 18), false))
	f.Add(idxBytes(f, []int{4}, []byte{1, 2, 3, 4}, true))
	f.Add([]byte{0, 0, 8, 1, 0, 0, 0, 2, 9})
	f.Add([]byte{0x1f, 0x8b, 8, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		dims, data, err := ReadIDX(bytes.NewReader(in))
		if err != nil {
			return
		}
		total := 1
		for _, d := range dims {
			total *= d
		}
		if len(dims) == 0 || total != len(data) {
			t.Fatalf("dims %v but %d bytes", dims, len(data))
		}
		// What parsed writes back and parses to the same thing.
		var buf bytes.Buffer
		if err := WriteIDX(&buf, dims, data); err != nil {
			t.Fatal(err)
		}
		d2, b2, err := ReadIDX(&buf)
		if err != nil || !slices.Equal(dims, d2) || !bytes.Equal(data, b2) {
			t.Fatalf("round trip: %v %v %v", d2, len(b2), err)
		}
	})
}
