package cli

import (
	"fmt"

	"github.com/fulgur-ml/fulgur/data"
)

// DataModule gives a run its loaders, as Lightning's LightningDataModule.
// Its fields tagged `flag:"name"` are flags (the data: section of a config
// file), as a model's are.
type DataModule interface {
	// Loaders opens the data; seed is the run's -seed, for shuffling.
	Loaders(seed uint64) (Loaders, error)
}

// Loaders are a run's data. A nil loader is a split the data lacks:
// validate needs Val, test Test, predict Predict.
type Loaders struct {
	Train, Val, Test, Predict *data.Loader
	// Source says where the data came from (a directory, "embedded"), for
	// the log and the summary's "data".
	Source string
}

// check says which loader command needs and d lacks.
func (l Loaders) check(command string, d DataModule) error {
	var have *data.Loader
	field := map[string]string{"fit": "Train", "lr-find": "Train", "validate": "Val", "test": "Test", "predict": "Predict"}[command]
	switch command {
	case "fit", "lr-find":
		have = l.Train
	case "validate":
		have = l.Val
	case "test":
		have = l.Test
	case "predict":
		have = l.Predict
	}
	if have == nil {
		return fmt.Errorf("%s: the data (%T) gives no Loaders.%s: set it in its Loaders method, or run another command", command, d, field)
	}
	return nil
}

// FashionMNIST is the examples' data: Fashion-MNIST from -data, else the
// installed copy (Debian's dataset-fashion-mnist), else the embedded
// subset. As in Lightning's MNIST examples, the test split doubles as the
// validation set and is what predict reads. By default nothing is selected
// on it; with -ckpt-monitor val_loss (or EarlyStopping on a val_ metric)
// the choice is made on the test split, so "test -ckpt-path best" then
// reports an optimistic figure: give a DataModule of your own whose Val
// holds out part of the training set for that.
type FashionMNIST struct {
	Dir string `flag:"data" help:"directory of the data set (default: installed copy, else the embedded subset)"`
	// BatchSize is the examples per training batch, per rank; the
	// validation, test and predict batches hold max(BatchSize, 256):
	// evaluation keeps no gradients, so a larger batch costs little memory
	// and runs the split in fewer steps.
	BatchSize int  `flag:"batch-size" default:"64" check:">=1" help:"examples per training batch (per rank); validation, test and predict batches hold max(this, 256)"`
	DropLast  bool `flag:"drop-last" help:"drop the last partial training batch"`
}

// evalBatchSize is the least batch of FashionMNIST's validation, test and
// predict loaders.
const evalBatchSize = 256

// Loaders opens the data set.
func (d *FashionMNIST) Loaders(seed uint64) (Loaders, error) {
	train, test, source, err := data.OpenFashionMNIST(d.Dir)
	if err != nil {
		return Loaders{}, err
	}
	trainL, err := data.NewLoader(train, data.LoaderConfig{BatchSize: d.BatchSize, Shuffle: true, DropLast: d.DropLast, Seed: seed})
	if err != nil {
		return Loaders{}, err
	}
	testL, err := data.NewLoader(test, data.LoaderConfig{BatchSize: max(d.BatchSize, evalBatchSize)})
	if err != nil {
		return Loaders{}, err
	}
	return Loaders{Train: trainL, Val: testL, Test: testL, Predict: testL, Source: source}, nil
}
