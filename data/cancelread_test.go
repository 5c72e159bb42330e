package data_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

// cancellingSet cancels its context from inside Read number at (1-based),
// as a Fit is cancelled while its loader reads slow examples.
type cancellingSet struct {
	data.Dataset
	at     int32
	cancel context.CancelFunc
	reads  atomic.Int32
}

func (d *cancellingSet) Read(i int, dst [][]float32) error {
	if d.reads.Add(1) == d.at {
		d.cancel()
	}
	return d.Dataset.Read(i, dst)
}

// A cancelled context stops a batch in the middle: the loader reads no
// example after the Read in progress, where it used to read the rest of
// the batch (and, prefetching, sometimes begin the next one) before Next
// or Close returned, so that a Fit over slow reads returned a batch's read
// time after its context was cancelled.
func TestCancelStopsReadingWithinABatch(t *testing.T) {
	const bs = 100
	x := make([]float32, 4*bs)
	inner, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{1}}}, [][]float32{x})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		prefetch int
		at       int32 // the Read that cancels
	}{
		{"prefetch, first example of the first batch", 0, 1},
		{"prefetch, middle of the second batch", 0, bs + bs/2},
		{"synchronous, first example", -1, 1},
		{"synchronous, middle of the third batch", -1, 2*bs + bs/2},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ds := &cancellingSet{Dataset: inner, at: c.at, cancel: cancel}
			l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: bs, Prefetch: c.prefetch})
			if err != nil {
				t.Fatal(err)
			}
			it := l.Iter(ctx, 0)
			defer it.Close()
			batches := 0
			for {
				if _, ok := it.Next(); !ok {
					break
				}
				batches++
			}
			it.Close() // waits for the prefetch worker
			if !errors.Is(it.Err(), context.Canceled) {
				t.Errorf("Err() = %v, want context.Canceled", it.Err())
			}
			if got := ds.reads.Load(); got != c.at {
				t.Errorf("%d examples read; want %d: reading stops at the Read that saw the cancellation", got, c.at)
			}
			if want := int(c.at-1) / bs; batches > want {
				t.Errorf("%d batches returned after the cancellation in batch %d", batches, want)
			}
		})
	}
}
