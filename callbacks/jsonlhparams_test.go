package callbacks_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
)

// A NaN hyperparameter (an unset weight decay, say) made LogHyperparams
// fail with "json: unsupported value: NaN", and with it the Fit; later
// NaN and infinities were all null, and one inside a list (Adam's betas)
// still failed. Each is now its string, at any depth, as in metrics.jsonl.
func TestJSONLLoggerNonFiniteHyperparametersAreStrings(t *testing.T) {
	dir := t.TempDir()
	l, err := callbacks.NewJSONLLogger(dir)
	if err != nil {
		t.Fatal(err)
	}
	hp := map[string]any{
		"lr": 0.01, "wd": math.NaN(), "clip": float32(math.Inf(1)), "name": "mlp",
		"betas": []float64{0.9, math.Inf(-1)},
		"sched": map[string]any{"floor": math.Inf(1), "gamma": 0.5},
	}
	if err := l.LogHyperparams(hp); err != nil {
		t.Fatalf("LogHyperparams: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "hparams.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("hparams.json is not JSON: %v\n%s", err, b)
	}
	want := map[string]any{
		"lr": 0.01, "wd": "NaN", "clip": "Infinity", "name": "mlp",
		"betas": []any{0.9, "-Infinity"},
		"sched": map[string]any{"floor": "Infinity", "gamma": 0.5},
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Errorf("hparams.json = %s, want %s", gj, wj)
	}

	// A value JSON cannot hold at all is an error naming it.
	err = l.LogHyperparams(map[string]any{"f": func() {}})
	if err == nil || !strings.Contains(err.Error(), `"f"`) {
		t.Errorf("LogHyperparams(a func) = %v, want an error naming \"f\"", err)
	}
	// ... and leaves the logger usable.
	if err := l.LogHyperparams(map[string]any{"epochs": 3}); err != nil {
		t.Errorf("LogHyperparams after a refused call: %v", err)
	}
}

// metrics.jsonl wrote NaN, +Inf and -Inf all as null, so a reader could
// not tell a diverged loss from an overflowed one. Each is now its own
// string, which every JSON reader accepts and strconv.ParseFloat (as
// Python's float()) turns back into the value.
func TestJSONLLoggerNonFiniteMetricsStayDistinct(t *testing.T) {
	dir := t.TempDir()
	l, err := callbacks.NewJSONLLogger(dir)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]float64{"nan": math.NaN(), "pinf": math.Inf(1), "ninf": math.Inf(-1), "big": math.MaxFloat64, "tiny": 5e-324}
	if err := l.LogMetrics(7, in); err != nil {
		t.Fatal(err)
	}
	if err := l.Finalize("success"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"step":7,"big":1.7976931348623157e+308,"nan":"NaN","ninf":"-Infinity","pinf":"Infinity","tiny":5e-324}` + "\n"
	if string(b) != want {
		t.Fatalf("metrics.jsonl = %s, want %s", b, want)
	}
	var row map[string]any
	if err := json.Unmarshal(b, &row); err != nil {
		t.Fatalf("metrics.jsonl is not JSON: %v", err)
	}
	for k, w := range in {
		var v float64
		switch x := row[k].(type) {
		case float64:
			v = x
		case string:
			if v, err = strconv.ParseFloat(x, 64); err != nil {
				t.Fatalf("%s = %q: %v", k, x, err)
			}
		default:
			t.Fatalf("%s = %#v (%T), want a number or its string", k, row[k], row[k])
		}
		if v != w && !(math.IsNaN(v) && math.IsNaN(w)) {
			t.Errorf("%s reads back as %v, want %v", k, v, w)
		}
	}
}
