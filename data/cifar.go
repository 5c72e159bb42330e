package data

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// CIFAR-10 binary version (cifar-10-binary.tar.gz, extracted): files of
// 3073-byte records, one label byte (0..9) then 1024 red, 1024 green and 1024
// blue pixel bytes of a 32x32 image, row-major.
const (
	cifarSide   = 32
	cifarPixels = 3 * cifarSide * cifarSide
	cifarRecord = 1 + cifarPixels
)

// CIFAR10ClassNames names the ten CIFAR-10 classes by label.
var CIFAR10ClassNames = [10]string{
	"airplane", "automobile", "bird", "cat", "deer",
	"dog", "frog", "horse", "ship", "truck",
}

// CIFAR10 is an image classification dataset: field "x" is the image, shape
// [3, 32, 32] (channels first), with pixels scaled to [0, 1]; field "y" is the
// class index as a float32 scalar.
type CIFAR10 struct {
	records []byte // n records of cifarRecord bytes
	n       int
	fields  []Field
}

var _ Dataset = (*CIFAR10)(nil)

// NewCIFAR10 reads one split of the CIFAR-10 binary version from dir (the
// extracted cifar-10-batches-bin directory): "train" is data_batch_1.bin to
// data_batch_5.bin (50,000 images), "test" is test_batch.bin (10,000).
// Errors name the file and what was expected.
func NewCIFAR10(dir, split string) (Dataset, error) {
	var names []string
	switch split {
	case "train":
		for i := 1; i <= 5; i++ {
			names = append(names, fmt.Sprintf("data_batch_%d.bin", i))
		}
	case "test":
		names = []string{"test_batch.bin"}
	default:
		return nil, fmt.Errorf("data.NewCIFAR10: split %q is not a CIFAR-10 split: use \"train\" or \"test\"", split)
	}
	var records []byte
	for _, name := range names {
		b, err := readCIFARFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("data.NewCIFAR10: %w", err)
		}
		records = append(records, b...)
	}
	return &CIFAR10{
		records: records,
		n:       len(records) / cifarRecord,
		fields:  []Field{{Name: "x", Shape: []int{3, cifarSide, cifarSide}}, {Name: "y", Shape: []int{}}},
	}, nil
}

func readCIFARFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: file not found: extract cifar-10-binary.tar.gz and pass the cifar-10-batches-bin directory", path)
		}
		return nil, err
	}
	defer f.Close()
	var head [2]byte
	if n, _ := io.ReadFull(f, head[:]); n == 2 && head[0] == 0x1f && head[1] == 0x8b {
		return nil, fmt.Errorf("%s: is gzip-compressed: extract cifar-10-binary.tar.gz first; the reader takes the .bin files inside it", path)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) == 0 || len(b)%cifarRecord != 0 {
		return nil, fmt.Errorf("%s: %d bytes is not a whole number of %d-byte CIFAR-10 records (1 label + 3072 pixels): the file is truncated or not CIFAR-10 binary", path, len(b), cifarRecord)
	}
	for i := 0; i < len(b); i += cifarRecord {
		if b[i] > 9 {
			return nil, fmt.Errorf("%s: record %d has label %d, want a class index 0..9: the file is not CIFAR-10 binary (CIFAR-100 records are 3074 bytes)", path, i/cifarRecord, b[i])
		}
	}
	return b, nil
}

// Len is the number of images.
func (c *CIFAR10) Len() int { return c.n }

// Fields is x [3, 32, 32] and y [] (class index).
func (c *CIFAR10) Fields() []Field { return c.fields }

// Label is the class index of example i.
func (c *CIFAR10) Label(i int) int { return int(c.records[i*cifarRecord]) }

// Read copies image i, scaled to [0, 1], and its label.
func (c *CIFAR10) Read(i int, dst [][]float32) error {
	if i < 0 || i >= c.n {
		return fmt.Errorf("index %d out of range [0, %d)", i, c.n)
	}
	if err := checkDst(c.fields, dst); err != nil {
		return err
	}
	rec := c.records[i*cifarRecord : (i+1)*cifarRecord]
	x := dst[0]
	for j, p := range rec[1:] {
		x[j] = pixelScale[p]
	}
	dst[1][0] = float32(rec[0])
	return nil
}
