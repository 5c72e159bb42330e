package cli_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
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

// A state dict of a wrapped model (DDP's "module.fc1.weight") loads with
// -weights-strip-prefix, to the same weights as the unwrapped file;
// without it the error names the flag (not a Go option a command line
// cannot give), and -weights-only-prefix and -weights-not-strict pass on
// to trainer.OnlyPrefix and trainer.Strict(false).
func TestFitFromWeightsOfAWrappedModel(t *testing.T) {
	dir := t.TempDir()
	b := module.NewBuilder(tensor.Float32)
	if err := (&models.MLP{}).Configure(b); err != nil {
		t.Fatal(err)
	}
	specs, err := b.Specs()
	if err != nil {
		t.Fatal(err)
	}
	src, err := module.NewStore(specs, tensor.Float32, 7)
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain.safetensors")
	if err := infer.SaveStateDict(plain, src); err != nil {
		t.Fatal(err)
	}
	wrappedSpecs := make([]module.Spec, len(specs))
	for i, s := range specs {
		s.Name = "module." + s.Name
		wrappedSpecs[i] = s
	}
	wst, err := module.NewStore(wrappedSpecs, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	copy(wst.Data32(), src.Data32())
	wrapped := filepath.Join(dir, "ddp.safetensors")
	if err := infer.SaveStateDict(wrapped, wst); err != nil {
		t.Fatal(err)
	}

	want, _ := runIn(t, t.TempDir(), "-max-steps", "2", "-no-plots", "-weights", plain)
	got, stderr := runIn(t, t.TempDir(), "-max-steps", "2", "-no-plots", "-weights", wrapped, "-weights-strip-prefix", "module.")
	if got.WeightsSHA256 != want.WeightsSHA256 {
		t.Errorf("from the wrapped file, stripped: weights %s; from the plain file: %s", got.WeightsSHA256, want.WeightsSHA256)
	}
	if !strings.Contains(stderr, "strip_prefix=module.") {
		t.Errorf("stderr does not say the prefix was stripped:\n%s", stderr)
	}
	_, stderr = runIn(t, t.TempDir(), "-max-steps", "1", "-no-plots", "-weights", wrapped, "-weights-strip-prefix", "module.", "-weights-only-prefix", "fc1.")
	if !strings.Contains(stderr, "only_prefix=fc1.") || !strings.Contains(stderr, "ignored_outside_prefix=4") {
		t.Errorf("-weights-only-prefix fc1.: stderr does not say what was ignored:\n%s", stderr)
	}
	var fc1 []module.Spec
	for _, s := range specs {
		if strings.HasPrefix(s.Name, "fc1.") {
			fc1 = append(fc1, s)
		}
	}
	fst, err := module.NewStore(fc1, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	partial := filepath.Join(dir, "fc1.safetensors")
	if err := infer.SaveStateDict(partial, fst); err != nil {
		t.Fatal(err)
	}
	_, stderr = runIn(t, t.TempDir(), "-max-steps", "1", "-no-plots", "-weights", partial, "-weights-not-strict")
	if !strings.Contains(stderr, `missing_kept_initial=["\"fc2.weight\" [128 256]"`) {
		t.Errorf("-weights-not-strict: stderr does not list what was skipped:\n%s", stderr)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-weights", wrapped}, []string{"pass -weights-strip-prefix module.", "consume_prefix_in_state_dict_if_present"}},
		{[]string{"-weights", partial}, []string{"pass -weights-not-strict, or -weights-only-prefix backbone. to load"}},
		{[]string{"-weights", plain, "-weights-only-prefix", "head."}, []string{"-weights-only-prefix head. matches no tensor of the model"}},
		{[]string{"-weights-strip-prefix", "module."}, []string{"-weights-strip-prefix module. without -weights"}},
		// Not about weights, but the same Go name for a flag: the sanity
		// check's failure says how to skip it on the command line.
		{[]string{"-sizes", "100,10"}, []string{"sanity check (validation batches run before training; -num-sanity-val-steps 0 skips it)"}},
		{[]string{"-weights-not-strict", "-weights-only-prefix", "fc1."}, []string{"-weights-not-strict without -weights", "-weights-only-prefix fc1. without -weights"}},
	} {
		app := mlpApp(t.TempDir())
		var out, errOut bytes.Buffer
		app.Stdout, app.Stderr = &out, &errOut
		err := app.Run(context.Background(), append([]string{"-no-progress-bar", "-max-steps", "1", "-no-plots"}, tc.args...))
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: err = %v, want %q in it", tc.args, err, w)
			}
		}
		if err != nil && (strings.Contains(err.Error(), "trainer.") || strings.Contains(err.Error(), "Config.")) {
			t.Errorf("%v: err = %v names a Go option, not a flag", tc.args, err)
		}
	}
}
