package ddp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// An evaluation or predict step that the caller's cancel ends leaves the
// job's group usable: its graph exchanges nothing, and the rank must
// still meet the others (the trainer has them agree on how the loop
// ended). Before, the step failed the job: the group closed, and the next
// collective failed on every rank ("the job failed earlier", "peer lost").
func TestCancelledEvalStepKeepsTheGroup(t *testing.T) {
	for _, mode := range []module.Mode{module.Validate, module.Predict} {
		t.Run(mode.String(), func(t *testing.T) {
			group, err := inproc.NewGroup(2, inproc.Timeout(20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			strats := make([]strategy.Strategy, 2)
			for r := range strats {
				if strats[r], err = ddp.NewDDP(ddp.DDPConfig{Group: group[r]}); err != nil {
					t.Fatal(err)
				}
			}
			ds, err := strategytest.Regression(8, 6, 2, 1)
			if err != nil {
				t.Fatal(err)
			}
			m := &strategytest.MLP{In: 6, Hidden: 4, Out: 2}
			if err := strategytest.SetupAll(context.Background(), strats, m, ds.Fields(), 3); err != nil {
				t.Fatal(err)
			}
			b, err := strategytest.Rows(ds, 0, 4)
			if err != nil {
				t.Fatal(err)
			}
			cancelled, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := strats[1].Step(cancelled, mode, b, strategy.TrainOptions{}); !errors.Is(err, context.Canceled) {
				t.Fatalf("rank 1's %s step on a cancelled context: %v, want context.Canceled", mode, err)
			}
			err = strategytest.Each(strats, func(r int, s strategy.Strategy) error {
				v := []float64{float64(r + 1)}
				if err := s.Reduce(context.Background(), v, []float64{0}, []module.Reduce{module.Sum}); err != nil {
					return err
				}
				if v[0] != 3 {
					t.Errorf("rank %d: sum %v, want 3", r, v[0])
				}
				return nil
			})
			if err != nil {
				t.Errorf("a collective after the cancelled step: %v", err)
			}
		})
	}
}
