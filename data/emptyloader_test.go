package data_test

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

// An empty validation split is a newcomer's mistake (a fraction too small,
// an index list left empty): the error says what to do instead.
func TestNewLoaderOfNoExamplesSaysWhatToDo(t *testing.T) {
	ds, err := data.NewInMemory([]data.Field{{Name: "x"}}, [][]float32{{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := data.NewSubset(ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = data.NewLoader(empty, data.LoaderConfig{BatchSize: 4})
	for _, want := range []string{"dataset has 0 examples", "nil loader"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewLoader of an empty dataset: %v; want it to say %q", err, want)
		}
	}
}
