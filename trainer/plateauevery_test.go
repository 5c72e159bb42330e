package trainer_test

import (
	"context"
	"testing"

	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/trainer"
)

// keptPlateau is plateauReg keeping its scheduler, to read its state.
type keptPlateau struct {
	plateauReg
	sched *optim.ReduceOnPlateau
}

func (m *keptPlateau) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, s, err := m.plateauReg.ConfigureOptimizers()
	if err == nil {
		m.sched = s.(*optim.ReduceOnPlateau)
	}
	return o, s, err
}

// TestPlateauOnAValidationMetricStepsWhenValidationRuns: with validation
// every 2 epochs, a per-epoch ReduceOnPlateau watching a validation
// metric (named, or the default val_loss) steps after the epochs that
// validate, once per validation: not an error at the first epoch (the
// metric is not logged yet) and not a step on the previous validation's
// value, which never improves on itself and would cut the rate.
func TestPlateauOnAValidationMetricStepsWhenValidationRuns(t *testing.T) {
	ds := regression(t, 32, 0.01, 2)
	for _, monitor := range []string{"val_loss", ""} {
		m := &keptPlateau{plateauReg: plateauReg{linreg: linreg{in: 4, lr: 0.01, sgd: true}, cfg: optim.PlateauConfig{Monitor: monitor}}}
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 6, CheckValEveryNEpoch: 2, DisableSanityCheck: true}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), loader(t, ds, 16, false, false)); err != nil {
			t.Fatalf("Monitor %q: %v", monitor, err)
		}
		if n := m.sched.State()["count"]; n != 3 {
			t.Errorf("Monitor %q: the scheduler stepped %g times in 6 epochs validating every 2, want 3", monitor, n)
		}
	}
}
