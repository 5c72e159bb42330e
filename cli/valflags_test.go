package cli_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/trainer"
)

// valRecorder notes when validation ran and whether each optimizer step
// logged grad_norm.
type valRecorder struct {
	epochs, steps []int
	gradNorms     int
}

func (r *valRecorder) Name() string { return "valRecorder" }

func (r *valRecorder) OnValidationEnd(_ context.Context, s *trainer.State) error {
	r.epochs = append(r.epochs, s.Epoch)
	r.steps = append(r.steps, s.GlobalStep)
	return nil
}

func (r *valRecorder) OnTrainBatchEnd(_ context.Context, s *trainer.State) error {
	if _, ok := s.Metrics.Get("grad_norm"); ok {
		r.gradNorms++
	}
	return nil
}

// recordedRun runs the mlp quietly with args, recording its validations.
func recordedRun(t *testing.T, args ...string) (*valRecorder, cli.Summary) {
	t.Helper()
	rec := &valRecorder{}
	app := mlpApp(t.TempDir())
	app.Callbacks = func(_ *cli.Settings, cfg *trainer.Config) error {
		cfg.Callbacks = append(cfg.Callbacks, rec)
		return nil
	}
	base := []string{"-no-progress-bar", "-no-model-summary", "-no-plots", "-no-checkpoint", "-loggers", "none",
		"-num-sanity-val-steps", "0", "-limit-val-batches", "1"}
	s, _ := run(t, app, append(base, args...)...)
	return rec, s
}

// Lightning's check_val_every_n_epoch, val_check_interval,
// gradient_clip_algorithm and track_grad_norm are flags, and what they
// set happens in the run.
func TestValidationAndGradientFlagsReachTheTrainer(t *testing.T) {
	rec, _ := recordedRun(t, "-max-epochs", "4", "-limit-train-batches", "2", "-check-val-every-n-epoch", "2")
	if want := []int{1, 3}; !reflect.DeepEqual(rec.epochs, want) {
		t.Errorf("-check-val-every-n-epoch 2, 4 epochs: validated after epochs %v, want %v", rec.epochs, want)
	}
	rec, _ = recordedRun(t, "-max-epochs", "1", "-limit-train-batches", "6", "-val-check-interval", "2")
	if want := []int{2, 4, 6}; !reflect.DeepEqual(rec.steps, want) {
		t.Errorf("-val-check-interval 2, 6 batches: validated at steps %v, want %v", rec.steps, want)
	}
	rec, _ = recordedRun(t, "-max-steps", "3", "-log-grad-norm")
	if rec.gradNorms != 3 {
		t.Errorf("-log-grad-norm: grad_norm logged at %d of 3 steps", rec.gradNorms)
	}
	rec, _ = recordedRun(t, "-max-steps", "3")
	if rec.gradNorms != 0 {
		t.Errorf("no -log-grad-norm: grad_norm logged at %d of 3 steps", rec.gradNorms)
	}
	// Clipping each element differs from clipping the norm: the weights
	// after two steps do too; "norm" is the default.
	clip := []string{"-max-steps", "2", "-gradient-clip-val", "0.001"}
	_, byNorm := recordedRun(t, clip...)
	_, byNormFlag := recordedRun(t, append(clip, "-gradient-clip-algorithm", "norm")...)
	_, byValue := recordedRun(t, append(clip, "-gradient-clip-algorithm", "value")...)
	if byNorm.WeightsSHA256 == "" || byNorm.WeightsSHA256 != byNormFlag.WeightsSHA256 {
		t.Errorf("-gradient-clip-algorithm norm: weights %s, want the default's %s", byNormFlag.WeightsSHA256, byNorm.WeightsSHA256)
	}
	if byValue.WeightsSHA256 == byNorm.WeightsSHA256 {
		t.Errorf("-gradient-clip-algorithm value: weights %s, the same as by norm", byValue.WeightsSHA256)
	}
}

// The new flags' bad values are refused naming the flag, and
// -print-config and a config file know them.
func TestValidationAndGradientFlagsChecked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-check-val-every-n-epoch", "0"}, []string{"-check-val-every-n-epoch is 0: use a value >= 1"}},
		{[]string{"-val-check-interval", "-1"}, []string{"-val-check-interval is -1: use a value >= 0"}},
		{[]string{"-val-check-interval", "0.25"}, []string{`-val-check-interval`, `"0.25"`, "a fraction of the epoch is Lightning's", "-val-check-interval N"}},
		{[]string{"-val-check-interval", "1.0"}, []string{"Lightning's 1.0", "drop the flag"}},
		{[]string{"-gradient-clip-algorithm", "l2"}, []string{`-gradient-clip-algorithm is "l2": use one of norm, value`}},
		{[]string{"-gradient-clip-algorithm", "value"}, []string{`-gradient-clip-algorithm is "value" and -gradient-clip-val is 0`}},
	} {
		err := mlpApp(t.TempDir()).Run(context.Background(), append(c.args, "-max-steps", "1", "-no-progress-bar"))
		if err == nil {
			t.Errorf("%q: no error", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: err = %v\nwant it to contain %s", c.args, err, w)
			}
		}
	}
	doc := printed(t, mlpApp(t.TempDir()), "-check-val-every-n-epoch", "3", "-val-check-interval", "50", "-gradient-clip-algorithm", "value", "-gradient-clip-val", "1", "-log-grad-norm")
	tr := doc["trainer"]
	if tr["check_val_every_n_epoch"] != 3.0 || tr["val_check_interval"] != 50.0 || tr["gradient_clip_algorithm"] != "value" || tr["log_grad_norm"] != true {
		t.Errorf("-print-config: %v", tr)
	}
	p := writeFile(t, "c.yaml", "trainer:\n  check_val_every_n_epoch: 2\n  val_check_interval: 10\n  gradient_clip_algorithm: value\n  gradient_clip_val: 0.5\n  log_grad_norm: true\n")
	doc = printed(t, mlpApp(t.TempDir()), "-config", p)
	tr = doc["trainer"]
	if tr["check_val_every_n_epoch"] != 2.0 || tr["val_check_interval"] != 10.0 || tr["gradient_clip_algorithm"] != "value" || tr["log_grad_norm"] != true {
		t.Errorf("-config %s, -print-config: %v", p, tr)
	}
}
