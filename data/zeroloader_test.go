package data_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

// A constructor that failed returns a nil *InMemory; passed on unchecked,
// NewLoader must say so rather than panic calling its Fields.
func TestNewLoaderOfNilPointerDatasetNamesIt(t *testing.T) {
	var ds *data.InMemory
	_, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 4})
	if err == nil {
		t.Fatal("NewLoader(nil *InMemory) succeeded")
	}
	for _, w := range []string{"data.NewLoader", "nil *data.InMemory", "constructor"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// rows is a Dataset kept in a slice: nil is its empty value, not a failed
// constructor's.
type rows [][]float32

func (r rows) Len() int                          { return len(r) }
func (r rows) Fields() []data.Field              { return []data.Field{{Name: "x", Shape: []int{2}}} }
func (r rows) Read(i int, dst [][]float32) error { copy(dst[0], r[i]); return nil }

// A nil slice dataset is an empty one, and NewLoader says so; it is not
// told to check a constructor, as a nil *T is.
func TestNewLoaderOfNilSliceDatasetSaysItIsEmpty(t *testing.T) {
	var ds rows
	_, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 4})
	if err == nil || !strings.Contains(err.Error(), "0 examples") || strings.Contains(err.Error(), "constructor") {
		t.Errorf("NewLoader(nil rows): %v\nwant the error of an empty dataset", err)
	}
}

// The zero Loader (var l data.Loader, or &data.Loader{}) has no dataset:
// Iter yields no batch and its Err names NewLoader; NumBatches, which has
// no error to return, is 0, the batches Iter yields.
func TestZeroLoaderIterErrorNamesNewLoader(t *testing.T) {
	for name, l := range map[string]*data.Loader{"zero": {}, "nil": nil} {
		if n := l.NumBatches(0); n != 0 {
			t.Errorf("%s Loader: NumBatches = %d, want 0", name, n)
		}
		it := l.Iter(context.Background(), 0)
		if b, ok := it.Next(); ok {
			t.Errorf("%s Loader: Next gave a batch %v", name, b)
		}
		it.Close()
		err := it.Err()
		if err == nil || !strings.Contains(err.Error(), "data.NewLoader") {
			t.Errorf("%s Loader: Iter's Err = %v, want it to name data.NewLoader", name, err)
		}
	}
}
