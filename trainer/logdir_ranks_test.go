package trainer_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// TestLogDirIsRankZeros: a program that sets Config.LogDir from
// trainer.VersionDir runs its main again on every self-launched rank, and
// rank 1, started after rank 0 made version_0, computes version_1. Its shards
// of a sharded checkpoint then went to version_1, away from rank 0's index
// in version_0, which no longer loaded. Every rank now takes rank 0's
// LogDir (and says so when its own differs).
func TestLogDirIsRankZeros(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "version_0"), filepath.Join(root, "version_1")}
	logs := []*bytes.Buffer{{}, {}}
	_, errs := onRanks(t, 2, fsdpRank(t), func(r int) trainer.Config {
		cfg := quiet(trainer.Config{MaxEpochs: 1, Seed: 1, LogDir: dirs[r], ShardedCheckpoint: true})
		cfg.Out = logs[r]
		return cfg
	}, func(r int, tr *trainer.Trainer) error {
		defer tr.Teardown(ctx)
		return tr.Fit(ctx, newEvalReg(), loader(t, regression(t, 64, 0.01, 4), 8, false, false), nil)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	last := filepath.Join(dirs[0], "checkpoints", "last.ckpt")
	if _, err := trainer.VerifyCheckpoint(last); err != nil {
		t.Errorf("rank 0's sharded checkpoint does not load: %v", err)
	}
	if _, err := os.Stat(dirs[1]); err == nil {
		t.Errorf("rank 1 wrote into its own LogDir %s", dirs[1])
	}
	if !strings.Contains(logs[1].String(), "rank 0's") {
		t.Errorf("rank 1 did not say it took rank 0's LogDir:\n%s", logs[1])
	}
}
