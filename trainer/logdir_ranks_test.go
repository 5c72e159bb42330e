package trainer_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
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
	group, err := inproc.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{filepath.Join(root, "version_0"), filepath.Join(root, "version_1")}
	logs := make([]*bytes.Buffer, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		s, err := fsdp.New(fsdp.Config{Group: group[r]})
		if err != nil {
			t.Fatal(err)
		}
		logs[r] = &bytes.Buffer{}
		cfg := quiet(trainer.Config{MaxEpochs: 1, Seed: 1, StrategyImpl: s, HandleSignals: trainer.Bool(false),
			LogDir: dirs[r], ShardedCheckpoint: true})
		cfg.Out = logs[r]
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tr.Teardown(ctx)
			errs[r] = tr.Fit(ctx, newEvalReg(), loader(t, regression(t, 64, 0.01, 4), 8, false, false), nil)
		}()
	}
	wg.Wait()
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
