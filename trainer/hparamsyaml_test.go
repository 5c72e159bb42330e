package trainer_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// hparams.yaml is read back by Lightning's load_hparams_from_yaml, that is
// by PyYAML, a YAML 1.1 reader: 1e-08 is a string there, yes a boolean
// and 10 an integer, so the file must spell floats and such keys the way
// PyYAML's yaml.dump does.
func TestHParamsYAMLReadsBackInPyYAML(t *testing.T) {
	dir := t.TempDir()
	l, err := trainer.NewCSVLogger(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]any{
		"lr":      1e-8,
		"big":     1e21,
		"epochs":  3.0,
		"f32":     float32(0.25),
		"betas":   []float64{0.9, 1e-3},
		"nested":  map[string]any{"eps": 1e-6},
		"nan":     math.NaN(),
		"inf":     math.Inf(-1),
		"yes":     "yes",
		"On":      1,
		"10":      "a",
		"a: b":    2,
		"plain_k": "v",
	}
	if err := l.LogHyperparams(h); err != nil {
		t.Fatalf("LogHyperparams: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "hparams.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`"10": "a"`,
		`"On": 1`,
		`"a: b": 2`,
		`betas: [0.9, 0.001]`,
		`big: 1.0e+21`,
		`epochs: 3.0`,
		`f32: 0.25`,
		`inf: -.inf`,
		`lr: 1.0e-08`,
		`nan: .nan`,
		`nested: {"eps": 1.0e-06}`,
		`plain_k: "v"`,
		`"yes": "yes"`,
	}
	got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("hparams.yaml:\n%s\nwant:\n%s", b, strings.Join(want, "\n"))
	}
}
