package data_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

// A Loader given a DistributedSampler whose shard is smaller than
// BatchSize, with DropLast, yielded no batch and no error: a user's own
// loop trained on nothing. NewLoader now refuses it as it refuses a
// dataset smaller than BatchSize; a shard that holds one batch is fine,
// and a sampler that visits more indices than the dataset has is not
// judged by the dataset's length.
func TestNewLoaderDropLastSamplerWithoutBatch(t *testing.T) {
	ds, err := data.NewInMemory([]data.Field{{Name: "x"}}, [][]float32{make([]float32, 300)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = data.NewLoader(ds, data.LoaderConfig{BatchSize: 64, DropLast: true, Sampler: data.DistributedSampler{Rank: 3, World: 8}})
	if err == nil {
		t.Fatal("NewLoader: no error for a 38-example shard, BatchSize 64 and DropLast")
	}
	for _, w := range []string{"BatchSize 64 exceeds the 38 examples", "data.DistributedSampler", "dataset's 300", "unset DropLast"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q, want it to contain %q", err, w)
		}
	}

	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 32, DropLast: true, Sampler: data.DistributedSampler{Rank: 3, World: 8}})
	if err != nil {
		t.Fatalf("a 38-example shard with BatchSize 32: %v", err)
	}
	if got := l.NumBatches(0); got != 1 {
		t.Errorf("NumBatches = %d, want 1", got)
	}

	// 100 draws over 10 examples: 64 fit.
	small, _ := data.NewInMemory([]data.Field{{Name: "x"}}, [][]float32{make([]float32, 10)})
	l, err = data.NewLoader(small, data.LoaderConfig{BatchSize: 64, DropLast: true, Sampler: draws(100)})
	if err != nil {
		t.Fatalf("a sampler of 100 draws over 10 examples, BatchSize 64: %v", err)
	}
	it := l.Iter(context.Background(), 0)
	defer it.Close()
	n := 0
	for b, ok := it.Next(); ok; b, ok = it.Next() {
		n += b.Size
	}
	if it.Err() != nil || n != 64 {
		t.Errorf("read %d rows (err %v), want 64", n, it.Err())
	}
}

// A sampler of the user's that panics is not called into a panic by
// NewLoader's count check: Iter reports it, naming the sampler.
func TestNewLoaderDropLastPanickingSamplerIsIterError(t *testing.T) {
	ds, err := data.NewInMemory([]data.Field{{Name: "x"}}, [][]float32{make([]float32, 8)})
	if err != nil {
		t.Fatal(err)
	}
	var l *data.Loader
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("NewLoader panicked: %v", r)
			}
		}()
		l, err = data.NewLoader(ds, data.LoaderConfig{BatchSize: 2, DropLast: true,
			Sampler: data.DistributedSampler{World: 2, Inner: nilOrderSampler{}}})
	}()
	if err != nil {
		t.Fatal(err)
	}
	it := l.Iter(context.Background(), 0)
	defer it.Close()
	if _, ok := it.Next(); ok || it.Err() == nil || !strings.Contains(it.Err().Error(), "nilOrderSampler.Order") {
		t.Errorf("Iter: err %v, want the sampler's panic as an error", it.Err())
	}
}

// draws visits index i%n for i < k: a sampler with replacement.
type draws int

func (k draws) Order(epoch, n int) ([]int, []bool) {
	idx := make([]int, k)
	for i := range idx {
		idx[i] = i % n
	}
	return idx, nil
}

func (k draws) NumSamples(n int) int { return int(k) }
