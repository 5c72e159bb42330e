package trainer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// cancelOnBatch cancels a context at the end of the n-th validation or
// test batch it sees, and counts the batches.
type cancelOnBatch struct {
	n, seen int
	cancel  context.CancelFunc
}

func (c *cancelOnBatch) Name() string { return "cancelOnBatch" }
func (c *cancelOnBatch) end() error {
	c.seen++
	if c.seen == c.n {
		c.cancel()
	}
	return nil
}
func (c *cancelOnBatch) OnValidationBatchEnd(context.Context, *trainer.State) error { return c.end() }
func (c *cancelOnBatch) OnTestBatchEnd(context.Context, *trainer.State) error       { return c.end() }
func (c *cancelOnBatch) OnPredictBatchEnd(context.Context, *trainer.State, trainer.PredictBatch) error {
	return c.end()
}

// Validate, Test, Predict and PredictEach whose context is cancelled
// mid-loop stop at the next batch and return an error matching
// context.Canceled, as the package doc's Errors section says, that says
// the evaluation was cancelled and where: it used to read "validate data:
// context canceled", which sends the user looking for a problem in the
// data.
func TestEvalCancelledMidLoopIsContextCanceled(t *testing.T) {
	l := loader(t, regression(t, 64, 0.01, 1), 4, false, false) // 16 batches
	for call, run := range map[string]func(ctx context.Context, tr *trainer.Trainer) error{
		"Validate": func(ctx context.Context, tr *trainer.Trainer) error {
			_, err := tr.Validate(ctx, newEvalReg(), l)
			return err
		},
		"Test": func(ctx context.Context, tr *trainer.Trainer) error {
			_, err := tr.Test(ctx, newEvalReg(), l)
			return err
		},
		"Predict": func(ctx context.Context, tr *trainer.Trainer) error {
			_, err := tr.Predict(ctx, newEvalReg(), l)
			return err
		},
		"PredictEach": func(ctx context.Context, tr *trainer.Trainer) error {
			return tr.PredictEach(ctx, newEvalReg(), l, func(trainer.PredictBatch) error { return nil })
		},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		cb := &cancelOnBatch{n: 2, cancel: cancel}
		tr, err := trainer.New(quiet(trainer.Config{DefaultRootDir: t.TempDir(), Callbacks: []trainer.Callback{cb}}))
		if err != nil {
			t.Fatal(err)
		}
		err = run(ctx, tr)
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s cancelled at its second batch: %v\nwant an error matching context.Canceled", call, err)
		}
		if cb.seen > 3 {
			t.Errorf("%s cancelled at its second batch ran %d of 16 batches", call, cb.seen)
		}
		mode := strings.ToLower(strings.TrimSuffix(call, "Each"))
		if want := mode + " was cancelled after 2 of 16 batches"; err != nil && (!strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "data")) {
			t.Errorf("%s cancelled at its second batch: %q\nwant it to say %q, not to blame the data", call, err, want)
		}
	}
}
