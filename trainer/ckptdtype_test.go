package trainer_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// A float32 checkpoint evaluated with Precision "64" is one error that
// names the precision to use, not a line per tensor (and, from a sharded
// checkpoint, a line per tensor and shard, without the precision).
func TestCheckpointOfAnotherDtypeIsOneError(t *testing.T) {
	ctx := context.Background()
	ds := regression(t, 64, 0.01, 4)
	whole := t.TempDir()
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 1, DefaultRootDir: whole}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(ctx, newEvalReg(), loader(t, ds, 8, false, false), nil); err != nil {
		t.Fatal(err)
	}
	sharded := t.TempDir()
	fitShardedOnTwoRanks(t, ds, sharded)
	for _, ckpt := range []string{
		filepath.Join(whole, "lightning_logs", "version_0", "checkpoints", "last.ckpt"),
		filepath.Join(sharded, "checkpoints", "last.ckpt"),
	} {
		tr, err := trainer.New(quiet(trainer.Config{Precision: "64"}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tr.Validate(ctx, newEvalReg(), loader(t, ds, 8, false, false), trainer.WithCheckpoint(ckpt))
		if err == nil {
			t.Fatalf("%s: a float32 checkpoint loaded at Precision 64", ckpt)
		}
		msg := err.Error()
		if n := strings.Count(msg, "Precision"); n != 1 || !strings.Contains(msg, `set Precision to "32"`) {
			t.Errorf("%s: %d mentions of Precision, want one that says to set it to \"32\":\n%s", ckpt, n, msg)
		}
		if !strings.Contains(msg, `"w"`) {
			t.Errorf("%s: the error does not name the tensors:\n%s", ckpt, msg)
		}
	}
}
