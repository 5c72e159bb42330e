package trainer_test

import (
	"context"
	"testing"

	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/trainer"
)

// optimizersPanic is linreg whose ConfigureOptimizers has a bug.
type optimizersPanic struct{ linreg }

func (m *optimizersPanic) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	var byName map[string]float64
	byName["lr"] = m.lr // assignment to a nil map
	return nil, nil, nil
}

// hparamsPanic is linreg whose HParams has a bug.
type hparamsPanic struct{ linreg }

func (m *hparamsPanic) HParams() map[string]any {
	var layers []int
	return map[string]any{"width": layers[2]} // index out of range
}

// TestModuleMethodPanicsAreErrors: a panic in ConfigureOptimizers or
// HParams, the module's code as its steps and hooks are, is an error of
// Fit naming the method, with the panic value and the stack down to the
// user's line, as the README promises for the user's code: not a crash.
func TestModuleMethodPanicsAreErrors(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	cases := []struct {
		name string
		fit  func() error
		want []string
	}{
		{"ConfigureOptimizers", func() error {
			tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
			if err != nil {
				t.Fatal(err)
			}
			return tr.Fit(context.Background(), &optimizersPanic{linreg{in: 4, lr: 0.05}}, loader(t, ds, 16, false, false), nil)
		}, []string{"ConfigureOptimizers", "nil map", "modulepanic_test.go"}},
		{"HParams", func() error {
			tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
			if err != nil {
				t.Fatal(err)
			}
			return tr.Fit(context.Background(), &hparamsPanic{linreg{in: 4, lr: 0.05}}, loader(t, ds, 16, false, false), nil)
		}, []string{"HParams", "index out of range", "modulepanic_test.go"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("Fit panicked: %v", r)
					}
				}()
				err = c.fit()
			}()
			errSays(t, c.name, err, c.want)
		})
	}
}
