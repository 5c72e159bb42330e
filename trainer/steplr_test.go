package trainer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/trainer"
)

// everyEpochHalved is linreg with SGD and a StepLR halving the rate at
// each epoch's end.
type everyEpochHalved struct{ linreg }

func (m *everyEpochHalved) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewSGD(optim.SGDConfig{LR: m.lr})
	if err != nil {
		return nil, nil, err
	}
	s, err := optim.NewStepLR(m.lr, 1, 0.5, optim.Every(optim.PerEpoch))
	return o, s, err
}

// TestStepRowsLogTheRateTheStepUsed: the lr of metrics.csv's row for step
// N is the rate optimizer step N ran at, beside that step's loss, whether
// the scheduler steps per step (a warm-up: 0.05, 0.1, 0.15, 0.2) or per
// epoch (0.2 twice, then 0.1 twice), not the rate of the step after.
func TestStepRowsLogTheRateTheStepUsed(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	for name, tc := range map[string]struct {
		fit  func(tr *trainer.Trainer) error
		want string
	}{
		"warm-up per step": {func(tr *trainer.Trainer) error {
			return tr.Fit(context.Background(), &warmedUp{linreg{in: 4, lr: 0.2}}, loader(t, ds, 16, false, false), nil)
		}, "[0.05 0.1 0.15 0.2]"},
		"halved per epoch": {func(tr *trainer.Trainer) error {
			return tr.Fit(context.Background(), &everyEpochHalved{linreg{in: 4, lr: 0.2, sgd: true}}, loader(t, ds, 16, false, false), nil)
		}, "[0.2 0.2 0.1 0.1]"},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, LogEveryNSteps: 1, DefaultRootDir: root, DisableCheckpointing: true}))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.fit(tr); err != nil {
				t.Fatal(err)
			}
			var lrs []string
			for _, r := range rowsWith(csvRows(t, filepath.Join(root, "lightning_logs", "version_0", "metrics.csv")), "lr") {
				lr, err := strconv.ParseFloat(r["lr"], 64)
				if err != nil {
					t.Fatalf("lr %q: %v", r["lr"], err)
				}
				lrs = append(lrs, strconv.FormatFloat(lr, 'g', 6, 64))
			}
			if got := fmt.Sprint(lrs); got != tc.want {
				t.Errorf("lr of the step rows %s, want %s", got, tc.want)
			}
		})
	}
}
