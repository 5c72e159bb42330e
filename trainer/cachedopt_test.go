package trainer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/trainer"
)

// keepsItsOptimizer returns the same optimizer from every
// ConfigureOptimizers call, as a module that builds it once might.
type keepsItsOptimizer struct {
	linreg
	opt optim.Optimizer
}

func (m *keepsItsOptimizer) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	if m.opt == nil {
		o, err := optim.NewSGD(optim.SGDConfig{LR: m.lr})
		if err != nil {
			return nil, nil, err
		}
		m.opt = o
	}
	return m.opt, nil, nil
}

// TestConfigureOptimizersReturningTheSameOptimizer: fitting a module again
// in a new Trainer when its ConfigureOptimizers hands back the optimizer
// of the first Fit is an error that names ConfigureOptimizers and says to
// make a new optimizer in every call.
func TestConfigureOptimizersReturningTheSameOptimizer(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	m := &keepsItsOptimizer{linreg: linreg{in: 4, lr: 0.05}}
	for i := range 2 {
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
		if err != nil {
			t.Fatal(err)
		}
		err = tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), nil)
		switch {
		case i == 0 && err != nil:
			t.Fatal(err)
		case i == 1 && err == nil:
			t.Fatal("the second Fit bound the first Fit's optimizer again without an error")
		case i == 1 && !strings.Contains(err.Error(), "ConfigureOptimizers") || i == 1 && !strings.Contains(err.Error(), "new optimizer"):
			t.Errorf("error %q does not say that ConfigureOptimizers must return a new optimizer", err)
		}
	}
}
