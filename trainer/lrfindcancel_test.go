package trainer_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// LRFind stopped by its context says so, matches context.Canceled, and
// points at no checkpoint: its run's files are in a directory it removes.
// Before, its error was the inner Fit's *InterruptedError, naming an
// interrupted.ckpt that no longer existed and telling the user to resume a
// Fit from it.
func TestLRFindCancelledPointsAtNoCheckpoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tr, err := trainer.New(quiet(trainer.Config{DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.LRFind(ctx, newEvalReg(), loader(t, regression(t, 64, 0.01, 1), 8, false, false), trainer.LRFindConfig{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("LRFind with a cancelled context: %v\nwant an error matching context.Canceled", err)
	}
	var ie *trainer.InterruptedError
	if errors.As(err, &ie) && ie.Checkpoint != "" {
		if _, serr := os.Stat(ie.Checkpoint); serr != nil {
			t.Errorf("LRFind's error is an *InterruptedError naming checkpoint %s, which does not exist (%v):\n%v", ie.Checkpoint, serr, err)
		}
	}
	if strings.Contains(err.Error(), "FromCheckpoint") || strings.Contains(err.Error(), ".ckpt") {
		t.Errorf("LRFind's error points at a checkpoint: %v", err)
	}
}
