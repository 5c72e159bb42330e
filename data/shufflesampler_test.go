package data_test

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

// Shuffle beside a Sampler of one's own was ignored without a word (the
// sampler decides the order), so a loader asked to shuffle read in the
// sampler's order. As PyTorch's DataLoader, which says "sampler option is
// mutually exclusive with shuffle", NewLoader refuses it; a loader's own
// validated config (Shuffle with the RandomSampler it stands for) is
// accepted back.
func TestShuffleBesideASamplerIsRefused(t *testing.T) {
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{1}}}, [][]float32{make([]float32, 6)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = data.NewLoader(ds, data.LoaderConfig{BatchSize: 2, Shuffle: true, Sampler: data.SequentialSampler{}})
	if err == nil || !strings.Contains(err.Error(), "Shuffle is set and Sampler is data.SequentialSampler") {
		t.Errorf("Shuffle beside a SequentialSampler: %v", err)
	}
	_, err = data.NewLoader(ds, data.LoaderConfig{BatchSize: 2, Shuffle: true, Seed: 4, Sampler: data.RandomSampler{Seed: 5}})
	if err == nil || !strings.Contains(err.Error(), "leave Shuffle false") {
		t.Errorf("Shuffle beside a RandomSampler of another seed: %v", err)
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 2, Shuffle: true, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := data.NewLoader(ds, l.Config()); err != nil {
		t.Errorf("a loader's own config: %v", err)
	}
}
