package trainer_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// An epoch shorter than LogEveryNSteps (50 by default) records no step
// metric in an epoch: with a small data set, metrics.csv held validation
// rows and no train_loss at all, and nothing said why. As Lightning does,
// the trainer says so once, naming both numbers and the fix; with a
// shorter interval, or no logger, it says nothing.
func TestLogEveryNStepsAboveTheEpochWarns(t *testing.T) {
	const warning = "LogEveryNSteps is above the epoch's optimizer steps"
	ds := regression(t, 320, 0, 1) // 10 batches of 32
	for _, c := range []struct {
		name     string
		cfg      trainer.Config
		warnings int
	}{
		{"default interval", trainer.Config{MaxEpochs: 2}, 1},
		{"accumulated: 4 steps an epoch", trainer.Config{MaxEpochs: 2, LogEveryNSteps: 5, AccumulateGradBatches: 3}, 1},
		{"interval within the epoch", trainer.Config{MaxEpochs: 2, LogEveryNSteps: 10}, 0},
		{"no logger", trainer.Config{MaxEpochs: 2, DisableLogger: true}, 0},
		// A smoke test of a batch or two is short on purpose; lowering
		// LogEveryNSteps is not what it asks for.
		{"fast dev run", trainer.Config{FastDevRun: 2}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			c.cfg.DefaultRootDir, c.cfg.DisableCheckpointing = t.TempDir(), true
			cfg := quiet(c.cfg)
			cfg.Out = &buf
			tr, err := trainer.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, ds, 32, false, false), nil); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(buf.String(), warning); n != c.warnings {
				t.Errorf("the warning appears %d times, want %d:\n%s", n, c.warnings, buf.String())
			}
			if c.warnings == 0 {
				return
			}
			for _, want := range []string{"log_every_n_steps=", "steps="} {
				if !strings.Contains(buf.String(), want) {
					t.Errorf("the warning does not name %q:\n%s", want, buf.String())
				}
			}
		})
	}
}
