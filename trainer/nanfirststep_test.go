package trainer_test

import (
	"context"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
)

// logOfNegative is linreg whose loss is the log of a negative number: NaN
// from the first batch, before any update.
type logOfNegative struct{ linreg }

func (m *logOfNegative) TrainingStep(s *module.Step) (*G.Node, error) {
	mse := m.loss(s)
	return G.Must(G.Log(G.Must(G.Sub(mse, G.NewConstant(float32(1e6)))))), nil
}

// A NaN loss before the first optimizer step comes from the step's own
// ops, not from the learning rate: the error says so instead of advising
// a lower one; after updates the learning-rate advice stays.
func TestNaNLossBeforeAnyStepPointsAtTheStep(t *testing.T) {
	ds := regression(t, 64, 0, 1)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), &logOfNegative{linreg{in: 4, lr: 0.01}}, loader(t, ds, 16, false, false), nil)
	if err == nil {
		t.Fatal("Fit with a NaN loss succeeded")
	}
	for _, want := range []string{"the loss is NaN", "before the first optimizer step", "TrainingStep", "WarnOnNaN"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want one containing %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "learning rate") {
		t.Errorf("err = %v: advises a learning rate, which no update has used", err)
	}
}

// sqrtOfZero is linreg whose loss is the square root of zero: finite, with
// a gradient that is NaN from the first batch, before any update.
type sqrtOfZero struct{ linreg }

func (m *sqrtOfZero) TrainingStep(s *module.Step) (*G.Node, error) {
	mse := m.loss(s)
	return G.Must(G.Sqrt(G.Must(G.Sub(mse, mse)))), nil
}

// DetectAnomaly's error before the first optimizer step points at the
// step's ops, not at the learning rate, as the NaN loss's does.
func TestDetectAnomalyBeforeAnyStepPointsAtTheStep(t *testing.T) {
	ds := regression(t, 64, 0, 1)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DetectAnomaly: true}))
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), &sqrtOfZero{linreg{in: 4, lr: 0.01}}, loader(t, ds, 16, false, false), nil)
	if err == nil {
		t.Fatal("Fit with a NaN gradient and DetectAnomaly succeeded")
	}
	for _, want := range []string{"DetectAnomaly", "before the first optimizer step", "TrainingStep", "square root"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want one containing %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "learning rate") {
		t.Errorf("err = %v: advises a learning rate, which no update has used", err)
	}
}
