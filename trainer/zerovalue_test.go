package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// noPanic runs f and turns a panic into the test's error, so that every
// case reports instead of the first crashing the test binary.
func noPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// runs calls each of a Trainer's run methods with the given trainer and
// loaders.
func runs(tr *trainer.Trainer, train, eval *data.Loader) map[string]func() error {
	ctx := context.Background()
	return map[string]func() error{
		"Fit": func() error { return tr.Fit(ctx, newEvalReg(), train, nil) },
		"Fit (validation loader)": func() error {
			return tr.Fit(ctx, newEvalReg(), eval, train)
		},
		"Validate": func() error { _, err := tr.Validate(ctx, newEvalReg(), eval); return err },
		"Test":     func() error { _, err := tr.Test(ctx, newEvalReg(), eval); return err },
		"Predict":  func() error { _, err := tr.Predict(ctx, newEvalReg(), eval); return err },
		"PredictEach": func() error {
			return tr.PredictEach(ctx, newEvalReg(), eval, func(trainer.PredictBatch) error { return nil })
		},
		"LRFind": func() error { _, err := tr.LRFind(ctx, newEvalReg(), train, trainer.LRFindConfig{}); return err },
	}
}

// A Trainer declared instead of made by New (var tr trainer.Trainer, or a
// nil *Trainer) is an error naming trainer.New on every run method; before,
// Fit and Validate crashed with a nil pointer inside setup.
func TestTrainerNotMadeByNewIsAnError(t *testing.T) {
	l := loader(t, regression(t, 16, 0.01, 1), 8, false, false)
	var zero trainer.Trainer
	var nilTrainer *trainer.Trainer
	for who, tr := range map[string]*trainer.Trainer{"a zero Trainer": &zero, "a nil *Trainer": nilTrainer} {
		for call, f := range runs(tr, l, l) {
			err := noPanic(f)
			if err == nil || !strings.Contains(err.Error(), "trainer.New") || !strings.HasPrefix(err.Error(), strings.Fields(call)[0]+":") {
				t.Errorf("%s of %s: %v\nwant an error of %s naming trainer.New", call, who, err, call)
			}
		}
	}
}

// A data.Loader declared instead of made by data.NewLoader is an error
// naming data.NewLoader; before, Fit crashed with a nil pointer reading its
// dataset's fields.
func TestLoaderNotMadeByNewLoaderIsAnError(t *testing.T) {
	good := loader(t, regression(t, 16, 0.01, 1), 8, false, false)
	var zero data.Loader
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	for call, f := range runs(tr, &zero, &zero) {
		err := noPanic(f)
		if err == nil || !strings.Contains(err.Error(), "data.NewLoader") {
			t.Errorf("%s with a zero data.Loader: %v\nwant an error naming data.NewLoader", call, err)
		}
	}
	err = noPanic(func() error { return tr.Fit(context.Background(), newEvalReg(), good, &zero) })
	if err == nil || !strings.Contains(err.Error(), "validation loader") || !strings.Contains(err.Error(), "data.NewLoader") {
		t.Errorf("Fit with a zero validation data.Loader: %v\nwant an error naming the validation loader and data.NewLoader", err)
	}
}

// A nil pointer in Config's Profiler or StrategyImpl (a constructor's
// result whose error was dropped) is New's error naming the field, as a
// nil callback or logger is; before, Fit crashed with a nil pointer.
func TestNilPointerProfilerOrStrategyIsAConfigError(t *testing.T) {
	var simple *profiler.Simple
	var d *ddp.DDP
	for name, cfg := range map[string]trainer.Config{
		"Profiler":     {Profiler: simple},
		"StrategyImpl": {StrategyImpl: d},
	} {
		cfg.DefaultRootDir = t.TempDir()
		err := noPanic(func() error {
			tr, err := trainer.New(quiet(cfg))
			if err != nil {
				return err
			}
			return tr.Fit(context.Background(), newEvalReg(), loader(t, regression(t, 16, 0.01, 1), 8, false, false), nil)
		})
		if err == nil || !strings.Contains(err.Error(), name+" is a nil *") || !strings.Contains(err.Error(), "constructor returned an error") {
			t.Errorf("a nil pointer as %s: %v\nwant New's error naming %s and the failed constructor", name, err, name)
		}
	}
}

// A nil FitOption, EvalOption or WeightsOption (one a program appends
// conditionally) is no option; before, Fit, Validate, Test and Predict
// crashed calling it.
func TestNilOptionsAreNoOptions(t *testing.T) {
	ctx := context.Background()
	l := loader(t, regression(t, 16, 0.01, 1), 8, false, false)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	m := newEvalReg()
	for call, f := range map[string]func() error{
		"Fit":      func() error { return tr.Fit(ctx, m, l, nil, nil) },
		"Validate": func() error { _, err := tr.Validate(ctx, m, l, nil); return err },
		"Test":     func() error { _, err := tr.Test(ctx, m, l, nil); return err },
		"Predict":  func() error { _, err := tr.Predict(ctx, m, l, nil); return err },
	} {
		if err := noPanic(f); err != nil {
			t.Errorf("%s with a nil option: %v", call, err)
		}
	}
	weights, err := trainer.ResolveCheckpoint(tr.LogDir(), "last")
	if err != nil {
		t.Fatal(err)
	}
	tr2, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	if err := noPanic(func() error { return tr2.Fit(ctx, newEvalReg(), l, nil, trainer.WithWeights(weights, nil)) }); err != nil {
		t.Errorf("Fit WithWeights with a nil WeightsOption: %v", err)
	}
}

// WithWeights("") is an error naming WithWeights; before, it was "weights:
// open : no such file or directory".
func TestWithWeightsOfNoPathNamesIt(t *testing.T) {
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), newEvalReg(), loader(t, regression(t, 16, 0.01, 1), 8, false, false), nil, trainer.WithWeights(""))
	if err == nil || !strings.Contains(err.Error(), "WithWeights") || !strings.Contains(err.Error(), "empty") {
		t.Errorf("Fit(WithWeights(\"\")): %v\nwant an error naming WithWeights and its empty path", err)
	}
}

// A callbacks type or logger written as a struct literal
// (&callbacks.ModelCheckpoint{}) is refused by New naming its constructor,
// once: before, the stateful ones told the user to "return a name from
// Name", a method of the library's type, and the others were accepted, to
// log nothing (LearningRateMonitor), never accumulate
// (GradientAccumulationScheduler) or fail their first hook with
// "mkdir : no such file or directory" (the loggers). The ones whose zero
// value is documented as usable are accepted.
func TestCallbackStructLiteralNamesItsConstructor(t *testing.T) {
	for _, c := range []struct {
		cb   trainer.Callback
		ctor string
	}{
		{&callbacks.ModelCheckpoint{}, "callbacks.NewModelCheckpoint"},
		{&callbacks.EarlyStopping{}, "callbacks.NewEarlyStopping"},
		{&callbacks.Timer{}, "callbacks.NewTimer"},
		{&callbacks.LearningRateMonitor{}, "callbacks.NewLearningRateMonitor"},
		{&callbacks.GradientAccumulationScheduler{}, "callbacks.NewGradientAccumulationScheduler"},
		{&callbacks.Plots{}, "callbacks.NewPlots"},
		{&callbacks.ProgressBar{}, ""},
		{&callbacks.ModelSummary{}, ""},
		{&callbacks.DeviceStatsMonitor{}, ""},
	} {
		_, err := trainer.New(trainer.Config{Out: io.Discard, DefaultRootDir: t.TempDir(), Callbacks: []trainer.Callback{c.cb}})
		checkRefused(t, fmt.Sprintf("%T", c.cb), "Callbacks[0]", c.ctor, err)
	}
	for _, c := range []struct {
		l    trainer.Logger
		ctor string
	}{
		{&trainer.CSVLogger{}, "NewCSVLogger"},
		{&callbacks.JSONLLogger{}, "callbacks.NewJSONLLogger"},
		{&callbacks.TensorBoardLogger{}, "callbacks.NewTensorBoardLogger"},
	} {
		_, err := trainer.New(trainer.Config{Out: io.Discard, DefaultRootDir: t.TempDir(), Loggers: []trainer.Logger{c.l}})
		checkRefused(t, fmt.Sprintf("%T", c.l), "Loggers[0]", c.ctor, err)
	}
}

// checkRefused says whether err, New's for a struct literal of typ, is one
// problem naming the entry and ctor (nil when ctor is "").
func checkRefused(t *testing.T, typ, entry, ctor string, err error) {
	t.Helper()
	if ctor == "" {
		if err != nil {
			t.Errorf("New with a %s literal: %v\nwant it accepted (its zero value is documented as usable)", typ, err)
		}
		return
	}
	if err == nil {
		t.Errorf("New with a %s literal succeeded; want an error naming %s", typ, ctor)
		return
	}
	msg := strings.TrimPrefix(err.Error(), "trainer config:\n")
	if !strings.Contains(msg, ctor) || !strings.Contains(msg, entry) || strings.Contains(msg, "\n") {
		t.Errorf("New with a %s literal: %q\nwant one line naming %s and %s", typ, msg, entry, ctor)
	}
}

// A callback or logger of the user's can refuse a run the same way, by
// implementing trainer.ReadyChecker: New reports its error naming the
// entry, and a nil error lets it run.
type needsPath struct{ path string }

func (n *needsPath) Name() string { return "needsPath" }

func (n *needsPath) CheckReady() error {
	if n.path == "" {
		return errors.New("path is empty: make it with newNeedsPath")
	}
	return nil
}

var _ trainer.ReadyChecker = (*needsPath)(nil)

func TestReadyCheckerRefusesTheRun(t *testing.T) {
	_, err := trainer.New(quiet(trainer.Config{Callbacks: []trainer.Callback{&needsPath{path: "x"}, &needsPath{}}}))
	if err == nil || !strings.Contains(err.Error(), "Callbacks[1] (*trainer_test.needsPath): path is empty: make it with newNeedsPath") || strings.Contains(err.Error(), "Callbacks[0]") {
		t.Errorf("New with an unready callback at 1: %v\nwant Callbacks[1]'s error alone", err)
	}
	if _, err := trainer.New(quiet(trainer.Config{Callbacks: []trainer.Callback{&needsPath{path: "x"}}})); err != nil {
		t.Errorf("New with a ready callback: %v", err)
	}
	// A CheckReady with a bug is an error naming it, not a crash of New.
	_, err = trainer.New(quiet(trainer.Config{Callbacks: []trainer.Callback{&readyPanics{}}}))
	if err == nil || !strings.Contains(err.Error(), "Callbacks[0] (*trainer_test.readyPanics): CheckReady: panicked: runtime error: index out of range") {
		t.Errorf("New with a CheckReady that panics: %v\nwant an error naming the entry and CheckReady", err)
	}
}

type readyPanics struct{ dirs []string }

func (r *readyPanics) Name() string      { return "readyPanics" }
func (r *readyPanics) CheckReady() error { _ = r.dirs[1]; return nil }
