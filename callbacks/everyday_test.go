package callbacks_test

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Saving every N train steps while monitoring a validation metric waits for
// the first validation, with one warning, instead of failing Fit.
func TestModelCheckpointStepSavesWaitForMonitoredMetric(t *testing.T) {
	dir := t.TempDir()
	mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, Monitor: "val_loss", EveryNTrainSteps: 5, SaveTopK: -1, Filename: "{epoch}-{step}"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tr, err := trainer.New(trainer.Config{MaxEpochs: 2, Seed: 5, Out: &out, EnableProgressBar: trainer.Bool(false),
		DefaultRootDir: t.TempDir(), Callbacks: []trainer.Callback{mc}})
	if err != nil {
		t.Fatal(err)
	}
	train, val := regression(t)
	if err := tr.Fit(context.Background(), &linreg{}, train, val); err != nil {
		t.Fatalf("Fit: %v", err)
	}
	// 16 steps an epoch: steps 5, 10 and 15 come before the first
	// validation and are skipped; 20, 25 and 30 are ranked by val_loss.
	want := []string{"epoch=1-step=20.ckpt", "epoch=1-step=25.ckpt", "epoch=1-step=30.ckpt"}
	if got := files(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	if n := strings.Count(out.String(), `ModelCheckpoint(Monitor "val_loss"): the metric is not logged yet`); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, out.String())
	}
	if mc.BestModelPath() == "" {
		t.Error("no best model path")
	}
}
