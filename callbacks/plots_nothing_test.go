package callbacks_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
)

// quietModel is plotsModel without a single s.Log.
type quietModel struct{ plotsModel }

func (m quietModel) TrainingStep(s *module.Step) (*G.Node, error) { return m.loss(s), nil }

// A fit whose module logged nothing (no s.Log) succeeds: Plots has nothing to draw and
// says why, instead of failing the finished run with advice to add the
// CSVLogger it has.
func TestPlotsAfterAFitThatLoggedNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model module.Module
		cfg   trainer.Config
	}{
		{"no s.Log", quietModel{}, trainer.Config{MaxEpochs: 1}},
		{"no s.Log, stopped early", quietModel{}, trainer.Config{MaxSteps: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			csvLog, err := callbacks.NewCSVLogger(dir)
			if err != nil {
				t.Fatal(err)
			}
			plots, err := callbacks.NewPlots(callbacks.PlotsConfig{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			cfg := tc.cfg
			cfg.DefaultRootDir, cfg.Out, cfg.EnableProgressBar = dir, &out, trainer.Bool(false)
			cfg.Loggers, cfg.Callbacks = []trainer.Logger{csvLog}, []trainer.Callback{plots}
			tr, err := trainer.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			l := plotsData(t)
			if err := tr.Fit(context.Background(), tc.model, l, nil); err != nil {
				t.Fatalf("Fit = %v, want nil: the run trained", err)
			}
			if len(plots.Files()) != 0 {
				t.Errorf("charts %v from a run that logged nothing", plots.Files())
			}
			if _, err := os.Stat(plots.ReportPath()); !os.IsNotExist(err) {
				t.Errorf("report written for a run that logged nothing: %v", err)
			}
			if s := out.String(); !strings.Contains(s, "Plots") || !strings.Contains(s, "no charts") {
				t.Errorf("output does not say why there are no charts:\n%s", s)
			}
		})
	}
}
