package data_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

// nilOrderSampler has a bug: it reads a nil map.
type nilOrderSampler struct{ order map[int][]int }

func (s nilOrderSampler) Order(epoch, n int) ([]int, []bool) {
	return s.order[epoch][:n], nil // slice of nil past its length
}

// TestIterSamplerPanicIsAnError: a panic in a sampler's Order while an
// epoch starts is the Iter's error, naming the sampler and the user's
// line, as a panic in a Dataset's Read is, not a crash.
func TestIterSamplerPanicIsAnError(t *testing.T) {
	ds, err := data.NewInMemory([]data.Field{{Name: "x"}}, [][]float32{{1, 2, 3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 2, Sampler: nilOrderSampler{}, Prefetch: -1})
	if err != nil {
		t.Fatal(err)
	}
	var it *data.Iter
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Iter panicked: %v", r)
			}
		}()
		it = l.Iter(context.Background(), 0)
	}()
	defer it.Close()
	if _, ok := it.Next(); ok {
		t.Fatal("Next gave a batch")
	}
	err = it.Err()
	for _, want := range []string{"nilOrderSampler.Order", "slice bounds out of range", "samplerpanic_test.go"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Iter's error %v does not say %q", err, want)
		}
	}
}
