package trainer_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A non-finite loss is shown as NaN or +Inf in the log lines, never as the
// integer conversion's -922337203685477.6.
func TestNonFiniteLossPrintsAsNaN(t *testing.T) {
	ds := regression(t, 64, 0, 1)
	var buf bytes.Buffer
	cfg := trainer.Config{MaxEpochs: 1, WarnOnNaN: true, LogEveryNSteps: 1, Out: &buf, DefaultRootDir: t.TempDir()}
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01, scale: math.Inf(1)}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, "922337203685477") {
		t.Errorf("a non-finite loss printed as an integer conversion:\n%s", out)
	}
	if !strings.Contains(out, "loss=+Inf") && !strings.Contains(out, "loss=NaN") && !strings.Contains(out, "loss=Inf") {
		t.Errorf("no loss=NaN or loss=+Inf in the progress lines:\n%s", out)
	}
}

// sqrtAbs has a finite loss, 0, whose gradient is NaN at w = 0: the loss
// check cannot see it, DetectAnomaly must.
type sqrtAbs struct{}

func (sqrtAbs) Configure(b *module.Builder) error {
	b.Param("w", []int{4, 1}, module.Zeros())
	return nil
}

func (sqrtAbs) TrainingStep(s *module.Step) (*G.Node, error) {
	w := s.Param("w")
	return G.Must(G.Sum(G.Must(G.Sqrt(G.Must(G.Square(w)))))), nil
}

func TestDetectAnomalyNamesStepAndParameter(t *testing.T) {
	ds := regression(t, 64, 0, 1)
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DetectAnomaly: true}))
	err := tr.Fit(context.Background(), sqrtAbs{}, loader(t, ds, 16, false, false), nil)
	if err == nil || !strings.Contains(err.Error(), `parameter "w"`) || !strings.Contains(err.Error(), "global step 0") {
		t.Fatalf("err = %v, want an error naming parameter \"w\" and global step 0", err)
	}
}

func TestGradientClipValMustBeFiniteAndNonNegative(t *testing.T) {
	for _, v := range []float64{math.NaN(), -1, math.Inf(1)} {
		cfg := quiet(trainer.Config{GradientClipVal: v})
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "GradientClipVal") {
			t.Errorf("GradientClipVal %v: err = %v, want a GradientClipVal error", v, err)
		}
	}
}

func TestDevicesAboveCoresWarns(t *testing.T) {
	var buf bytes.Buffer
	cfg := trainer.Config{Devices: 4096, Out: &buf}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "Devices is above the number of CPU cores") {
		t.Errorf("no warning for 4096 devices: %q", buf.String())
	}
	buf.Reset()
	cfg = trainer.Config{Devices: 1, Out: &buf}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Errorf("Devices 1 logged %q", buf.String())
	}
}

// failOnce fails the training batch end hook once, at global step at.
type failOnce struct {
	at     int
	failed bool
}

func (f *failOnce) Name() string { return "failOnce" }
func (f *failOnce) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.GlobalStep == f.at && !f.failed {
		f.failed = true
		return errors.New("disk full")
	}
	return nil
}

// A second Fit of the same module on one Trainer continues where the first
// stopped, and when the first reached its limits, says so: never a silent
// no-op.
func TestFitTwiceContinuesOrErrors(t *testing.T) {
	ds := regression(t, 128, 0.01, 1)
	whole, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 3}))
	if err := whole.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), whole.Store().Data32()...)

	m := &linreg{in: 4, lr: 0.05}
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 3, Callbacks: []trainer.Callback{&failOnce{at: 11}}}))
	if err := tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), nil); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("first Fit: %v, want the callback's error", err)
	}
	if err := tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatalf("second Fit: %v", err)
	}
	if s := tr.Stats(); s.GlobalStep != 16 || s.Epochs != 2 {
		t.Errorf("after the second Fit: %+v, want 16 steps over 2 epochs", s)
	}
	if got := tr.Store().Data32(); !reflect.DeepEqual(got, want) {
		t.Errorf("continued weights %v, want those of one uninterrupted Fit %v", got, want)
	}
	err := tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), nil)
	if err == nil || !strings.Contains(err.Error(), "MaxEpochs is 2") || !strings.Contains(err.Error(), "FromCheckpoint") {
		t.Fatalf("third Fit: %v, want an error saying MaxEpochs is reached", err)
	}
}

// A finite loss too large for an int64 once scaled by 1e4 (a diverging
// run) is shown as its value in the progress and validation lines, not
// wrapped to a negative number.
func TestHugeLossPrintsItsValue(t *testing.T) {
	ds := regression(t, 64, 0, 1)
	var buf bytes.Buffer
	cfg := trainer.Config{MaxEpochs: 1, LogEveryNSteps: 1, Out: &buf, DefaultRootDir: t.TempDir()}
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &linreg{in: 4, lr: 0.01, scale: 1e30}
	if err := tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), loader(t, ds, 64, false, false)); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{" loss=", " val_loss="} {
		out := buf.String()
		i := strings.Index(out, key)
		if i < 0 {
			t.Fatalf("no %q in the log:\n%s", key, out)
		}
		field := strings.Fields(out[i+len(key):])[0]
		v, err := strconv.ParseFloat(field, 64)
		if err != nil || v < 1e29 {
			t.Errorf("%s%s: want the loss, above 1e29 (err %v); log:\n%s", key, field, err, out)
		}
	}
}

// A loss made NaN by a NaN in the data names the input and the dataset
// example, rather than advising a lower learning rate.
func TestNaNInputNamesTheExample(t *testing.T) {
	ds := regression(t, 64, 0, 1)
	x, y := make([]float32, 4), make([]float32, 1)
	xs, ys := make([]float32, 0, 64*4), make([]float32, 0, 64)
	for i := range 64 {
		if err := ds.Read(i, [][]float32{x, y}); err != nil {
			t.Fatal(err)
		}
		if i == 21 {
			x[2] = float32(math.NaN())
		}
		xs, ys = append(xs, x...), append(ys, y...)
	}
	bad, err := data.NewInMemory(ds.Fields(), [][]float32{xs, ys})
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	err = tr.Fit(context.Background(), &linreg{in: 4, lr: 0.01}, loader(t, bad, 16, true, false), nil)
	for _, want := range []string{"the loss is NaN", `input "x" of dataset example 21 holds NaN`, "fix the data"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want one containing %q", err, want)
		}
	}
}

// A nil context is an error naming the call, not a nil-pointer crash in
// the loop.
func TestNilContextIsAnError(t *testing.T) {
	ds := regression(t, 32, 0, 1)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	if err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context
	m := newEvalReg()
	l := loader(t, ds, 8, false, false)
	_, errV := tr.Validate(nilCtx, m, l)
	_, errT := tr.Test(nilCtx, m, l)
	_, errP := tr.Predict(nilCtx, m, l)
	_, errH := tr.WeightsSHA256(nilCtx)
	for call, err := range map[string]error{
		"Fit": tr.Fit(nilCtx, m, l, nil), "Validate": errV, "Test": errT, "Predict": errP,
		"SaveCheckpoint": tr.SaveCheckpoint(nilCtx, filepath.Join(t.TempDir(), "x.ckpt")), "WeightsSHA256": errH,
	} {
		if err == nil || !strings.Contains(err.Error(), call+": the context is nil") {
			t.Errorf("%s(nil context): %v", call, err)
		}
	}
}
