package data

import (
	"embed"
	"fmt"
)

//go:generate go run ./internal/mkembed -out embedded

// The embedded subset of Fashion-MNIST: the first EmbeddedPerClass training
// images of each class (in their original order) and the first
// EmbeddedTestLen test images, as gzip IDX files made by internal/mkembed from
// the full set.
//
//go:embed embedded
var embeddedFS embed.FS

const (
	// EmbeddedPerClass is the number of training images per class in the
	// embedded subset.
	EmbeddedPerClass = 600
	// EmbeddedTrainLen is the number of training images in the embedded
	// subset.
	EmbeddedTrainLen = EmbeddedPerClass * MNISTClasses
	// EmbeddedTestLen is the number of test images in the embedded subset.
	EmbeddedTestLen = 1000
)

// EmbeddedFashionMNIST returns the Fashion-MNIST subset compiled into this
// package, so that examples and tests run with nothing installed.
func EmbeddedFashionMNIST() (train, test Dataset, err error) {
	open := fsOpen(embeddedFS)
	tr, err := newMNIST("embedded/train-images-idx3-ubyte.gz", "embedded/train-labels-idx1-ubyte.gz", open)
	if err != nil {
		return nil, nil, fmt.Errorf("data.EmbeddedFashionMNIST: %w (%v)", err, errNoEmbedded)
	}
	te, err := newMNIST("embedded/t10k-images-idx3-ubyte.gz", "embedded/t10k-labels-idx1-ubyte.gz", open)
	if err != nil {
		return nil, nil, fmt.Errorf("data.EmbeddedFashionMNIST: %w (%v)", err, errNoEmbedded)
	}
	return tr, te, nil
}
