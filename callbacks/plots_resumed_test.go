package callbacks_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A fit resumed into a new run directory from a checkpoint with nothing left
// to train (the command line's "fit -ckpt-path last" run again) succeeds:
// it logged nothing there, so Plots has nothing to draw and says why,
// instead of failing the run for a metrics.csv that was never due.
func TestPlotsAfterAResumedFitThatTrainedNothing(t *testing.T) {
	fit := func(dir string, opts ...trainer.FitOption) (*callbacks.Plots, string, error) {
		t.Helper()
		csvLog, err := callbacks.NewCSVLogger(dir)
		if err != nil {
			t.Fatal(err)
		}
		plots, err := callbacks.NewPlots(callbacks.PlotsConfig{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		tr, err := trainer.New(trainer.Config{MaxEpochs: 1, LogDir: dir, Out: &out, EnableProgressBar: trainer.Bool(false),
			Loggers: []trainer.Logger{csvLog}, Callbacks: []trainer.Callback{plots}})
		if err != nil {
			t.Fatal(err)
		}
		err = tr.Fit(context.Background(), plotsModel{}, plotsData(t), nil, opts...)
		return plots, out.String(), err
	}
	first := t.TempDir()
	if p, _, err := fit(first); err != nil || len(p.Files()) == 0 {
		t.Fatalf("the first fit: %v, charts %v", err, p.Files())
	}
	last, err := trainer.ResolveCheckpoint(first, trainer.CkptLast)
	if err != nil {
		t.Fatal(err)
	}
	p, out, err := fit(t.TempDir(), trainer.FromCheckpoint(last))
	if err != nil {
		t.Fatalf("resumed with nothing left to train: Fit = %v, want nil", err)
	}
	if len(p.Files()) != 0 {
		t.Errorf("charts %v from a fit that logged nothing", p.Files())
	}
	if _, err := os.Stat(p.ReportPath()); !os.IsNotExist(err) {
		t.Errorf("report written for a fit that logged nothing: %v", err)
	}
	if !strings.Contains(out, "Plots") || !strings.Contains(out, "no charts") {
		t.Errorf("output does not say why there are no charts:\n%s", out)
	}
}
