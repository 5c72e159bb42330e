package callbacks_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
)

// A NaN hyperparameter (an unset weight decay, say) made LogHyperparams
// fail with "json: unsupported value: NaN", and with it the Fit; it is
// null, as NaN metrics are in metrics.jsonl, and the other values stay.
func TestJSONLLoggerNonFiniteHyperparametersAreNull(t *testing.T) {
	dir := t.TempDir()
	l, err := callbacks.NewJSONLLogger(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LogHyperparams(map[string]any{"lr": 0.01, "wd": math.NaN(), "clip": float32(math.Inf(1)), "name": "mlp"}); err != nil {
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
	want := map[string]any{"lr": 0.01, "wd": nil, "clip": nil, "name": "mlp"}
	if len(got) != len(want) {
		t.Errorf("hparams.json = %v, want %v", got, want)
	}
	for k, w := range want {
		if v, ok := got[k]; !ok || v != w {
			t.Errorf("hparams.json[%q] = %v (present %v), want %v", k, v, ok, w)
		}
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
