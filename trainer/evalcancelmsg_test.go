package trainer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// An evaluation cancelled mid-loop says it was cancelled, and where; it
// used to read "validate data: context canceled", which sends the user
// looking for a problem in the data.
func TestEvalCancelledMidLoopSaysCancelledNotData(t *testing.T) {
	l := loader(t, regression(t, 64, 0.01, 1), 4, false, false) // 16 batches
	for call, run := range map[string]func(ctx context.Context, tr *trainer.Trainer) error{
		"validate": func(ctx context.Context, tr *trainer.Trainer) error {
			_, err := tr.Validate(ctx, newEvalReg(), l)
			return err
		},
		"test": func(ctx context.Context, tr *trainer.Trainer) error {
			_, err := tr.Test(ctx, newEvalReg(), l)
			return err
		},
		"predict": func(ctx context.Context, tr *trainer.Trainer) error {
			_, err := tr.Predict(ctx, newEvalReg(), l)
			return err
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
		if err == nil {
			t.Fatalf("%s cancelled at its second batch succeeded", call)
		}
		msg := err.Error()
		if want := call + " was cancelled after 2 of 16 batches"; !strings.Contains(msg, want) || strings.Contains(msg, "data") {
			t.Errorf("%s cancelled at its second batch: %q\nwant it to say %q, not to blame the data", call, msg, want)
		}
	}
}
