package callbacks_test

import (
	"path/filepath"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// last.ckpt holds the weights the run ended with, as Lightning's save_last
// does (it is refreshed at every epoch's end, whether or not a ranked
// checkpoint is due then): "-ckpt-path last" evaluates the trained weights
// and resumes where the run stopped. Saved only when a ranked checkpoint was
// due, it held step 30 of a 32-step run (every 10 steps), or step 16 of it
// (every 3 epochs, which 2 epochs never reach).
func TestModelCheckpointLastHoldsTheFinalWeights(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     callbacks.ModelCheckpointConfig
		withVal bool
	}{
		{"every 10 steps", callbacks.ModelCheckpointConfig{EveryNTrainSteps: 10, SaveLast: true}, true},
		{"every 10 steps, no validation", callbacks.ModelCheckpointConfig{EveryNTrainSteps: 10, SaveLast: true}, false},
		{"every 10 steps, ranked by validation", callbacks.ModelCheckpointConfig{EveryNTrainSteps: 10, SaveLast: true, Monitor: "val_loss"}, true},
		{"every 3 epochs", callbacks.ModelCheckpointConfig{EveryNEpochs: 3, SaveLast: true}, true},
		{"every 3 epochs, no validation", callbacks.ModelCheckpointConfig{EveryNEpochs: 3, SaveLast: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			mc, err := callbacks.NewModelCheckpoint(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			tr, err := fit(t, trainer.Config{MaxEpochs: 2, DefaultRootDir: root, Callbacks: []trainer.Callback{mc}}, c.withVal)
			if err != nil {
				t.Fatal(err)
			}
			if got := tr.Stats().GlobalStep; got != 32 {
				t.Fatalf("global step %d, want 32", got)
			}
			last := filepath.Join(mc.Dir(), "last.ckpt")
			info, err := trainer.ReadCheckpointInfo(last)
			if err != nil {
				t.Fatal(err)
			}
			if info.GlobalStep != 32 {
				t.Errorf("last.ckpt holds step %d, want the run's final step 32", info.GlobalStep)
			}
			if p, err := trainer.ResolveCheckpoint(root, "last"); err != nil || p != last {
				t.Errorf(`ResolveCheckpoint("last") = %q, %v; want %s`, p, err, last)
			}
			if mc.LastModelPath() != last {
				t.Errorf("LastModelPath %q, want %s", mc.LastModelPath(), last)
			}
		})
	}
}
