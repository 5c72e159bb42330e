package trainer_test

import (
	"context"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// brokenState is a Stateful callback whose StateDict or LoadStateDict has
// a bug.
type brokenState struct{ in string }

func (*brokenState) Name() string { return "brokenState" }
func (b *brokenState) StateDict() ([]byte, error) {
	if b.in == "StateDict" {
		var counts map[string][]byte
		return counts["best"][:1], nil // slice of nil past its length
	}
	return []byte(`{}`), nil
}
func (b *brokenState) LoadStateDict(p []byte) error {
	if b.in == "LoadStateDict" {
		var seen []int
		seen[len(p)] = 1 // index out of range
	}
	return nil
}

// TestStatefulCallbackPanicsAreErrors: a panic in a callback's StateDict
// (a checkpoint being saved) or LoadStateDict (a run resuming) is an error
// of Fit naming the callback and the method, with the user's line, as a
// panic in its hooks is: not a crash.
func TestStatefulCallbackPanicsAreErrors(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	root := t.TempDir()
	fit := func(in string, opts ...trainer.FitOption) (err error) {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: Fit panicked: %v", in, r)
			}
		}()
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, DefaultRootDir: root, Callbacks: []trainer.Callback{&brokenState{in}}}))
		if err != nil {
			t.Fatal(err)
		}
		return tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil, opts...)
	}
	errSays(t, "StateDict", fit("StateDict"), []string{"callbacks/brokenState.StateDict", "slice bounds out of range", "statefulpanic_test.go"})
	if err := fit("nothing"); err != nil {
		t.Fatal(err)
	}
	errSays(t, "LoadStateDict", fit("LoadStateDict", trainer.FromCheckpoint("last")), []string{"callbacks/brokenState.LoadStateDict", "index out of range", "statefulpanic_test.go"})
}

// brokenSchedule's AccumulateGradBatches has a bug from epoch 1 on.
type brokenSchedule struct{ per []int }

func (b *brokenSchedule) Name() string { return "brokenSchedule" }
func (b *brokenSchedule) AccumulateGradBatches(epoch int) int {
	return b.per[epoch] // one entry: index out of range at epoch 1
}

// TestAccumulationSchedulerPanicIsAnError: a panic in a callback's
// AccumulateGradBatches, the user's code as a hook is, is an error of Fit
// naming the callback and the method with the user's line, not a crash.
func TestAccumulationSchedulerPanicIsAnError(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Callbacks: []trainer.Callback{&brokenSchedule{per: []int{2}}}}))
	if err != nil {
		t.Fatal(err)
	}
	err = func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Fit panicked: %v", r)
			}
		}()
		return tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil)
	}()
	errSays(t, "AccumulateGradBatches", err, []string{"Callbacks[0] (brokenSchedule)", "AccumulateGradBatches(1)", "index out of range", "statefulpanic_test.go"})
}
