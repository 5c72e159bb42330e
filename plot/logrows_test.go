package plot_test

import (
	"context"
	"io"
	"math"
	"os"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/plot"
	"github.com/fulgur-ml/fulgur/trainer"
)

// histLogger is a trainer.Logger that keeps the run in memory with
// History.Log.
type histLogger struct{ h plot.History }

func (*histLogger) Name() string                        { return "history" }
func (*histLogger) LogHyperparams(map[string]any) error { return nil }
func (l *histLogger) LogMetrics(step int, m map[string]float64) error {
	l.h.Log(step, m)
	return nil
}
func (*histLogger) Finalize(string) error { return nil }

// A History built by Log, as a Logger receives the run, and the CSV
// logger's file of the same run read back with ReadCSV have the same rows:
// the Test after Fit is an Evaluation in both, so they draw it the same
// way. Before, Log kept the Test's row at epoch 2, past the two epochs
// trained, and drew test_acc by epoch.
func TestLogMarksEvaluationsAsReadCSV(t *testing.T) {
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
	mem := &histLogger{}
	root := t.TempDir()
	csvLog, err := trainer.NewCSVLogger(root)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(trainer.Config{MaxEpochs: 2, LimitTrainBatches: 6, LimitValBatches: 2, LimitTestBatches: 2, LogEveryNSteps: 2, Seed: 1,
		DefaultRootDir: root, Loggers: []trainer.Logger{csvLog, mem},
		Out: io.Discard, EnableProgressBar: trainer.Bool(false), DisableCheckpointing: true, HandleSignals: trainer.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	m := &models.MLP{}
	ctx := context.Background()
	if err := tr.Fit(ctx, m, trainL, testL); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Test(ctx, m, testL); err != nil {
		t.Fatal(err)
	}
	tr.Teardown(ctx)
	path, err := plot.FindMetrics(root)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	read, err := plot.ReadCSV(f, path)
	if err != nil {
		t.Fatal(err)
	}
	got, want := mem.h.Rows, read.Rows
	if len(got) != len(want) {
		t.Fatalf("Log kept %d rows, ReadCSV %d", len(got), len(want))
	}
	evals := 0
	for i := range want {
		g, w := got[i], want[i]
		same := g.Step == w.Step && g.Evaluation == w.Evaluation && (g.Epoch == w.Epoch || math.IsNaN(g.Epoch) && math.IsNaN(w.Epoch)) && len(g.Values) == len(w.Values)
		for k, v := range w.Values {
			gv, ok := g.Values[k]
			same = same && ok && math.Abs(gv-v) <= 1e-6*math.Max(1, math.Abs(v)) // the CSV's text rounds
		}
		if !same {
			t.Errorf("row %d: Log's %+v, ReadCSV's %+v", i, g, w)
		}
		if w.Evaluation {
			evals++
		}
	}
	if evals != 1 {
		t.Errorf("%d Evaluation rows in the file, want the Test's alone", evals)
	}
	if mem.h.EpochLevel("test_acc") {
		t.Errorf("test_acc from Log is drawn by epoch; ReadCSV's by epoch: %v", read.EpochLevel("test_acc"))
	}
}
