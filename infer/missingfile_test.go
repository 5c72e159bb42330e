package infer_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
)

// Weights naming a file that is not there (a typo, a run directory moved)
// is an error naming the path and saying what to give, not only the
// operating system's "no such file or directory".
func TestNewOfAMissingWeightsFileSaysWhatToGive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lightning_logs", "version_0", "checkpoints", "lats.ckpt")
	_, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, Weights: path})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{path, "trainer.ResolveCheckpoint", "safetensors"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
