package trainer_test

import (
	"context"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/trainer"
)

// offByOneSampler is a sampler of one's own with a bug.
type offByOneSampler struct{}

func (offByOneSampler) Order(epoch, n int) ([]int, []bool) {
	idx := make([]int, n)
	for i := range n + 1 {
		idx[i] = i // index out of range at i == n
	}
	return idx, nil
}

// TestSamplerPanicsAreErrors: a loader's Sampler is the user's code, as a
// Dataset's Read is: a panic in its Order is an error naming the sampler,
// with the stack down to the user's line, from Fit, Test and Predict,
// not a crash.
func TestSamplerPanicsAreErrors(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	bad, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8, Sampler: offByOneSampler{}})
	if err != nil {
		t.Fatal(err)
	}
	good := loader(t, ds, 8, false, false)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	if err != nil {
		t.Fatal(err)
	}
	m := newEvalReg()
	want := []string{"offByOneSampler", "index out of range", "samplerpanic_test.go"}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Fit", func() error { return tr.Fit(context.Background(), m, bad, nil) }},
		{"Test", func() error {
			fitted, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
			if err != nil {
				return err
			}
			if err := fitted.Fit(context.Background(), m, good, nil); err != nil {
				return err
			}
			_, err = fitted.Test(context.Background(), m, bad)
			return err
		}},
		{"Predict", func() error {
			_, err := tr.Predict(context.Background(), m, bad)
			return err
		}},
	} {
		name, call := c.name, c.call
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s panicked: %v", name, r)
					}
				}()
				err = call()
			}()
			errSays(t, name, err, want)
		})
	}
}
