package trainer_test

import (
	"context"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
)

// brokenAbility is a callback whose answer to one ability has a bug.
type brokenAbility struct{ in string }

func (*brokenAbility) Name() string { return "brokenAbility" }
func (b *brokenAbility) answer(method string) bool {
	if b.in == method {
		var m map[string]*bool
		return *m[method] // nil pointer dereference
	}
	return false
}
func (b *brokenAbility) StopsAtStepEnd() bool   { return b.answer("StopsAtStepEnd") }
func (b *brokenAbility) DisplaysProgress() bool { return b.answer("DisplaysProgress") }
func (b *brokenAbility) WantsLayerShapes() bool { return b.answer("WantsLayerShapes") }

// SavesOnValidation is the ability of a callback saving after each
// validation (ModelCheckpoint's), which Config.Validate asks.
func (b *brokenAbility) SavesOnValidation() bool { return b.answer("SavesOnValidation") }

// StopsAtStepEnd is asked only of a callback with a per-step hook.
func (b *brokenAbility) OnTrainBatchEnd(context.Context, *trainer.State) error { return nil }

// stopperMod is a module whose StopsAtStepEnd has a bug.
type stopperMod struct{ linreg }

func (m *stopperMod) OnTrainBatchEnd(context.Context, *data.Batch, int) error { return nil }
func (m *stopperMod) StopsAtStepEnd() bool {
	var m2 map[int]*bool
	return *m2[0]
}

// TestAbilityPanicsAreErrors: a panic in a bool-returning ability of a
// callback or the module (StopsAtStepEnd, DisplaysProgress,
// WantsLayerShapes, SavesOnValidation), user code as a hook is, is an
// error of New or Fit naming the owner, the method and the user's line,
// not a crash.
func TestAbilityPanicsAreErrors(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	for _, c := range []struct {
		in, owner string
		module    bool
	}{
		{in: "StopsAtStepEnd", owner: "callbacks/brokenAbility"},
		{in: "DisplaysProgress", owner: "callbacks/brokenAbility"},
		{in: "WantsLayerShapes", owner: "callbacks/brokenAbility"},
		{in: "SavesOnValidation", owner: "callbacks/brokenAbility"},
		{in: "StopsAtStepEnd", owner: "module", module: true},
	} {
		t.Run(c.owner+"."+c.in, func(t *testing.T) {
			err := func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panicked: %v", r)
					}
				}()
				cb := &brokenAbility{}
				if !c.module {
					cb.in = c.in
				}
				cfg := quiet(trainer.Config{MaxEpochs: 1, AccumulateGradBatches: 2, ValCheckInterval: 3, Callbacks: []trainer.Callback{cb}})
				// The built-in bar is on, so that DisplaysProgress is asked.
				cfg.EnableProgressBar = nil
				tr, err := trainer.New(cfg)
				if err != nil {
					return err
				}
				var m module.Module = &linreg{in: 4, lr: 0.05}
				if c.module {
					m = &stopperMod{linreg{in: 4, lr: 0.05}}
				}
				return tr.Fit(context.Background(), m, loader(t, ds, 4, false, false), nil)
			}()
			errSays(t, c.in, err, []string{c.owner + "." + c.in, "nil pointer dereference", "abilitypanic_test.go"})
		})
	}
}
