package plot_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/plot"
)

// "grad/norm" and "grad_norm" both became the chart metric_grad_norm, so
// the second chart's files overwrote the first's and report.md linked the
// same picture twice: one metric's chart was lost. Each chart now has its
// own file.
func TestWriteChartsLookalikeNamesKeepEveryChart(t *testing.T) {
	const csv = "epoch,grad/norm,grad_norm,step\n0,1,20,10\n0,2,30,20\n"
	h, err := plot.ReadCSV(strings.NewReader(csv), "metrics.csv")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := plot.WriteCharts(dir, []*plot.History{h}, plot.Options{Formats: []string{"svg"}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f] {
			t.Errorf("WriteCharts wrote %s twice: %v", f, files)
		}
		seen[f] = true
	}
	// Each metric's chart is in a file of its own: find each key's chart
	// by its legend text.
	for _, key := range []string{"grad/norm", "grad_norm"} {
		n := 0
		for f := range seen {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), ">"+key+"<") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d chart files show %q, want 1 (files %v)", n, key, files)
		}
	}
}
