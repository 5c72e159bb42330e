package data

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// MNIST is an image classification dataset read from a pair of IDX files
// (MNIST, Fashion-MNIST): field "x" is the image, shape [1, rows, cols], with
// pixels scaled to [0, 1]; field "y" is the class index as a float32 scalar.
// The pixels stay bytes in memory (47 MB for the 60,000 training images) and
// are converted on Read.
type MNIST struct {
	images []byte
	labels []byte
	n      int
	fields []Field
}

var _ Dataset = (*MNIST)(nil)

// MNISTClasses is the number of classes of MNIST and Fashion-MNIST.
const MNISTClasses = 10

// FashionMNISTClassNames names the ten Fashion-MNIST classes by label.
var FashionMNISTClassNames = [MNISTClasses]string{
	"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
	"Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
}

// pixelScale maps a byte to [0, 1] exactly as float32(b)/255 does.
var pixelScale = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(i) / 255
	}
	return t
}()

// NewMNIST reads an image and a label IDX file (plain or gzip) of 28x28
// images with labels 0..9. Errors name the path and what was expected.
func NewMNIST(imagesPath, labelsPath string) (Dataset, error) {
	return newMNIST(imagesPath, labelsPath, osOpen)
}

func newMNIST(imagesPath, labelsPath string, open func(string) (io.ReadCloser, error)) (*MNIST, error) {
	n, rows, cols, pixels, err := readImages(imagesPath, open)
	if err != nil {
		return nil, err
	}
	if rows != 28 || cols != 28 {
		return nil, fmt.Errorf("data: %s: images are %dx%d, want 28x28 for MNIST-style data", imagesPath, rows, cols)
	}
	labels, err := readLabels(labelsPath, open)
	if err != nil {
		return nil, err
	}
	if len(labels) != n {
		return nil, fmt.Errorf("data: %s holds %d labels but %s holds %d images: the files must come from the same split", labelsPath, len(labels), imagesPath, n)
	}
	for i, c := range labels {
		if c >= MNISTClasses {
			return nil, fmt.Errorf("data: %s: label %d is %d, want a class index 0..%d", labelsPath, i, c, MNISTClasses-1)
		}
	}
	return &MNIST{
		images: pixels,
		labels: labels,
		n:      n,
		fields: []Field{{Name: "x", Shape: []int{1, rows, cols}}, {Name: "y", Shape: []int{}}},
	}, nil
}

// Len is the number of images.
func (m *MNIST) Len() int { return m.n }

// Fields is x [1, 28, 28] and y [] (class index).
func (m *MNIST) Fields() []Field { return m.fields }

// Label is the class index of example i.
func (m *MNIST) Label(i int) int { return int(m.labels[i]) }

// Read copies image i, scaled to [0, 1], and its label.
func (m *MNIST) Read(i int, dst [][]float32) error {
	if i < 0 || i >= m.n {
		return fmt.Errorf("index %d out of range [0, %d)", i, m.n)
	}
	if err := checkDst(m.fields, dst); err != nil {
		return err
	}
	x := dst[0]
	px := m.images[i*len(x) : (i+1)*len(x)]
	for j, p := range px {
		x[j] = pixelScale[p]
	}
	dst[1][0] = float32(m.labels[i])
	return nil
}

// DefaultFashionMNISTDir is where Debian's dataset-fashion-mnist package
// installs the full Fashion-MNIST set.
const DefaultFashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// fashionFiles names the image and label files of a split.
func fashionFiles(split string) (images, labels string, err error) {
	switch split {
	case "train":
		return "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", nil
	case "test", "t10k":
		return "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", nil
	}
	return "", "", fmt.Errorf("split %q is not a Fashion-MNIST split: use \"train\" or \"test\"", split)
}

// FashionMNIST reads one split ("train" or "test") of Fashion-MNIST from dir,
// which holds the standard file names (train-images-idx3-ubyte.gz, ...; the
// uncompressed names without .gz are accepted too).
func FashionMNIST(dir, split string) (Dataset, error) {
	imgName, lblName, err := fashionFiles(split)
	if err != nil {
		return nil, fmt.Errorf("data.FashionMNIST: %w", err)
	}
	img, lbl := findFile(dir, imgName), findFile(dir, lblName)
	ds, err := NewMNIST(img, lbl)
	if err != nil {
		return nil, fmt.Errorf("data.FashionMNIST(%s, %s): %w", dir, split, err)
	}
	return ds, nil
}

// findFile returns dir/name, or dir/name without ".gz" when only that
// exists.
func findFile(dir, name string) string {
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		plain := p[:len(p)-len(".gz")]
		if _, err := os.Stat(plain); err == nil {
			return plain
		}
	}
	return p
}

// OpenFashionMNIST finds Fashion-MNIST: in dir when it is given (an error if
// the files are not there), else in DefaultFashionMNISTDir when it holds the
// four files, else the subset embedded in this package. source says which was
// used: the directory, or "embedded subset (6000 train / 1000 test)".
func OpenFashionMNIST(dir string) (train, test Dataset, source string, err error) {
	if dir == "" {
		if hasFashionFiles(DefaultFashionMNISTDir) {
			dir = DefaultFashionMNISTDir
		} else {
			train, test, err = EmbeddedFashionMNIST()
			if err != nil {
				return nil, nil, "", err
			}
			return train, test, fmt.Sprintf("embedded subset (%d train / %d test)", train.Len(), test.Len()), nil
		}
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, nil, "", fmt.Errorf("data.OpenFashionMNIST: %s is not a directory: give the directory holding train-images-idx3-ubyte.gz and the three other Fashion-MNIST files, or leave it empty to use %s or the embedded subset", dir, DefaultFashionMNISTDir)
	}
	var missing []string
	for _, split := range []string{"train", "test"} {
		img, lbl, _ := fashionFiles(split)
		for _, name := range []string{img, lbl} {
			if p := findFile(dir, name); !exists(p) {
				missing = append(missing, p)
			}
		}
	}
	if len(missing) > 0 {
		return nil, nil, "", fmt.Errorf("data.OpenFashionMNIST: %s has no %s (nor the names without .gz): give the directory holding the four Fashion-MNIST files, or leave it empty to use %s or the embedded subset", dir, strings.Join(missing, ", "), DefaultFashionMNISTDir)
	}
	train, err = FashionMNIST(dir, "train")
	if err != nil {
		return nil, nil, "", err
	}
	test, err = FashionMNIST(dir, "test")
	if err != nil {
		return nil, nil, "", err
	}
	return train, test, dir, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func hasFashionFiles(dir string) bool {
	for _, split := range []string{"train", "test"} {
		img, lbl, _ := fashionFiles(split)
		for _, name := range []string{img, lbl} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				return false
			}
		}
	}
	return true
}

// fsOpen opens files of an fs.FS for the IDX readers.
func fsOpen(fsys fs.FS) func(string) (io.ReadCloser, error) {
	return func(p string) (io.ReadCloser, error) {
		f, err := fsys.Open(p)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
}

var errNoEmbedded = errors.New("embedded Fashion-MNIST subset missing: run go generate ./data")
