package callbacks_test

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Two ModelCheckpoints that write the same names into the same directory
// delete each other's files: one keeping the best by a metric, one the
// newest, the latter removed the former's best when a newer epoch
// displaced it, leaving BestModelPath naming a deleted file. trainer.New
// refuses them, naming both and the fix; distinct Dirpaths or Filenames
// are accepted.
func TestTwoModelCheckpointsWritingTheSameNamesAreRefused(t *testing.T) {
	mk := func(cfg callbacks.ModelCheckpointConfig) *callbacks.ModelCheckpoint {
		t.Helper()
		mc, err := callbacks.NewModelCheckpoint(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return mc
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name    string
		a, b    callbacks.ModelCheckpointConfig
		refused bool
	}{
		{"both in the run directory", callbacks.ModelCheckpointConfig{Monitor: "val_loss", Mode: "max", Name: "best"}, callbacks.ModelCheckpointConfig{Name: "newest"}, true},
		{"same Dirpath", callbacks.ModelCheckpointConfig{Dirpath: dir, Filename: "m-{step}", Name: "a"}, callbacks.ModelCheckpointConfig{Dirpath: dir + "/", Filename: "m-{step}", EveryNTrainSteps: 5, Name: "b"}, true},
		{"other Filename", callbacks.ModelCheckpointConfig{Monitor: "val_loss", Name: "best", Filename: "best-{epoch}"}, callbacks.ModelCheckpointConfig{Name: "newest"}, false},
		{"other Dirpath", callbacks.ModelCheckpointConfig{Dirpath: dir, Name: "a"}, callbacks.ModelCheckpointConfig{Name: "b"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := trainer.New(trainer.Config{DefaultRootDir: t.TempDir(), Callbacks: []trainer.Callback{mk(c.a), mk(c.b)}})
			if !c.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")

			}
			for _, want := range []string{"Callbacks[0] (" + c.a.Name + ")", "Callbacks[1] (" + c.b.Name + ")", "Dirpath or Filename"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
}

// What the refusal prevents: run as one, the newest-only callback deletes
// the other's best checkpoint. With their own Filenames both keep theirs.
func TestTwoModelCheckpointsKeepTheirFiles(t *testing.T) {
	best, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Monitor: "score", Mode: "max", Name: "best", Filename: "best-{epoch}"})
	if err != nil {
		t.Fatal(err)
	}
	newest, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Name: "newest"})
	if err != nil {
		t.Fatal(err)
	}
	sc := &script{name: "score", values: []float64{0.9, 0.2, 0.1}}
	if _, err := fit(t, trainer.Config{MaxEpochs: 3, Callbacks: []trainer.Callback{sc, best, newest}}, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{best.BestModelPath(), newest.BestModelPath()} {
		if _, err := trainer.ReadCheckpointInfo(p); err != nil {
			t.Errorf("a kept checkpoint is gone: %v", err)
		}
	}
}
