package callbacks_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Checkpoints every N train steps while monitoring a validation metric:
// each validation ranks the checkpoint of the weights it measured, and the
// step checkpoints between validations are recovery points, never ranked
// by the previous validation's value. 16 steps an epoch: validations at
// steps 16, 32 and 48 score 0.5, 0.2 and 0.9; step checkpoints at 10, 20,
// 30 and 40.
func TestModelCheckpointStepSavesRankedByTheValidationThatMeasuredThem(t *testing.T) {
	root := t.TempDir()
	mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Monitor: "score", EveryNTrainSteps: 10, SaveTopK: 2})
	if err != nil {
		t.Fatal(err)
	}
	sc := &script{name: "score", values: []float64{0.5, 0.2, 0.9}}
	tr, err := fit(t, trainer.Config{MaxEpochs: 3, DefaultRootDir: root, Callbacks: []trainer.Callback{sc, mc}}, true)
	if err != nil {
		t.Fatal(err)
	}
	dir := mc.Dir()
	want := map[string]float64{filepath.Join(dir, "epoch=0-step=16.ckpt"): 0.5, filepath.Join(dir, "epoch=1-step=32.ckpt"): 0.2}
	if got := mc.BestK(); !reflect.DeepEqual(got, want) {
		t.Errorf("ranked %v, want %v", got, want)
	}
	best := filepath.Join(dir, "epoch=1-step=32.ckpt")
	if mc.BestModelPath() != best || mc.BestModelScore() != 0.2 {
		t.Errorf("best %s (%v), want %s (0.2)", mc.BestModelPath(), mc.BestModelScore(), best)
	}
	info, err := trainer.ReadCheckpointInfo(best)
	if err != nil || info.GlobalStep != 32 {
		t.Errorf("best checkpoint: %+v %v; want global step 32", info, err)
	}
	// Step 40 is newer than every ranked checkpoint the run kept (step 48
	// did not make the top 2): it stays as the point to resume from.
	wantFiles := []string{"epoch=0-step=16.ckpt", "epoch=1-step=32.ckpt", "epoch=2-step=40.ckpt"}
	if got := files(t, dir); !reflect.DeepEqual(got, wantFiles) {
		t.Errorf("files %v, want %v", got, wantFiles)
	}
	if p, err := trainer.ResolveCheckpoint(root, "best"); err != nil || p != best {
		t.Errorf(`ResolveCheckpoint("best") = %q, %v; want %s`, p, err, best)
	}
	if tr.Stats().GlobalStep != 48 {
		t.Errorf("global step %d, want 48", tr.Stats().GlobalStep)
	}
}

// A monitored training metric still ranks every step checkpoint by the
// value of its own step.
func TestModelCheckpointStepSavesRankedByATrainingMetric(t *testing.T) {
	mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: t.TempDir(), Monitor: "train_loss", EveryNTrainSteps: 5, SaveTopK: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fit(t, trainer.Config{MaxEpochs: 2, Callbacks: []trainer.Callback{mc}}, true); err != nil {
		t.Fatal(err)
	}
	var steps []string
	for p := range mc.BestK() {
		steps = append(steps, filepath.Base(p))
	}
	if len(steps) != 6 {
		t.Errorf("ranked %v, want the 6 step checkpoints 5..30", mc.BestK())
	}
}

// Resumed from a checkpoint, the run still knows the monitored metric came
// from a validation: a step checkpoint before the next validation is not
// ranked by the value the checkpoint restored.
func TestModelCheckpointStepSavesAfterResume(t *testing.T) {
	dir := t.TempDir()
	cfg := callbacks.ModelCheckpointConfig{Dirpath: dir, Monitor: "score", EveryNTrainSteps: 10, SaveTopK: 2}
	mc, _ := callbacks.NewModelCheckpoint(cfg)
	sc := &script{name: "score", values: []float64{0.5, 0.2, 0.9}}
	if _, err := fit(t, trainer.Config{MaxEpochs: 3, Callbacks: []trainer.Callback{sc, mc}}, true); err != nil {
		t.Fatal(err)
	}
	// Resumed at step 32 (ranked 0.2, beside step 16's 0.5): the step
	// checkpoint at 40 is a recovery point, and the validation at 48
	// (0.3) displaces step 16; the one at 64 (0.4) makes no top 2.
	mc2, _ := callbacks.NewModelCheckpoint(cfg)
	sc2 := &script{name: "score", values: []float64{0.3, 0.4}}
	_, err := fit(t, trainer.Config{MaxEpochs: 4, Callbacks: []trainer.Callback{sc2, mc2}}, true, trainer.FromCheckpoint(filepath.Join(dir, "epoch=1-step=32.ckpt")))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{filepath.Join(dir, "epoch=1-step=32.ckpt"): 0.2, filepath.Join(dir, "epoch=2-step=48.ckpt"): 0.3}
	if got := mc2.BestK(); !reflect.DeepEqual(got, want) {
		t.Errorf("ranked %v, want %v", got, want)
	}
}

// A Filename field's format is checked when the callback is built: a verb
// fmt cannot apply used to end up in the file's name ("%!z(float64=...)").
func TestModelCheckpointFilenameFormats(t *testing.T) {
	for _, tc := range []struct {
		filename, err string
	}{
		{"{epoch:03d}-{step:05d}-{val_loss:.2f}-{val_acc:.1e}", ""},
		{"{epoch}-{val_loss:zz}", `{val_loss:zz} is no format for a metric, a number such as .2f or .3e`},
		{"{epoch:.2f}", `{epoch:.2f} is no format for epoch, an integer such as 03d`},
		{"{step:03}", `{step:03} is no format for step, an integer such as 03d`},
	} {
		_, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Filename: tc.filename})
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Filename %q: err = %v, want %q", tc.filename, err, tc.err)
		}
	}
	// The formats in use: the names of the checkpoints written.
	dir := t.TempDir()
	mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, Filename: "{epoch:02d}-{step:03d}-{val_loss:.1e}", Monitor: "val_loss", SaveTopK: -1})
	if err != nil {
		t.Fatal(err)
	}
	sc := &script{name: "val_loss", values: []float64{0.25, 0.125}}
	if _, err := fit(t, trainer.Config{MaxEpochs: 2, Callbacks: []trainer.Callback{sc, mc}}, true); err != nil {
		t.Fatal(err)
	}
	want := []string{"epoch=00-step=016-val_loss=2.5e-01.ckpt", "epoch=01-step=032-val_loss=1.2e-01.ckpt"}
	if got := files(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
}
