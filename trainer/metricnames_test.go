package trainer_test

import (
	"context"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
)

// logsAs is linreg logging its training loss under another name.
type logsAs struct {
	linreg
	name string
}

func (m *logsAs) TrainingStep(s *module.Step) (*G.Node, error) {
	loss := m.loss(s)
	s.Log(m.name, loss)
	return loss, nil
}

// callbackLogs logs one value under a name from OnTrainEpochEnd.
type callbackLogs struct{ name string }

func (*callbackLogs) Name() string { return "callbackLogs" }
func (c *callbackLogs) OnTrainEpochEnd(ctx context.Context, s *trainer.State) error {
	return s.LogMetrics(map[string]float64{c.name: 1})
}

// TestReservedMetricNames: "step" is every logger's step (metrics.csv's
// step column, metrics.jsonl's "step" key, TensorBoard's x axis) and
// "epoch" the column the trainer fills in step and validation rows; a
// metric of that name, or of none, would replace the row's step in
// metrics.csv, vanish from metrics.jsonl and be a scalar in TensorBoard
// (or an unnamed column); "evaluation" marks the row of a Validate or
// Test (trainer.EvaluationColumn) and would make a training row read as
// one. Logged by a module or by a callback, it is an
// error naming it and what to do.
func TestReservedMetricNames(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	for _, tc := range []struct {
		name     string
		module   string // the name the module logs its loss as
		callback string // the name a callback logs
		want     string
	}{
		{"module step", "step", "", `Log("step")`},
		{"module epoch", "epoch", "", `Log("epoch")`},
		{"module empty", "", "", `Log("")`},
		{"callback step", "train_loss", "step", `"step"`},
		{"callback empty", "train_loss", "", `""`},
		{"module evaluation", "evaluation", "", `Log("evaluation")`},
		{"callback evaluation", "train_loss", "evaluation", `"evaluation"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := trainer.Config{MaxEpochs: 1, DefaultRootDir: t.TempDir()}
			if tc.module == "train_loss" {
				cfg.Callbacks = []trainer.Callback{&callbackLogs{tc.callback}}
			}
			tr, err := trainer.New(quiet(cfg))
			if err != nil {
				t.Fatal(err)
			}
			err = tr.Fit(context.Background(), &logsAs{linreg{in: 4, lr: 0.05}, tc.module}, loader(t, ds, 16, false, false), nil)
			if err == nil {
				t.Fatalf("Fit logging %q from the module, %q from a callback: no error", tc.module, tc.callback)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "name") {
				t.Errorf("error %q does not name %s and what to do", msg, tc.want)
			}
		})
	}
}
