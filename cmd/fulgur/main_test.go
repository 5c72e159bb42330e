package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// makeRun writes a metrics.csv whose loss falls by factor per logged step,
// and an hparams.yaml, into root/lightning_logs/version_0.
func makeRun(root string, factor float64) error {
	dir := filepath.Join(root, "lightning_logs", "version_0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("epoch,step,train_loss_step,val_acc,val_loss\n")
	loss := 2.0
	for e := 0; e < 2; e++ {
		for s := 1; s <= 5; s++ {
			loss *= factor
			fmt.Fprintf(&b, "%d,%d,%g,,\n", e, e*5+s, loss)
		}
		fmt.Fprintf(&b, "%d,%d,,%g,%g\n", e, e*5+5, 0.6+0.1*float64(e), loss*1.1)
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.csv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "hparams.yaml"), []byte("lr: 0.001\n\"odd key\": \"x\"\n"), 0o644)
}

func writeRun(t *testing.T, root string, factor float64) string {
	t.Helper()
	if err := makeRun(root, factor); err != nil {
		t.Fatal(err)
	}
	return root
}

func texts(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	var out []string
	in := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			in = tk.Name.Local == "text"
		case xml.CharData:
			if in {
				out = append(out, string(tk))
			}
		case xml.EndElement:
			in = false
		}
	}
}

func TestPlotOneRun(t *testing.T) {
	root := writeRun(t, filepath.Join(t.TempDir(), "mlp"), 0.8)
	var out, errb bytes.Buffer
	if err := run([]string{"plot", "-report", root}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	dir := filepath.Join(root, "lightning_logs", "version_0")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"loss.png", "loss.svg", "loss_epoch.png", "loss_epoch.svg", "accuracy.png", "accuracy.svg", "accuracy_epoch.png", "accuracy_epoch.svg"}
	if len(lines) != len(want)+1 {
		t.Fatalf("printed %q, want %d charts and the report", lines, len(want))
	}
	for i, w := range want {
		if lines[i] != filepath.Join(dir, "plots", w) {
			t.Errorf("line %d = %s, want %s", i, lines[i], filepath.Join(dir, "plots", w))
		}
	}
	f, err := os.Open(filepath.Join(dir, "plots", "loss.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if cfg, err := png.DecodeConfig(f); err != nil || cfg.Width != 768 || cfg.Height != 480 {
		t.Errorf("loss.png: %+v, %v; want 768x480", cfg, err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"# Run report: mlp/version_0", "![loss](plots/loss.png)", "| odd key | x |", "| lr | 0.001 |", "| val_acc | 0.7 | 10 | 0.7 (max) | 10 |"} {
		if !strings.Contains(string(md), w) {
			t.Errorf("report lacks %q:\n%s", w, md)
		}
	}
}

func TestPlotOverlay(t *testing.T) {
	base := t.TempDir()
	a := writeRun(t, filepath.Join(base, "fast"), 0.5)
	b := writeRun(t, filepath.Join(base, "slow"), 0.9)
	dest := filepath.Join(base, "cmp")
	var out, errb bytes.Buffer
	if err := run([]string{"plot", "-o", dest, "-format", "svg", "-labels", "lr=1e-2,lr=1e-3", a, b}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	got := texts(t, filepath.Join(dest, "loss.svg"))
	for _, w := range []string{"lr=1e-2  train_loss_step", "lr=1e-3  train_loss_step", "lr=1e-2  val_loss", "lr=1e-3  val_loss"} {
		found := false
		for _, s := range got {
			found = found || s == w
		}
		if !found {
			t.Errorf("loss.svg lacks legend %q: %q", w, got)
		}
	}
	if _, err := os.Stat(filepath.Join(dest, "loss.png")); !os.IsNotExist(err) {
		t.Errorf("-format svg wrote a png too (%v)", err)
	}
}

func TestPlotErrors(t *testing.T) {
	run1 := writeRun(t, filepath.Join(t.TempDir(), "r"), 0.8)
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"draw"}, `unknown command "draw"`},
		{[]string{"plot"}, "no RUN_DIR given"},
		{[]string{"plot", empty}, "has no metrics.csv"},
		{[]string{"plot", filepath.Join(empty, "nope")}, "no such file"},
		{[]string{"plot", run1, run1}, "with -o DIR"},
		{[]string{"plot", "-o", empty, "-labels", "a", run1, run1}, "-labels names 1 runs but 2"},
		{[]string{"plot", "-format", "bmp", run1}, `format "bmp" is not known`},
		{[]string{"plot", "-smoothing", "1", run1}, "Smoothing is 1"},
		{[]string{"plot", "-o", empty, "-report", run1, run1}, "-report describes one run"},
		// It used to say "run -labels: stat -labels: no such file or directory".
		{[]string{"plot", "-o", empty, run1, run1, "-labels"}, "plot: flag -labels comes after a RUN_DIR: put the flags before the RUN_DIRs"},
	} {
		var out, errb bytes.Buffer
		err := run(tc.args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func Example() {
	root, err := os.MkdirTemp("", "fulgur-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(root)
	if err := makeRun(root, 0.8); err != nil {
		fmt.Println(err)
		return
	}
	var out bytes.Buffer
	if err := run([]string{"plot", "-format", "png", root}, &out, io.Discard); err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range strings.Fields(out.String()) {
		rel, _ := filepath.Rel(root, f)
		fmt.Println(filepath.ToSlash(rel))
	}
	// Output:
	// lightning_logs/version_0/plots/loss.png
	// lightning_logs/version_0/plots/loss_epoch.png
	// lightning_logs/version_0/plots/accuracy.png
	// lightning_logs/version_0/plots/accuracy_epoch.png
}
