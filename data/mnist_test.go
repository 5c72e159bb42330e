package data

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestEmbeddedFashionMNIST(t *testing.T) {
	train, test, err := EmbeddedFashionMNIST()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		ds       Dataset
		n        int
		perClass int // 0: not balanced
	}{{"train", train, EmbeddedTrainLen, EmbeddedPerClass}, {"test", test, EmbeddedTestLen, 0}} {
		if c.ds.Len() != c.n {
			t.Errorf("%s: %d examples, want %d", c.name, c.ds.Len(), c.n)
		}
		f := c.ds.Fields()
		if len(f) != 2 || f[0].Name != "x" || f[0].Size() != 784 || f[1].Name != "y" || f[1].Size() != 1 {
			t.Fatalf("%s: fields %v", c.name, f)
		}
		var count [MNISTClasses]int
		var sum float64
		dst := [][]float32{make([]float32, 784), make([]float32, 1)}
		for i := range c.ds.Len() {
			if err := c.ds.Read(i, dst); err != nil {
				t.Fatal(err)
			}
			count[int(dst[1][0])]++
			for _, v := range dst[0] {
				if v < 0 || v > 1 {
					t.Fatalf("%s: example %d pixel %v outside [0, 1]", c.name, i, v)
				}
				sum += float64(v)
			}
		}
		for k, n := range count {
			if n == 0 {
				t.Errorf("%s: class %d (%s) absent", c.name, k, FashionMNISTClassNames[k])
			}
			if c.perClass > 0 && n != c.perClass {
				t.Errorf("%s: class %d has %d examples, want %d", c.name, k, n, c.perClass)
			}
		}
		// Real clothing images: mean intensity near Fashion-MNIST's 0.286,
		// not blank or noise.
		if mean := sum / float64(c.ds.Len()*784); mean < 0.25 || mean > 0.32 {
			t.Errorf("%s: mean pixel %.3f, want about 0.286", c.name, mean)
		}
	}
}

// The embedded subset is what mkembed makes from the full set: its test part
// is the first 1000 images, byte for byte.
func TestEmbeddedMatchesFullSet(t *testing.T) {
	if !hasFashionFiles(DefaultFashionMNISTDir) {
		t.Skip("full Fashion-MNIST not installed (apt install dataset-fashion-mnist)")
	}
	_, test, err := EmbeddedFashionMNIST()
	if err != nil {
		t.Fatal(err)
	}
	full, err := FashionMNIST(DefaultFashionMNISTDir, "test")
	if err != nil {
		t.Fatal(err)
	}
	if full.Len() != 10000 {
		t.Errorf("full test set has %d images, want 10000", full.Len())
	}
	a := [][]float32{make([]float32, 784), make([]float32, 1)}
	b := [][]float32{make([]float32, 784), make([]float32, 1)}
	for _, i := range []int{0, 1, 500, 999} {
		test.Read(i, a)
		full.Read(i, b)
		for j := range a[0] {
			if a[0][j] != b[0][j] {
				t.Fatalf("test image %d differs from the full set at pixel %d", i, j)
			}
		}
		if a[1][0] != b[1][0] {
			t.Errorf("test label %d: %v vs %v", i, a[1][0], b[1][0])
		}
	}
}

func TestOpenFashionMNIST(t *testing.T) {
	// A directory given explicitly must hold the files.
	empty := t.TempDir()
	if _, _, _, err := OpenFashionMNIST(empty); err == nil || !contains(err.Error(), filepath.Join(empty, "train-images-idx3-ubyte.gz")) {
		t.Errorf("empty dir: %v, want an error naming the missing file", err)
	}
	if _, _, _, err := OpenFashionMNIST(filepath.Join(empty, "nope")); err == nil || !contains(err.Error(), "is not a directory") {
		t.Errorf("missing dir: %v", err)
	}
	// A directory with the files (copied from the embedded subset, one of
	// them uncompressed to check the plain-name fallback).
	dir := t.TempDir()
	for _, name := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		b, err := embeddedFS.ReadFile("embedded/" + name)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	train, test, src, err := OpenFashionMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	if src != dir || train.Len() != EmbeddedTrainLen || test.Len() != EmbeddedTestLen {
		t.Errorf("source %q, %d/%d examples", src, train.Len(), test.Len())
	}
	if _, err := FashionMNIST(dir, "valid"); err == nil || !contains(err.Error(), `split "valid"`) {
		t.Errorf("bad split: %v", err)
	}
	// Default: the installed set when present, else the embedded subset.
	_, _, src, err = OpenFashionMNIST("")
	if err != nil {
		t.Fatal(err)
	}
	want := "embedded subset (6000 train / 1000 test)"
	if hasFashionFiles(DefaultFashionMNISTDir) {
		want = DefaultFashionMNISTDir
	}
	if src != want {
		t.Errorf("source %q, want %q", src, want)
	}
}

func TestMNISTLoaderBatch(t *testing.T) {
	train, _, err := EmbeddedFashionMNIST()
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLoader(train, LoaderConfig{BatchSize: 64, Shuffle: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.NumBatches(0); got != 94 { // ceil(6000/64)
		t.Errorf("NumBatches %d, want 94", got)
	}
	it := l.Iter(context.Background(), 0)
	defer it.Close()
	b, ok := it.Next()
	if !ok {
		t.Fatal(it.Err())
	}
	x, _ := b.Field("x")
	y, _ := b.Field("y")
	if len(x) != 64*784 || len(y) != 64 {
		t.Fatalf("batch x %d y %d", len(x), len(y))
	}
	m := train.(*MNIST)
	for r, i := range b.Indices {
		if int(y[r]) != m.Label(i) {
			t.Errorf("row %d: label %v, dataset says %d", r, y[r], m.Label(i))
		}
	}
}
