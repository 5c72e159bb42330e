package plot_test

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/plot"
)

// An empty metrics.csv says how often a run logs in the words of those who
// set it: a program's trainer.Config.LogEveryNSteps and a cli program's
// -log-every-n-steps (FindMetrics' errors name the cli's -loggers alike),
// not a bare Go field a cli user never saw.
func TestReadCSVEmptyNamesTheSetting(t *testing.T) {
	_, err := plot.ReadCSV(strings.NewReader(""), "run/metrics.csv")
	for _, want := range []string{"run/metrics.csv is empty", "-log-every-n-steps", "trainer.Config.LogEveryNSteps"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadCSV of an empty file: %v, want an error containing %q", err, want)
		}
	}
}
