package cli_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// -weights starts fit from a file's weights with a fresh optimizer at
// epoch 0: from another run's checkpoint, the run trains its own steps
// (global step 2, not the source's 10 + 2) and ends elsewhere than a run
// from the initial weights.
func TestFitFromWeights(t *testing.T) {
	src := t.TempDir()
	runIn(t, src, "-max-steps", "10", "-no-plots")
	ckpt := filepath.Join(src, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
	tuned, stderr := runIn(t, t.TempDir(), "-max-steps", "2", "-no-plots", "-weights", ckpt)
	if tuned.GlobalStep != 2 || tuned.Epochs != 1 {
		t.Errorf("fine-tuned run: global step %d, epochs %d; want 2 and 1", tuned.GlobalStep, tuned.Epochs)
	}
	if !strings.Contains(stderr, "Fit starts from the weights of a file") || !strings.Contains(stderr, ckpt) {
		t.Errorf("stderr does not say the weights were loaded from %s:\n%s", ckpt, stderr)
	}
	fresh, _ := runIn(t, t.TempDir(), "-max-steps", "2", "-no-plots")
	if fresh.WeightsSHA256 == tuned.WeightsSHA256 {
		t.Errorf("the run from the weights ends with the weights of a run from the initial ones (%s)", fresh.WeightsSHA256)
	}
	for _, args := range [][]string{
		{"-weights", ckpt, "-ckpt-path", ckpt},
		{"validate", "-weights", ckpt},
		{"-weights", filepath.Join(src, "none.safetensors")},
	} {
		app := mlpApp(t.TempDir())
		var out, errOut bytes.Buffer
		app.Stdout, app.Stderr = &out, &errOut
		err := app.Run(context.Background(), append([]string{"-no-progress-bar", "-max-steps", "1", "-no-plots"}, args...))
		t.Logf("%v: %v", args, err)
		if err == nil || !strings.Contains(err.Error(), "-weights") && !strings.Contains(err.Error(), "none.safetensors") {
			t.Errorf("%v: err = %v, want one naming -weights", args, err)
		}
	}
}
