package callbacks_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Saving every N train steps while monitoring a validation metric keeps
// unranked recovery checkpoints until the first validation, with one
// warning, instead of failing Fit.
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
	// validation and are kept unranked, each replacing the one before;
	// the validations at steps 16 and 32 rank the weights they measured,
	// replacing the unranked ones (20, 25, 30) before them.
	want := []string{"epoch=0-step=16.ckpt", "epoch=1-step=32.ckpt"}
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

// tinyCNN is conv -> batch norm -> relu -> flatten -> linear on 1x6x6
// images, its loss the mean squared output.
type tinyCNN struct {
	conv *nn.Conv2d
	bn   *nn.BatchNorm
	relu *nn.ReLU
	flat *nn.Flatten
	fc   *nn.Linear
}

func (m *tinyCNN) Configure(b *module.Builder) error {
	m.conv = nn.NewConv2d(b, "conv", nn.Conv2dConfig{In: 1, Out: 2, Kernel: 3, NoBias: true})
	m.bn = nn.NewBatchNorm2d(b, "bn", 2)
	m.relu = nn.NewReLU(b, "relu")
	m.flat = nn.NewFlatten(b, "flat")
	m.fc = nn.NewLinear(b, "fc", 2*4*4, 3)
	return nil
}

func (m *tinyCNN) TrainingStep(s *module.Step) (*G.Node, error) {
	h := m.fc.Forward(s, m.flat.Forward(s, m.relu.Forward(s, m.bn.Forward(s, m.conv.Forward(s, s.Input("x"))))))
	return G.Must(G.Mean(G.Must(G.Square(h)))), nil
}

// ModelSummary shows each layer's input and output sizes for the training
// batch, as Lightning's summary does with an example input.
func TestModelSummaryShowsLayerShapes(t *testing.T) {
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{1, 6, 6}}}, [][]float32{make([]float32, 20*36)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	ms, _ := callbacks.NewModelSummary(&buf, 0)
	tr, err := trainer.New(trainer.Config{MaxSteps: 1, Out: io.Discard, EnableProgressBar: trainer.Bool(false), DefaultRootDir: t.TempDir(), Callbacks: []trainer.Callback{ms}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &tinyCNN{}, l, nil); err != nil {
		t.Fatal(err)
	}
	rows := map[string][2]string{
		"conv": {"[5, 1, 6, 6]", "[5, 2, 4, 4]"},
		"bn":   {"[5, 2, 4, 4]", "[5, 2, 4, 4]"},
		"relu": {"[5, 2, 4, 4]", "[5, 2, 4, 4]"},
		"flat": {"[5, 2, 4, 4]", "[5, 32]"},
		"fc":   {"[5, 32]", "[5, 3]"},
	}
	out := buf.String()
	if !strings.Contains(out, "In sizes") || !strings.Contains(out, "Out sizes") {
		t.Errorf("no In sizes / Out sizes columns:\n%s", out)
	}
	for name, io := range rows {
		found := false
		for _, line := range strings.Split(out, "\n") {
			cells := strings.Split(line, "|")
			if len(cells) < 7 || strings.TrimSpace(cells[2]) != name {
				continue
			}
			found = true
			if in, o := strings.TrimSpace(cells[5]), strings.TrimSpace(cells[6]); in != io[0] || o != io[1] {
				t.Errorf("%s: in %s out %s, want %s and %s", name, in, o, io[0], io[1])
			}
		}
		if !found {
			t.Errorf("no row for %s:\n%s", name, out)
		}
	}
}
