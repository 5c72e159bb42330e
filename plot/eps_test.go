package plot_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/plot"
)

// An EPS chart starts with the "%!PS-Adobe-3.0 EPSF-3.0" line that
// PostScript readers (Ghostscript, LaTeX's epstopdf, file(1)) look for:
// gonum/plot's vgeps writes "%%!PS-Adobe...", which none of them takes for
// PostScript ("ASCII text"). Render and WriteCharts both fix it.
func TestEPSChartsStartWithThePostScriptMagic(t *testing.T) {
	h, err := plot.ReadCSV(strings.NewReader("epoch,step,train_loss\n0,1,2.5\n0,2,1.5\n0,3,1.0\n"), "metrics.csv")
	if err != nil {
		t.Fatal(err)
	}
	runs := []*plot.History{h}
	charts := plot.Layout(runs...)
	if len(charts) == 0 {
		t.Fatal("no chart")
	}
	var buf bytes.Buffer
	if err := plot.Render(&buf, charts[0], runs, "eps", plot.Options{}); err != nil {
		t.Fatal(err)
	}
	const magic = "%!PS-Adobe-3.0 EPSF-3.0\n"
	if !strings.HasPrefix(buf.String(), magic) {
		t.Errorf("Render's EPS starts with %q, want %q", buf.String()[:min(30, buf.Len())], magic)
	}
	dir := t.TempDir()
	files, err := plot.WriteCharts(dir, runs, plot.Options{Formats: []string{"eps"}})
	if err != nil || len(files) == 0 {
		t.Fatalf("WriteCharts: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(magic)) {
			t.Errorf("%s starts with %q, want %q", f, b[:min(30, len(b))], magic)
		}
		if bytes.Contains(b, []byte("%%!PS")) {
			t.Errorf("%s still holds %%%%!PS", f)
		}
	}
}
