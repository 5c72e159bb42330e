package trainer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/trainer"
)

// cancelAtRead cancels a context when example at is read: a context
// cancelled while the loader fills a batch (a user's Ctrl-C handler or
// timeout, from another goroutine), which the loader sees before the
// trainer's agreement on stopping does.
type cancelAtRead struct {
	data.Dataset
	at     int
	cancel context.CancelFunc
}

func (d *cancelAtRead) Read(i int, dst [][]float32) error {
	if i == d.at {
		d.cancel()
	}
	return d.Dataset.Read(i, dst)
}

// A Fit whose context is cancelled while a training batch is read stops
// with an *InterruptedError matching context.Canceled (training
// interrupted, the step, the checkpoint saved), not with the loader's
// "training data: context canceled", which sends the user looking for a
// problem in the data; with the loader reading ahead or not.
func TestFitCancelledInDataSaysCancelled(t *testing.T) {
	for _, workers := range []int{-1, 0, 2} {
		ctx, cancel := context.WithCancel(context.Background())
		ds := &cancelAtRead{Dataset: regression(t, 64, 0.01, 1), at: 9, cancel: cancel} // in the third of 16 batches
		l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 4, Prefetch: workers})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, DefaultRootDir: t.TempDir()}))
		if err != nil {
			t.Fatal(err)
		}
		err = tr.Fit(ctx, &linreg{in: 4, lr: 0.05}, l, nil)
		cancel()
		t.Logf("prefetch %d: %v", workers, err)
		var ie *trainer.InterruptedError
		if !errors.As(err, &ie) || !errors.Is(err, context.Canceled) {
			t.Errorf("prefetch %d: Fit cancelled in its third batch's data: %v\nwant an *InterruptedError matching context.Canceled", workers, err)
		}
		if err != nil && strings.Contains(err.Error(), "data") {
			t.Errorf("prefetch %d: Fit cancelled in its third batch's data: %q\nblames the data", workers, err)
		}
	}
}

// The same inside a gradient accumulation window, where no interrupt
// checkpoint can be saved: Fit returns the cancel, saying where and that
// nothing was saved, where it said "epoch 0: training data: context
// canceled".
func TestFitCancelledMidWindowSaysCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ds := &cancelAtRead{Dataset: regression(t, 64, 0.01, 1), at: 9, cancel: cancel} // in the third of 16 batches
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 4, Prefetch: -1})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, AccumulateGradBatches: 4, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(ctx, &linreg{in: 4, lr: 0.05}, l, nil)
	cancel()
	t.Logf("%v", err)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Fit cancelled in its third batch's data: %v\nwant an error matching context.Canceled", err)
	}
	for _, want := range []string{"training was cancelled after 2 of 16 batches", "accumulation window", "nothing was saved"} {
		if err != nil && (!strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "data")) {
			t.Errorf("Fit cancelled in its third batch's data: %q\nwant it to say %q, not to blame the data", err, want)
		}
	}
}
