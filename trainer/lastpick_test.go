package trainer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/trainer"
)

// "last" is the last.ckpt written last, by the time each checkpoint records
// (its "written" field), not by the file's modification time, which a copy
// without timestamps (cp -r, a download) renews in whatever order it copies;
// nor by global step, which a fresh, shorter run written later has fewer of.
func TestResolveLastIsTheOneWrittenLastAfterACopy(t *testing.T) {
	root := t.TempDir()
	ds := regression(t, 64, 0.1, 3)
	for _, epochs := range []int{3, 1} { // version_0: 12 steps; version_1, later: 4
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: epochs, Seed: 2, DefaultRootDir: root}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, true, false), nil); err != nil {
			t.Fatal(err)
		}
	}
	older := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
	newer := filepath.Join(root, "lightning_logs", "version_1", "checkpoints", "last.ckpt")
	if got, err := trainer.ResolveCheckpoint(root, "last"); err != nil || got != newer {
		t.Fatalf(`ResolveCheckpoint("last") = %q, %v; want %s`, got, err, newer)
	}
	// A copy that wrote version_1 first: its file is now the older one.
	now := time.Now()
	if err := os.Chtimes(newer, now.Add(-time.Minute), now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(older, now, now); err != nil {
		t.Fatal(err)
	}
	got, err := trainer.ResolveCheckpoint(root, "last")
	if err != nil || got != newer {
		t.Errorf(`after a copy that renewed the modification times, ResolveCheckpoint("last") = %q, %v; want %s, written last`, got, err, newer)
	}
	if got, err := trainer.LatestCheckpoint(root); err != nil || filepath.Dir(got) != filepath.Dir(newer) {
		t.Errorf("LatestCheckpoint = %q, %v; want one in %s", got, err, filepath.Dir(newer))
	}
	info, err := trainer.ReadCheckpointInfo(newer)
	if err != nil || info.Written.IsZero() || info.Written.After(time.Now()) {
		t.Errorf("ReadCheckpointInfo(%s).Written = %v, %v; want the time of the save", newer, info.Written, err)
	}
}
