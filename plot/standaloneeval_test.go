package plot_test

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/plot"
	"github.com/fulgur-ml/fulgur/trainer"
)

// evalHistLogger is histLogger that also takes the trainer's evaluation
// rows as such (trainer.EvaluationLogger).
type evalHistLogger struct{ histLogger }

func (l *evalHistLogger) LogEvaluation(step int, stage string, m map[string]float64) error {
	l.h.LogEvaluation(step, m)
	return nil
}

var _ trainer.EvaluationLogger = (*evalHistLogger)(nil)

// A Test of a checkpoint's weights in a trainer that did not fit (the
// cli's test -ckpt-path, or trainer.Test in a new process) writes a
// metrics.csv holding its row alone, at the checkpoint's step with the
// epochs it completed. Nothing comes before it to tell it from a training
// row by position, so the trainer records it as an evaluation's; before,
// test_acc was drawn by epoch, at one epoch past the checkpoint's last.
func TestStandaloneTestRowIsAnEvaluation(t *testing.T) {
	train, test, _, err := data.OpenFashionMNIST("")
	if err != nil {
		t.Fatal(err)
	}
	trainL, err := data.NewLoader(train, data.LoaderConfig{BatchSize: 64, Shuffle: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	testL, err := data.NewLoader(test, data.LoaderConfig{BatchSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := trainer.Config{MaxEpochs: 2, LimitTrainBatches: 3, LimitValBatches: 1, LimitTestBatches: 2, Seed: 1,
		DefaultRootDir: t.TempDir(), Out: io.Discard, EnableProgressBar: trainer.Bool(false),
		DisableCheckpointing: true, HandleSignals: trainer.Bool(false)}
	fit, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := fit.Fit(ctx, &models.MLP{}, trainL, nil); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(t.TempDir(), "fit.ckpt")
	if err := fit.SaveCheckpoint(ctx, ckpt); err != nil {
		t.Fatal(err)
	}
	fit.Teardown(ctx)

	root := t.TempDir()
	mem := &evalHistLogger{}
	csvLog, err := trainer.NewCSVLogger(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultRootDir, cfg.Loggers = root, []trainer.Logger{csvLog, mem}
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Test(ctx, &models.MLP{}, testL, trainer.WithCheckpoint(ckpt)); err != nil {
		t.Fatal(err)
	}
	tr.Teardown(ctx)
	read, _, err := plot.ReadRun(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]*plot.History{"ReadCSV": read, "History.Log": &mem.h} {
		if len(h.Rows) != 1 {
			t.Fatalf("%s: %d rows, want the Test's alone: %+v", name, len(h.Rows), h.Rows)
		}
		r := h.Rows[0]
		if !r.Evaluation || !math.IsNaN(r.Epoch) || r.Step != 6 {
			t.Errorf("%s: the Test's row is %+v; want an Evaluation at step 6 with no epoch", name, r)
		}
		if h.EpochLevel("test_acc") {
			t.Errorf("%s: test_acc, logged by a Test of a checkpoint, is drawn by epoch", name)
		}
		if _, ok := r.Values["test_acc"]; !ok {
			t.Errorf("%s: the Test's row has no test_acc: %v", name, r.Values)
		}
		if _, ok := r.Values["evaluation"]; ok {
			t.Errorf("%s: the record of an evaluation is kept as a metric: %v", name, r.Values)
		}
		for _, c := range plot.Layout(h) {
			if c.X == plot.Epochs {
				t.Errorf("%s: chart %s draws %v by epoch", name, c.Name, c.Keys)
			}
		}
	}
}

// The record reads back from the column alone, and beside rows of a file
// written without it (an older run resumed into the same directory), where
// the position rule still finds the Test after training. The column is no
// metric of its own.
func TestEvaluationColumn(t *testing.T) {
	csv := `epoch,evaluation,step,test_acc,train_loss_epoch,val_acc
0,,5,,2.1,
0,,5,,,0.41
1,,5,0.40,,
1,,10,,1.8,
1,1,10,,,0.57
2,1,10,0.57,,
`
	h, err := plot.ReadCSV(strings.NewReader(csv), "metrics.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{false, false, true, false, true, true}
	for i, r := range h.Rows {
		if r.Evaluation != want[i] {
			t.Errorf("row %d (step %d): Evaluation %v, want %v", i, r.Step, r.Evaluation, want[i])
		}
		if _, ok := r.Values["evaluation"]; ok {
			t.Errorf("row %d: the evaluation column is read as a metric", i)
		}
	}
	if !h.EpochLevel("train_loss_epoch") || h.EpochLevel("test_acc") {
		t.Errorf("by epoch: train_loss_epoch %v (want true), test_acc %v (want false)", h.EpochLevel("train_loss_epoch"), h.EpochLevel("test_acc"))
	}
	for _, k := range h.Keys() {
		if k == "evaluation" {
			t.Errorf("keys %v hold the evaluation column", h.Keys())
		}
	}
}
