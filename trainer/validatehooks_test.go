package trainer_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// valEnds records each OnValidationEnd: its stage and val_loss.
type valEnds struct{ calls []string }

func (v *valEnds) Name() string { return "valEnds" }
func (v *valEnds) OnValidationEnd(ctx context.Context, s *trainer.State) error {
	if s.SanityChecking {
		v.calls = append(v.calls, "sanity check")
		return nil
	}
	if _, ok := s.Metrics.Get("val_loss"); !ok {
		v.calls = append(v.calls, s.Stage+" without val_loss")
		return nil
	}
	v.calls = append(v.calls, s.Stage)
	return nil
}

// Trainer.Validate runs the validation-end hooks, as Lightning's
// trainer.validate calls on_validation_end: a callback of the user's sees
// it with State.Stage "validate" and the metrics measured, while
// ModelCheckpoint, which acts on a Fit's validations, saves nothing. (The
// Fit's sanity check runs them too, with State.SanityChecking set.)
func TestValidateRunsValidationEndHooks(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	job.cfg.MaxEpochs = 2
	root := t.TempDir()
	ckdir := filepath.Join(root, "ck")
	mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: ckdir, Monitor: "val_loss", SaveTopK: 3, EveryNTrainSteps: 5})
	if err != nil {
		t.Fatal(err)
	}
	rec := &valEnds{}
	job.cfg.DefaultRootDir = root
	cfg := quiet(job.cfg)
	cfg.Callbacks = []trainer.Callback{rec, mc}
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := job.mod()
	if err := tr.Fit(context.Background(), m, job.train, job.val); err != nil {
		t.Fatal(err)
	}
	before := modTimes(t, ckdir)
	for range 2 {
		if _, err := tr.Validate(context.Background(), m, job.val); err != nil {
			t.Fatalf("Validate: %v", err)
		}
	}
	if want := []string{"sanity check", "fit", "fit", "validate", "validate"}; !slices.Equal(rec.calls, want) {
		t.Errorf("OnValidationEnd calls %v, want %v", rec.calls, want)
	}
	if after := modTimes(t, ckdir); len(before) == 0 || !maps.Equal(after, before) {
		t.Errorf("checkpoints after Fit %v, after Validate %v: want Validate to save none", before, after)
	}
}

// modTimes maps each file of dir to its modification time.
func modTimes(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, e := range es {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fi.ModTime()
	}
	return out
}
