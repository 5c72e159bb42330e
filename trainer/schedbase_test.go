package trainer_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/trainer"
)

// twoRates configures SGD at lr and a StepLR from base.
type twoRates struct {
	linreg
	base float64
}

func (m *twoRates) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewSGD(optim.SGDConfig{LR: m.lr})
	if err != nil {
		return nil, nil, err
	}
	s, err := optim.NewStepLR(m.base, 2, 0.5)
	return o, s, err
}

// TestSchedulerBaseRateOverOptimizersIsSaid: torch's schedulers start from
// the optimizer's rate; here a StepLR or cosine schedule starts from its
// own base rate, which replaces the optimizer's. A base that differs from
// the optimizer's rate (0.1 over 0.01) trains at the base: the trainer
// says so, naming both, and says nothing when they agree.
func TestSchedulerBaseRateOverOptimizersIsSaid(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	for _, tc := range []struct {
		base float64
		warn bool
	}{{0.1, true}, {0.01, false}} {
		var out bytes.Buffer
		cfg := quiet(trainer.Config{MaxEpochs: 1})
		cfg.Out = &out
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), &twoRates{linreg{in: 4, lr: 0.01, sgd: true}, tc.base}, loader(t, ds, 16, false, false), nil); err != nil {
			t.Fatal(err)
		}
		log := out.String()
		said := strings.Contains(log, "0.1") && strings.Contains(log, "0.01") && strings.Contains(log, "StepLR")
		if said != tc.warn {
			t.Errorf("base %g over the optimizer's 0.01: warned %v, want %v:\n%s", tc.base, said, tc.warn, log)
		}
	}
}
