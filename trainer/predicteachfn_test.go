package trainer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// TestPredictEachFnFailuresNameIt: PredictEach's fn is the user's code
// (a prediction writer): an error it returns is named as its, and a panic
// in it (an index out of range) is an error with the panic value and the
// stack down to the user's line, as a panic in a step or hook is, not a
// crash of the process (and, under ddp, a hang of the other ranks).
func TestPredictEachFnFailuresNameIt(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	if err != nil {
		t.Fatal(err)
	}
	m := newEvalReg()
	if err := tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		fn   func(b trainer.PredictBatch) error
		want []string
	}{
		"error": {func(b trainer.PredictBatch) error { return errors.New("disk full") }, []string{"PredictEach's fn", "disk full"}},
		"panic": {func(b trainer.PredictBatch) error {
			_ = b.Indices[len(b.Indices)+1] // a writer's bug
			return nil
		}, []string{"PredictEach's fn", "index out of range", "predicteachfn_test.go"}},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("PredictEach panicked: %v", r)
					}
				}()
				err = tr.PredictEach(context.Background(), m, loader(t, ds, 8, false, false), tc.fn)
			}()
			errSays(t, tc.fn, err, tc.want)
		})
	}
}
