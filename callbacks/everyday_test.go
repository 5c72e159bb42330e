package callbacks_test

import (
	"bytes"
	"context"
	"os"
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

// epochSeen records the epoch callbacks are shown at each epoch end.
type epochSeen struct{ epochs []int }

func (e *epochSeen) Name() string { return "epochSeen" }
func (e *epochSeen) OnTrainEpochEnd(ctx context.Context, s *trainer.State) error {
	e.epochs = append(e.epochs, s.Epoch)
	return nil
}

// Progress lines, metrics.csv, checkpoint names and callbacks number epochs
// alike, from 0 as Lightning does.
func TestOneEpochNumbering(t *testing.T) {
	dir, logDir := t.TempDir(), t.TempDir()
	mc, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, SaveTopK: -1, Filename: "{epoch}"})
	csv, _ := callbacks.NewCSVLogger(logDir)
	seen := &epochSeen{}
	var out bytes.Buffer
	tr, err := trainer.New(trainer.Config{MaxEpochs: 2, Seed: 5, Out: &out, LogEveryNSteps: 16, DefaultRootDir: t.TempDir(),
		Callbacks: []trainer.Callback{mc, seen}, Loggers: []trainer.Logger{csv}})
	if err != nil {
		t.Fatal(err)
	}
	train, val := regression(t)
	if err := tr.Fit(context.Background(), &linreg{}, train, val); err != nil {
		t.Fatal(err)
	}
	want := []int{0, 1}
	if !reflect.DeepEqual(seen.epochs, want) {
		t.Errorf("callbacks saw epochs %v, want %v", seen.epochs, want)
	}
	if got := files(t, dir); !reflect.DeepEqual(got, []string{"epoch=0.ckpt", "epoch=1.ckpt"}) {
		t.Errorf("checkpoints %v, want epoch=0.ckpt and epoch=1.ckpt", got)
	}
	var train0, val1 bool
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "epoch=2") {
			t.Errorf("a log line numbers an epoch 2 of epochs 0 and 1: %q", line)
		}
		train0 = train0 || strings.Contains(line, " train") && strings.Contains(line, "epoch=0")
		val1 = val1 || strings.Contains(line, " validation") && strings.Contains(line, "epoch=1")
	}
	if !train0 || !val1 {
		t.Errorf("want a train line at epoch=0 and a validation line at epoch=1:\n%s", out.String())
	}
	b, err := os.ReadFile(csv.Path())
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(string(b)), "\n")
	col := -1
	for i, h := range strings.Split(rows[0], ",") {
		if h == "epoch" {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("metrics.csv has no epoch column: %q", rows[0])
	}
	epochs := map[string]bool{}
	for _, r := range rows[1:] {
		if f := strings.Split(r, ","); col < len(f) && f[col] != "" {
			epochs[f[col]] = true
		}
	}
	if !reflect.DeepEqual(epochs, map[string]bool{"0": true, "1": true}) {
		t.Errorf("metrics.csv epochs %v, want 0 and 1", epochs)
	}
}
