package data

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// writeCIFAR writes n records whose label is i%10 and whose pixel j is
// (i+j)%256.
func writeCIFAR(t *testing.T, path string, n, first int) {
	t.Helper()
	b := make([]byte, 0, n*cifarRecord)
	for i := first; i < first+n; i++ {
		b = append(b, byte(i%10))
		for j := range cifarPixels {
			b = append(b, byte((i+j)%256))
		}
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCIFAR10(t *testing.T) {
	dir := t.TempDir()
	for k := 1; k <= 5; k++ {
		writeCIFAR(t, filepath.Join(dir, fmt.Sprintf("data_batch_%d.bin", k)), 3, (k-1)*3)
	}
	writeCIFAR(t, filepath.Join(dir, "test_batch.bin"), 4, 0)
	train, err := NewCIFAR10(dir, "train")
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 15 {
		t.Fatalf("train has %d images, want 15", train.Len())
	}
	dst := [][]float32{make([]float32, cifarPixels), make([]float32, 1)}
	for _, i := range []int{0, 7, 14} {
		if err := train.Read(i, dst); err != nil {
			t.Fatal(err)
		}
		if dst[1][0] != float32(i%10) {
			t.Errorf("image %d label %v, want %d", i, dst[1][0], i%10)
		}
		for _, j := range []int{0, 1023, 1024, 3071} {
			if want := float32((i+j)%256) / 255; dst[0][j] != want {
				t.Errorf("image %d pixel %d = %v, want %v", i, j, dst[0][j], want)
			}
		}
	}
	test, err := NewCIFAR10(dir, "test")
	if err != nil || test.Len() != 4 {
		t.Fatalf("test: %v, %v", test, err)
	}

	os.WriteFile(filepath.Join(dir, "test_batch.bin"), make([]byte, cifarRecord+5), 0o644)
	bad := make([]byte, cifarRecord)
	bad[0] = 42
	os.WriteFile(filepath.Join(dir, "data_batch_3.bin"), bad, 0o644)
	cases := []struct {
		dir, split, want string
	}{
		{dir, "test", "3078 bytes is not a whole number of 3073-byte"},
		{dir, "train", "data_batch_3.bin: record 0 has label 42"},
		{dir, "valid", `split "valid"`},
		{filepath.Join(dir, "nope"), "test", "test_batch.bin: file not found"},
	}
	for _, c := range cases {
		if _, err := NewCIFAR10(c.dir, c.split); err == nil || !contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want %q", c.dir, c.split, err, c.want)
		}
	}
	gz := t.TempDir()
	os.WriteFile(filepath.Join(gz, "test_batch.bin"), []byte{0x1f, 0x8b, 8, 0}, 0o644)
	if _, err := NewCIFAR10(gz, "test"); err == nil || !contains(err.Error(), "gzip-compressed") {
		t.Errorf("gzip file: %v", err)
	}
}
