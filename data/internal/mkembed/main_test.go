package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

// Regenerating from the installed full set reproduces the committed files'
// contents (compared decoded: gzip output may change with the Go version), so
// the embedded subset is exactly what this program makes.
func TestRegenerateMatchesCommitted(t *testing.T) {
	if _, err := os.Stat(filepath.Join(data.DefaultFashionMNISTDir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skip("full Fashion-MNIST not installed (apt install dataset-fashion-mnist)")
	}
	if testing.Short() {
		t.Skip("decodes the full training set")
	}
	out := t.TempDir()
	if err := run(data.DefaultFashionMNISTDir, out, data.EmbeddedPerClass, data.EmbeddedTestLen); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("..", "..", "embedded", name))
		if err != nil {
			t.Fatal(err)
		}
		gd, gb, err := data.ReadIDX(bytes.NewReader(got))
		if err != nil {
			t.Fatal(err)
		}
		wd, wb, err := data.ReadIDX(bytes.NewReader(want))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(gd, wd) || !bytes.Equal(gb, wb) {
			t.Errorf("%s: regenerated dims %v differ from the committed %v, or their bytes do: run go generate ./data", name, gd, wd)
		}
	}
}

func TestRunErrors(t *testing.T) {
	if err := run(t.TempDir(), t.TempDir(), 1, 1); err == nil || !bytes.Contains([]byte(err.Error()), []byte("train-images-idx3-ubyte.gz: file not found")) {
		t.Errorf("empty source: %v", err)
	}
}
