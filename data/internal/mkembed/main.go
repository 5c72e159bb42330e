// Command mkembed writes the Fashion-MNIST subset that package data embeds:
// the first -per-class training images of each class, in their original
// order, and the first -test test images, as gzip IDX files with the
// standard names. Run it from package data with go generate; it reads the
// full set from -src.
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fulgur-ml/fulgur/data"
)

func main() {
	src := flag.String("src", data.DefaultFashionMNISTDir, "directory holding the full Fashion-MNIST IDX files")
	out := flag.String("out", "embedded", "directory to write the subset to")
	perClass := flag.Int("per-class", data.EmbeddedPerClass, "training images per class")
	nTest := flag.Int("test", data.EmbeddedTestLen, "test images (the first ones)")
	flag.Parse()
	if err := run(*src, *out, *perClass, *nTest); err != nil {
		fmt.Fprintln(os.Stderr, "mkembed:", err)
		os.Exit(1)
	}
}

func run(src, out string, perClass, nTest int) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	// Training: the first perClass images of each class.
	img, lbl, err := load(src, "train")
	if err != nil {
		return err
	}
	var keep []int
	count := make([]int, data.MNISTClasses)
	for i, c := range lbl.labels {
		if count[c] < perClass {
			count[c]++
			keep = append(keep, i)
		}
	}
	for c, k := range count {
		if k < perClass {
			return fmt.Errorf("class %d has only %d training images, want %d", c, k, perClass)
		}
	}
	if err := write(out, "train", img, lbl, keep); err != nil {
		return err
	}
	// Test: the first nTest images.
	img, lbl, err = load(src, "test")
	if err != nil {
		return err
	}
	if nTest > img.n {
		return fmt.Errorf("-test %d exceeds the %d test images", nTest, img.n)
	}
	keep = keep[:0]
	for i := range nTest {
		keep = append(keep, i)
	}
	return write(out, "t10k", img, lbl, keep)
}

type images struct {
	n, rows, cols int
	pixels        []byte
}

type labels struct{ labels []byte }

func load(src, split string) (images, labels, error) {
	prefix := map[string]string{"train": "train", "test": "t10k"}[split]
	n, r, c, px, err := data.ReadIDXImages(filepath.Join(src, prefix+"-images-idx3-ubyte.gz"))
	if err != nil {
		return images{}, labels{}, err
	}
	l, err := data.ReadIDXLabels(filepath.Join(src, prefix+"-labels-idx1-ubyte.gz"))
	if err != nil {
		return images{}, labels{}, err
	}
	if len(l) != n {
		return images{}, labels{}, fmt.Errorf("%s: %d images but %d labels", split, n, len(l))
	}
	return images{n, r, c, px}, labels{l}, nil
}

func write(out, prefix string, img images, lbl labels, keep []int) error {
	sz := img.rows * img.cols
	px := make([]byte, 0, len(keep)*sz)
	lb := make([]byte, 0, len(keep))
	for _, i := range keep {
		px = append(px, img.pixels[i*sz:(i+1)*sz]...)
		lb = append(lb, lbl.labels[i])
	}
	if err := writeGz(filepath.Join(out, prefix+"-images-idx3-ubyte.gz"), []int{len(keep), img.rows, img.cols}, px); err != nil {
		return err
	}
	return writeGz(filepath.Join(out, prefix+"-labels-idx1-ubyte.gz"), []int{len(keep)}, lb)
}

// writeGz writes a gzip IDX file with no name or time in its header, so that
// regenerating gives the same bytes.
func writeGz(path string, dims []int, b []byte) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if err := data.WriteIDX(zw, dims, b); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
