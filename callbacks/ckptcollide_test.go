package callbacks_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A Filename template that gives two kept checkpoints the same name (no
// {epoch} or {step} in it, or a metric rounded to the same value) must not
// let the newer file replace the older: as Lightning's, the newer gets a
// "-v1", "-v2"... suffix, and a checkpoint worse than the one of its name
// is not written over it. Before, every save went to model.ckpt: top-k
// kept one file, and "best" held whatever the last epoch had trained.
// 16 steps an epoch; the script logs one score per epoch.
func TestModelCheckpointFilenameCollisions(t *testing.T) {
	for _, c := range []struct {
		name      string
		cfg       callbacks.ModelCheckpointConfig
		scores    []float64
		wantFiles []string
		wantBest  string
		bestStep  int
	}{
		{"top 2 by score", callbacks.ModelCheckpointConfig{Filename: "model", Monitor: "score", SaveTopK: 2},
			[]float64{0.5, 0.2, 0.9}, []string{"model-v1.ckpt", "model.ckpt"}, "model-v1.ckpt", 32},
		{"top 1, a worse epoch", callbacks.ModelCheckpointConfig{Filename: "model", Monitor: "score"},
			[]float64{0.2, 0.5, 0.9}, []string{"model.ckpt"}, "model.ckpt", 16},
		{"top 1, a better epoch replaces it", callbacks.ModelCheckpointConfig{Filename: "model", Monitor: "score"},
			[]float64{0.5, 0.9, 0.2}, []string{"model.ckpt"}, "model.ckpt", 48},
		{"rounded metric", callbacks.ModelCheckpointConfig{Filename: "s={score:.1f}", Monitor: "score", SaveTopK: 3},
			[]float64{0.51, 0.49, 0.9}, []string{"s=score=0.5-v1.ckpt", "s=score=0.5.ckpt", "s=score=0.9.ckpt"}, "s=score=0.5-v1.ckpt", 32},
		{"all, newest first", callbacks.ModelCheckpointConfig{Filename: "model", SaveTopK: -1},
			[]float64{0, 0, 0}, []string{"model-v1.ckpt", "model-v2.ckpt", "model.ckpt"}, "model-v2.ckpt", 48},
		{"named like last.ckpt", callbacks.ModelCheckpointConfig{Filename: "last", SaveLast: true},
			[]float64{0, 0, 0}, []string{"last-v1.ckpt", "last.ckpt"}, "last-v1.ckpt", 48},
	} {
		t.Run(c.name, func(t *testing.T) {
			mc, err := callbacks.NewModelCheckpoint(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			sc := &script{name: "score", values: c.scores}
			if _, err := fit(t, trainer.Config{MaxEpochs: len(c.scores), Callbacks: []trainer.Callback{sc, mc}}, true); err != nil {
				t.Fatal(err)
			}
			if got := files(t, mc.Dir()); !reflect.DeepEqual(got, c.wantFiles) {
				t.Errorf("files %v, want %v", got, c.wantFiles)
			}
			best := filepath.Join(mc.Dir(), c.wantBest)
			if mc.BestModelPath() != best {
				t.Errorf("best %s, want %s", mc.BestModelPath(), best)
			}
			info, err := trainer.ReadCheckpointInfo(best)
			if err != nil {
				t.Fatal(err)
			}
			if info.GlobalStep != c.bestStep {
				t.Errorf("%s holds step %d, want %d", c.wantBest, info.GlobalStep, c.bestStep)
			}
			for p := range mc.BestK() {
				if info, err := trainer.ReadCheckpointInfo(p); err != nil {
					t.Errorf("kept checkpoint %s: %v", p, err)
				} else if p != best && info.GlobalStep == c.bestStep {
					t.Errorf("kept checkpoint %s holds the best's step %d too", p, c.bestStep)
				}
			}
		})
	}
}
