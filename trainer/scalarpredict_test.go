package trainer_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Every rank of a multi-rank strategy refuses a scalar PredictStep with
// strategy.ErrScalarPrediction: the engine hands a scalar back as a 0-d
// tensor, and each strategy says what predictions need rather than
// gathering it as one row.
func TestPredictOfAScalarOnEveryRank(t *testing.T) {
	ds := regression(t, 20, 0, 5)
	strats := []struct {
		name string
		mk   func(g collective.Collective) (strategy.Strategy, error)
	}{
		{"ddp", func(g collective.Collective) (strategy.Strategy, error) { return ddp.NewDDP(ddp.DDPConfig{Group: g}) }},
		{"sharded", func(g collective.Collective) (strategy.Strategy, error) {
			return sharded.New(sharded.Config{Group: g, Stage: 2})
		}},
		{"fsdp", func(g collective.Collective) (strategy.Strategy, error) { return fsdp.New(fsdp.Config{Group: g}) }},
	}
	for _, c := range strats {
		t.Run(c.name, func(t *testing.T) {
			group, err := inproc.NewGroup(2)
			if err != nil {
				t.Fatal(err)
			}
			teardownAtEnd(t, nil, group)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				s, err := c.mk(group[r])
				if err != nil {
					t.Fatal(err)
				}
				tr, err := trainer.New(quiet(trainer.Config{Seed: 1, StrategyImpl: s, HandleSignals: trainer.Bool(false)}))
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[r] = tr.Predict(context.Background(), &scalarPredict{linreg{in: 4, lr: 0.05}}, loader(t, ds, 8, false, false))
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if !errors.Is(err, strategy.ErrScalarPrediction) {
					t.Errorf("rank %d: Predict of a scalar: %v; want strategy.ErrScalarPrediction", r, err)
				}
			}
		})
	}
}
