package plot

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotutil"
)

// scriptedCSV writes a metrics.csv as the CSV logger does for a run of
// epochs x stepsPerEpoch steps, logging step metrics every logEvery steps
// and epoch metrics at each epoch end. The loss falls as 2.3*exp(-step/20).
func scriptedCSV(epochs, stepsPerEpoch, logEvery int) string {
	var b strings.Builder
	b.WriteString("epoch,lr,step,train_loss_epoch,train_loss_step,val_acc,val_loss\n")
	loss := func(step int) float64 { return 2.3*math.Exp(-float64(step)/20) + 0.1 }
	for e := 0; e < epochs; e++ {
		for s := 1; s <= stepsPerEpoch; s++ {
			step := e*stepsPerEpoch + s
			if step%logEvery == 0 {
				fmt.Fprintf(&b, "%d,%g,%d,,%.6f,,\n", e, 0.001*math.Pow(0.5, float64(e)), step, loss(step))
			}
		}
		end := (e + 1) * stepsPerEpoch
		fmt.Fprintf(&b, "%d,,%d,%.6f,,,\n", e, end, loss(end-stepsPerEpoch/2))
		fmt.Fprintf(&b, "%d,,%d,,,%.4f,%.6f\n", e, end, 0.5+0.1*float64(e), loss(end)+0.05)
	}
	return b.String()
}

func mustRead(t *testing.T, csv, label string) *History {
	t.Helper()
	h, err := ReadCSV(strings.NewReader(csv), "metrics.csv")
	if err != nil {
		t.Fatal(err)
	}
	h.Label = label
	return h
}

func TestReadCSV(t *testing.T) {
	h := mustRead(t, scriptedCSV(3, 10, 2), "run")
	// 5 step rows + 2 epoch rows, per epoch.
	if got, want := len(h.Rows), 3*7; got != want {
		t.Fatalf("rows = %d, want %d", got, want)
	}
	r := h.Rows[0]
	if r.Step != 2 || r.Epoch != 0 || r.Values["lr"] != 0.001 || len(r.Values) != 2 {
		t.Fatalf("first row = %+v, want step 2, epoch 0, lr 0.001 and train_loss_step only", r)
	}
	if want := 2.3*math.Exp(-0.1) + 0.1; math.Abs(r.Values["train_loss_step"]-want) > 1e-6 {
		t.Fatalf("train_loss_step = %v, want %v", r.Values["train_loss_step"], want)
	}
	if got, want := h.Keys(), []string{"lr", "train_loss_epoch", "train_loss_step", "val_acc", "val_loss"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("keys = %v, want %v", got, want)
	}
	if got := len(h.Series("val_acc")); got != 3 {
		t.Fatalf("val_acc has %d points, want 3", got)
	}
	for k, want := range map[string]bool{"val_acc": true, "train_loss_epoch": true, "train_loss_step": false, "lr": false} {
		if got := h.EpochLevel(k); got != want {
			t.Errorf("EpochLevel(%s) = %v, want %v", k, got, want)
		}
	}
}

func TestReadCSVErrors(t *testing.T) {
	for _, tc := range []struct{ name, csv, want string }{
		{"empty", "", "is empty"},
		{"header only", "step,loss\n", "no rows"},
		{"no step", "epoch,loss\n0,1\n", `no "step" column`},
		{"bad number", "step,loss\n1,abc\n", `column "loss": "abc" is not a number`},
		{"short row", "step,loss\n1,2\n3\n", "line 3 has 1 cells but the header has 2"},
		{"missing step", "step,loss\n,2\n", "line 2 has no step"},
		{"fractional step", "step,loss\n1.5,2\n", "not a whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(tc.csv), "run/metrics.csv")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "run/metrics.csv") {
				t.Fatalf("err = %v, want one naming the file and containing %q", err, tc.want)
			}
		})
	}
}

func TestLogMatchesCSV(t *testing.T) {
	var h History
	h.Log(10, map[string]float64{"epoch": 1, "loss": 0.5})
	h.Log(20, map[string]float64{"loss": math.NaN()})
	if h.Rows[0].Epoch != 1 || h.Rows[0].Values["loss"] != 0.5 || len(h.Rows[0].Values) != 1 {
		t.Fatalf("row 0 = %+v", h.Rows[0])
	}
	if !math.IsNaN(h.Rows[1].Epoch) {
		t.Fatalf("row 1 epoch = %v, want NaN (not logged)", h.Rows[1].Epoch)
	}
	if got := h.Series("loss"); len(got) != 1 {
		t.Fatalf("series keeps %d points, want 1 (NaN dropped)", len(got))
	}
}

func TestGoalOf(t *testing.T) {
	for k, want := range map[string]Goal{
		"train_loss_step": Minimize, "val_loss": Minimize, "loss": Minimize, "val/mse": Minimize,
		"val_acc": Maximize, "test_accuracy": Maximize, "f1": Maximize,
		"lr": NoGoal, "rss_mb": NoGoal, "gloss_factor": NoGoal, "accel": NoGoal,
	} {
		if got := GoalOf(k); got != want {
			t.Errorf("GoalOf(%q) = %v, want %v", k, got, want)
		}
	}
}

func TestSummaries(t *testing.T) {
	h := mustRead(t, "step,epoch,val_loss,val_acc,lr\n10,0,0.9,0.6,0.1\n20,1,0.7,0.8,0.05\n30,2,0.8,0.7,0.01\n", "")
	got := map[string]Summary{}
	for _, s := range h.Summaries() {
		got[s.Key] = s
	}
	for _, tc := range []struct {
		key             string
		final, best     float64
		finalAt, bestAt int
	}{
		{"val_loss", 0.8, 0.7, 30, 20},
		{"val_acc", 0.7, 0.8, 30, 20},
		{"lr", 0.01, 0.01, 30, 30},
	} {
		s := got[tc.key]
		if s.Final != tc.final || s.FinalStep != tc.finalAt || s.Best != tc.best || s.BestStep != tc.bestAt {
			t.Errorf("%s: final %v@%d best %v@%d, want %v@%d and %v@%d", tc.key, s.Final, s.FinalStep, s.Best, s.BestStep, tc.final, tc.finalAt, tc.best, tc.bestAt)
		}
	}
	if s := got["lr"]; s.Min != 0.01 || s.Max != 0.1 || s.N != 3 {
		t.Errorf("lr min/max/n = %v/%v/%d, want 0.01/0.1/3", s.Min, s.Max, s.N)
	}
}

func TestSmooth(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		w    float64
		want []float64
	}{
		{[]float64{1, 1, 1}, 0.6, []float64{1, 1, 1}},
		{[]float64{0, 10}, 0.5, []float64{0, 5 / 0.75}},
		{[]float64{4, 2}, 0, []float64{4, 2}},
	} {
		got := Smooth(tc.in, tc.w)
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-12 {
				t.Errorf("Smooth(%v, %v) = %v, want %v", tc.in, tc.w, got, tc.want)
				break
			}
		}
	}
}

func chartKeys(cs []Chart) map[string][]string {
	out := map[string][]string{}
	for _, c := range cs {
		out[c.Name] = c.Keys
	}
	return out
}

func TestLayout(t *testing.T) {
	h := mustRead(t, scriptedCSV(2, 10, 2), "")
	h.Log(21, map[string]float64{"grad_norm": 1.5, "rss_mb": 200, "gpu_mem_mb": 10, "cpu_pct": 90})
	got := chartKeys(Layout(h))
	want := map[string][]string{
		"loss":             {"train_loss_epoch", "train_loss_step", "val_loss"},
		"loss_epoch":       {"train_loss_epoch", "val_loss"},
		"accuracy":         {"val_acc"},
		"accuracy_epoch":   {"val_acc"},
		"lr":               {"lr"},
		"cpu":              {"cpu_pct"},
		"memory":           {"gpu_mem_mb", "rss_mb"},
		"metric_grad_norm": {"grad_norm"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("layout = %v\nwant %v", got, want)
	}
}

// svgTexts returns the character data of every <text> element.
func svgTexts(t *testing.T, b []byte) []string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var out []string
	in := false
	var cur strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse as XML: %v", err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			if tk.Name.Local == "text" {
				in = true
				cur.Reset()
			}
		case xml.CharData:
			if in {
				cur.Write(tk)
			}
		case xml.EndElement:
			if tk.Name.Local == "text" {
				in = false
				out = append(out, cur.String())
			}
		}
	}
	return out
}

func hasColor(img image.Image, c color.Color) bool {
	r0, g0, b0, _ := c.RGBA()
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if r == r0 && g == g0 && b == b0 {
				return true
			}
		}
	}
	return false
}

func TestWriteChartsPNGAndSVG(t *testing.T) {
	dir := t.TempDir()
	h := mustRead(t, scriptedCSV(3, 40, 2), "run")
	files, err := WriteCharts(dir, []*History{h}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	charts := Layout(h)
	if len(files) != 2*len(charts) {
		t.Fatalf("wrote %v, want png and svg for each of %d charts", files, len(charts))
	}
	for _, c := range charts {
		raw, err := os.ReadFile(filepath.Join(dir, c.Name+".png"))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s.png does not decode: %v", c.Name, err)
		}
		if b := img.Bounds(); b.Dx() != 768 || b.Dy() != 480 {
			t.Errorf("%s.png is %dx%d, want 768x480", c.Name, b.Dx(), b.Dy())
		}
		// Every series of a single run is drawn in its key's colour.
		for i, k := range c.Keys {
			if !hasColor(img, plotutil.Color(i)) {
				t.Errorf("%s.png: no pixel of %s's colour %v", c.Name, k, plotutil.Color(i))
			}
		}
		svg, err := os.ReadFile(filepath.Join(dir, c.Name+".svg"))
		if err != nil {
			t.Fatal(err)
		}
		texts := svgTexts(t, svg)
		for _, k := range c.Keys {
			if !contains(texts, k) {
				t.Errorf("%s.svg: no legend text %q in %q", c.Name, k, texts)
			}
		}
		if !contains(texts, c.Title) {
			t.Errorf("%s.svg: no title %q in %q", c.Name, c.Title, texts)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestOverlayRuns(t *testing.T) {
	a := mustRead(t, scriptedCSV(2, 10, 2), "mlp/version_0")
	b := mustRead(t, scriptedCSV(3, 10, 5), "mlp/version_1")
	c := Chart{Name: "loss", Title: "Loss by step", Keys: []string{"train_loss_step", "val_loss"}}
	var buf bytes.Buffer
	if err := Render(&buf, c, []*History{a, b}, "svg", Options{}); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, buf.Bytes())
	for _, want := range []string{"mlp/version_0  train_loss_step", "mlp/version_1  train_loss_step", "mlp/version_0  val_loss", "mlp/version_1  val_loss"} {
		if !contains(texts, want) {
			t.Errorf("overlay legend lacks %q: %q", want, texts)
		}
	}
	buf.Reset()
	if err := Render(&buf, c, []*History{a, b}, "png", Options{Width: 400, Height: 300}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// 400 x 300 points at 96 dpi.
	if bd := img.Bounds(); bd.Dx() != 533 || bd.Dy() != 400 {
		t.Errorf("png is %dx%d, want 533x400", bd.Dx(), bd.Dy())
	}
	// Runs take colours in order.
	for i := range 2 {
		if !hasColor(img, plotutil.Color(i)) {
			t.Errorf("run %d's colour is not drawn", i)
		}
	}
}

// A chart whose steps stand for ranks names its x axis so.
func TestRenderXLabel(t *testing.T) {
	h := &History{Label: "scale-up"}
	for _, r := range []int{1, 2, 4} {
		h.Log(r, map[string]float64{"samples_per_s": 100 * float64(r)})
	}
	for _, c := range []struct{ xlabel, want string }{{"", "step"}, {"ranks", "ranks"}} {
		var buf bytes.Buffer
		if err := Render(&buf, Chart{Name: "s", X: Steps, XLabel: c.xlabel, Keys: []string{"samples_per_s"}}, []*History{h}, "svg", Options{}); err != nil {
			t.Fatal(err)
		}
		texts := svgTexts(t, buf.Bytes())
		if !contains(texts, c.want) || (c.want != "step" && contains(texts, "step")) {
			t.Errorf("XLabel %q: axis texts %q, want %q", c.xlabel, texts, c.want)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	h := mustRead(t, "step,loss\n1,NaN\n", "")
	var buf bytes.Buffer
	err := Render(&buf, Chart{Name: "loss", Keys: []string{"loss"}}, []*History{h}, "png", Options{})
	if err == nil || !strings.Contains(err.Error(), "no finite value") {
		t.Fatalf("err = %v, want one saying there is no finite value", err)
	}
	err = Render(&buf, Chart{Name: "x", Keys: []string{"loss"}}, []*History{mustRead(t, "step,loss\n1,2\n", "")}, "bmp", Options{Smoothing: 2})
	if err == nil || !strings.Contains(err.Error(), "Smoothing is 2") {
		t.Fatalf("err = %v, want one naming Smoothing", err)
	}
	if _, err := WriteCharts(t.TempDir(), nil, Options{}); err == nil {
		t.Fatal("WriteCharts with no runs succeeded")
	}
	if _, err := WriteCharts(t.TempDir(), []*History{h}, Options{}); err == nil || !strings.Contains(err.Error(), "nothing to plot") {
		t.Fatalf("err = %v, want nothing to plot", err)
	}
}

func TestFindMetrics(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"version_0", "version_2", "version_10"} {
		d := filepath.Join(root, "lightning_logs", v)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, MetricsFile), []byte("step,loss\n1,2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := filepath.Join(root, "lightning_logs", "version_10", MetricsFile)
	for _, in := range []string{root, filepath.Join(root, "lightning_logs"), filepath.Dir(want), want} {
		got, err := FindMetrics(in)
		if err != nil || got != want {
			t.Errorf("FindMetrics(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	h, _, err := ReadRun(root)
	if err != nil || h.Label != filepath.Base(root)+"/version_10" {
		t.Errorf("ReadRun label = %q, %v", h.Label, err)
	}
	if _, err := FindMetrics(t.TempDir()); err == nil || !strings.Contains(err.Error(), "has no metrics.csv") {
		t.Errorf("err = %v, want has no metrics.csv", err)
	}
}

func TestReport(t *testing.T) {
	h := mustRead(t, "step,epoch,val_loss,val_acc\n10,0,0.9,0.6\n20,1,0.7,0.8\n30,2,0.8,0.7\n", "")
	type inner struct{ Depth int }
	cfg := struct {
		MaxEpochs int
		Strategy  string
		Empty     string
		LR        *float64
		Skip      func()
		Inner     inner
		secret    int
	}{MaxEpochs: 3, Strategy: "ddp", LR: new(0.01), Inner: inner{Depth: 4}}
	r := Report{
		Title: "mlp, version_0", Status: "success", WorldSize: 2, Strategy: "ddp",
		Config: StructFields(&cfg), HParams: map[string]any{"lr": 0.001, "hidden": "256|128"},
		History: h, Results: map[string]float64{"test_acc": 0.8456},
		Profile: "| action | calls |\n| step | 3 |", Plots: []string{"plots/loss.png", "plots/loss.svg"},
		Checkpoints: []string{"checkpoints/last.safetensors"},
	}
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"# Run report: mlp, version_0",
		"Status **success** · world size 2 · strategy `ddp` · last logged step 30 · epochs logged 3.",
		"| test_acc | 0.8456 |",
		"| val_loss | 0.8 | 30 | 0.7 (min) | 20 | 0.7 | 0.9 | 3 |",
		"| val_acc | 0.7 | 30 | 0.8 (max) | 20 | 0.6 | 0.8 | 3 |",
		"![loss](plots/loss.png)", "[svg](plots/loss.svg)",
		"- [last.safetensors](checkpoints/last.safetensors)",
		`| hidden | 256\|128 |`,
		"| MaxEpochs | 3 |", `| Empty | "" |`, "| LR | 0.01 |", "| Inner.Depth | 4 |",
		"```text\n| action | calls |\n| step | 3 |\n```",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	for _, bad := range []string{"Skip", "secret"} {
		if strings.Contains(md, "| "+bad) {
			t.Errorf("report shows %q:\n%s", bad, md)
		}
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func TestReadHParams(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, HParamsFile)
	body := "batch_size: 64\nlr: 0.001\nname: \"mlp\"\n\"a: b\": [1,2]\nraw: not json\n\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadHParams(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"batch_size": 64.0, "lr": 0.001, "name": "mlp", "a: b": []any{1.0, 2.0}, "raw": "not json"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadHParams = %#v, want %#v", got, want)
	}
	if got, err := ReadHParams(filepath.Join(dir, "missing.yaml")); err != nil || len(got) != 0 {
		t.Errorf("missing file: %v, %v; want an empty map", got, err)
	}
	if err := os.WriteFile(p, []byte("no colon here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHParams(p); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("err = %v, want one naming line 1", err)
	}
}

func TestWriteChartsPrefix(t *testing.T) {
	dir := t.TempDir()
	h := mustRead(t, "step,cpu_pct\n1,50\n2,60\n", "rank 0")
	files, err := WriteCharts(dir, []*History{h}, Options{Prefix: "ranks_", Formats: []string{"svg"}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(files, []string{"ranks_cpu.svg"}) {
		t.Fatalf("files = %v, want [ranks_cpu.svg]", files)
	}
}
