package trainer_test

import (
	"context"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Hooks written with another signature than the trainer's: Go finds hooks
// by their interfaces, so these would compile and never be called.

// epochEndNoCtx forgot the context.
type epochEndNoCtx struct{}

func (epochEndNoCtx) Name() string                           { return "epochEndNoCtx" }
func (epochEndNoCtx) OnTrainEpochEnd(s *trainer.State) error { return nil }

// batchEndLightning has Lightning's on_train_batch_end arguments.
type batchEndLightning struct{}

func (batchEndLightning) Name() string { return "batchEndLightning" }
func (batchEndLightning) OnTrainBatchEnd(ctx context.Context, s *trainer.State, b *data.Batch, batchIdx int) error {
	return nil
}

// halfStateful saves a state it cannot load back.
type halfStateful struct{}

func (halfStateful) Name() string                 { return "halfStateful" }
func (halfStateful) StateDict() ([]byte, error)   { return nil, nil }
func (halfStateful) LoadStateDict(b []byte) error { return nil }

// halfStatefulWrong has LoadStateDict of another signature.
type halfStatefulWrong struct{ halfStateful }

func (halfStatefulWrong) LoadStateDict(s string) error { return nil }

// valStepLikeTraining returns its loss from ValidationStep, as
// TrainingStep does (and Lightning's validation_step may).
type valStepLikeTraining struct{ linreg }

func (m *valStepLikeTraining) ValidationStep(s *module.Step) (*G.Node, error) {
	return m.loss(s), nil
}

// moduleWithCallbackHook has a callback's hook signature on a module.
type moduleWithCallbackHook struct{ linreg }

func (m *moduleWithCallbackHook) OnTrainStart(ctx context.Context, s *trainer.State) error {
	return nil
}

// byValue's hook has a pointer receiver; passed as a value, it has no
// such method.
type byValue struct{ n int }

func (byValue) Name() string { return "byValue" }
func (b *byValue) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	b.n++
	return nil
}

// TestHooksOfAnotherSignatureAreErrors: a callback or module method named
// as a hook, or as an optional step, with another signature is an error
// naming the type, the method, what it has and what the trainer calls,
// not a hook that is silently never called.
func TestHooksOfAnotherSignatureAreErrors(t *testing.T) {
	for _, cb := range []struct {
		cb   trainer.Callback
		want []string
	}{
		{epochEndNoCtx{}, []string{"Callbacks[0]", "epochEndNoCtx", "OnTrainEpochEnd", "func(*trainer.State) error", "func(context.Context, *trainer.State) error"}},
		{batchEndLightning{}, []string{"Callbacks[0]", "batchEndLightning", "OnTrainBatchEnd", "func(context.Context, *trainer.State) error"}},
		{halfStatefulWrong{}, []string{"Callbacks[0]", "halfStatefulWrong", "LoadStateDict", "func([]uint8) error"}},
		{byValue{}, []string{"Callbacks[0]", "byValue", "OnTrainBatchEnd", "pointer receiver", "&byValue{...}"}},
	} {
		_, err := trainer.New(quiet(trainer.Config{Callbacks: []trainer.Callback{cb.cb}}))
		errSays(t, cb.cb, err, cb.want)
	}
	if _, err := trainer.New(quiet(trainer.Config{Callbacks: []trainer.Callback{halfStateful{}}})); err != nil {
		t.Errorf("a Stateful callback: %v", err)
	}
	if _, err := trainer.New(quiet(trainer.Config{Callbacks: []trainer.Callback{&byValue{}}})); err != nil {
		t.Errorf("a callback passed as a pointer: %v", err)
	}

	ds := regression(t, 32, 0.01, 1)
	for _, m := range []struct {
		m    module.Module
		want []string
	}{
		{&valStepLikeTraining{linreg{in: 4, lr: 0.05}}, []string{"valStepLikeTraining", "ValidationStep", "func(*module.Step) error"}},
		{&moduleWithCallbackHook{linreg{in: 4, lr: 0.05}}, []string{"moduleWithCallbackHook", "OnTrainStart", "func(context.Context) error"}},
	} {
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
		if err != nil {
			t.Fatal(err)
		}
		errSays(t, m.m, tr.Fit(context.Background(), m.m, loader(t, ds, 16, false, false), loader(t, ds, 16, false, false)), m.want)
	}
}

// errSays checks that err, v's, says each of want.
func errSays(t *testing.T, v any, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Errorf("%T: no error", v)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%T: error %q does not say %q", v, err, w)
		}
	}
}

// setupLightning has Lightning's setup(stage) and teardown(stage), no
// context and no State.
type setupLightning struct{}

func (setupLightning) Name() string                 { return "setupLightning" }
func (setupLightning) Setup(stage string) error     { return nil }
func (setupLightning) Teardown(stage string)        {}
func (setupLightning) OnAfterBackward() error       { return nil }
func (setupLightning) OnBeforeZeroGrad(o any) error { return nil }

// ckptLightning is a module with Lightning's on_save_checkpoint(checkpoint)
// that fills a map, and a setup without its context.
type ckptLightning struct{ linreg }

func (*ckptLightning) OnSaveCheckpoint(ctx context.Context, ckpt map[string]any) error { return nil }
func (*ckptLightning) OnLoadCheckpoint(ctx context.Context, ckpt map[string]any) error { return nil }
func (*ckptLightning) Setup(stage string) error                                        { return nil }
func (*ckptLightning) Teardown(ctx context.Context, s *trainer.State, stage string) error {
	return nil
}
func (*ckptLightning) OnAfterBackward(ctx context.Context, s *trainer.State) error { return nil }
func (*ckptLightning) OnBeforeZeroGrad(ctx context.Context, o any) error           { return nil }

// TestNewHooksOfAnotherSignatureAreErrors: Setup, Teardown,
// OnAfterBackward, OnBeforeZeroGrad and the module's OnSaveCheckpoint and
// OnLoadCheckpoint written with another signature (Lightning's, or a
// callback's on a module) are errors naming each, not hooks never called.
func TestNewHooksOfAnotherSignatureAreErrors(t *testing.T) {
	_, err := trainer.New(quiet(trainer.Config{Callbacks: []trainer.Callback{setupLightning{}}}))
	errSays(t, setupLightning{}, err, []string{"setupLightning",
		"Setup func(string) error", "func(context.Context, *trainer.State, string) error",
		"Teardown func(string)", "OnAfterBackward func() error", "func(context.Context, *trainer.State) error",
		"OnBeforeZeroGrad func(interface {}) error",
		// Setup and Teardown are common names: a method of the user's own
		// may just need renaming.
		"or rename it if it is a method of your own and not this hook"})
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	if err != nil {
		t.Fatal(err)
	}
	ds := regression(t, 32, 0.01, 1)
	m := &ckptLightning{linreg{in: 4, lr: 0.05}}
	errSays(t, m, tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), nil), []string{"ckptLightning",
		"OnSaveCheckpoint", "func(context.Context) ([]uint8, error)", "OnLoadCheckpoint", "func(context.Context, []uint8) error",
		"Setup func(string) error", "func(context.Context, string) error", "Teardown", "OnAfterBackward", "func(context.Context) error",
		"OnBeforeZeroGrad"})
}
