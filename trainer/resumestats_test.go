package trainer_test

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// A Fit resumed from a checkpoint reports the run's epochs and global step
// (as Lightning's current_epoch and global_step), not only what it trained
// itself: resumed where nothing is left, it still reports the run's figures.
func TestResumedFitStatsCountTheRun(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ds := regression(t, 96, 0.01, 4) // 3 batches of 32
	fit := func(maxEpochs int, opts ...trainer.FitOption) trainer.Stats {
		t.Helper()
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: maxEpochs, Seed: 3, LogDir: root}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(ctx, newEvalReg(), loader(t, ds, 32, true, false), nil, opts...); err != nil {
			t.Fatal(err)
		}
		return tr.Stats()
	}
	first := fit(2)
	if first.Epochs != 2 || first.GlobalStep != 6 {
		t.Fatalf("the first Fit: Epochs %d, GlobalStep %d; want 2 and 6", first.Epochs, first.GlobalStep)
	}
	last := filepath.Join(root, "checkpoints", "last.ckpt")
	// Nothing left to train: the run's figures all the same.
	done := fit(2, trainer.FromCheckpoint(last))
	if done.Epochs != 2 || done.GlobalStep != 6 || done.TrainSamples != 0 {
		t.Errorf("resumed with nothing left: Epochs %d, GlobalStep %d, TrainSamples %d; want 2, 6 (the run's) and 0 (this Fit's)", done.Epochs, done.GlobalStep, done.TrainSamples)
	}
	// One epoch more: the run's three, and this Fit's own samples.
	more := fit(3, trainer.FromCheckpoint(last))
	if more.Epochs != 3 || more.GlobalStep != 9 || more.TrainSamples != 96 {
		t.Errorf("resumed for one more epoch: Epochs %d, GlobalStep %d, TrainSamples %d; want 3, 9 and 96 (this Fit's)", more.Epochs, more.GlobalStep, more.TrainSamples)
	}
}

// Test rows in metrics.csv carry the epoch, as Lightning's logger connector
// adds current_epoch to every logged dict: after a Fit, the epochs it
// completed; for a checkpoint's weights, the epochs they were trained for.
func TestTestRowsCarryTheEpoch(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ds := regression(t, 96, 0.01, 4)
	test := loader(t, regression(t, 32, 0.01, 5), 16, false, false)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 3, LogDir: root}))
	if err != nil {
		t.Fatal(err)
	}
	m := newEvalReg()
	if err := tr.Fit(ctx, m, loader(t, ds, 32, true, false), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Test(ctx, m, test); err != nil {
		t.Fatal(err)
	}
	// A new trainer testing the last epoch checkpoint's weights into another directory.
	ckpts, _ := filepath.Glob(filepath.Join(root, "checkpoints", "*.ckpt"))
	var lastEpoch string
	for _, c := range ckpts {
		if info, err := trainer.ReadCheckpointInfo(c); err == nil && info.GlobalStep == 6 && filepath.Base(c) != "last.ckpt" {
			lastEpoch = c
		}
	}
	if lastEpoch == "" {
		t.Fatalf("no epoch checkpoint at step 6 among %v", ckpts)
	}
	other := t.TempDir()
	tr2, err := trainer.New(quiet(trainer.Config{Seed: 3, LogDir: other}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr2.Test(ctx, newEvalReg(), test, trainer.WithCheckpoint(lastEpoch)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		want string
	}{{root, "2"}, {other, "2"}} {
		f, err := os.Open(filepath.Join(c.dir, "metrics.csv"))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		ei, ti := slices.Index(rows[0], "epoch"), slices.Index(rows[0], "test_loss")
		if ei < 0 || ti < 0 {
			t.Fatalf("%s: header %v lacks epoch or test_loss", c.dir, rows[0])
		}
		n := 0
		for _, r := range rows[1:] {
			if r[ti] == "" {
				continue
			}
			n++
			if r[ei] != c.want {
				t.Errorf("%s: test row %v has epoch %q; want %s", c.dir, r, r[ei], c.want)
			}
		}
		if n != 1 {
			t.Errorf("%s: %d test rows; want 1", c.dir, n)
		}
	}
}
