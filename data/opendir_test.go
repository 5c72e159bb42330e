package data_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

// -data naming a directory that exists but lacks the files (a typo'd
// parent, a half-finished download) is an error naming the directory, every
// missing file and the fix, as a directory that does not exist is.
func TestOpenFashionMNISTDirWithoutTheFiles(t *testing.T) {
	dir := t.TempDir()
	// Only the test split's images, uncompressed.
	if err := os.WriteFile(filepath.Join(dir, "t10k-images-idx3-ubyte"), []byte{0, 0, 8, 3}, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := data.OpenFashionMNIST(dir)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "give the directory holding", "leave it empty"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "t10k-images-idx3-ubyte.gz") {
		t.Errorf("error %q names t10k-images, which is there (uncompressed)", msg)
	}
}
