package trainer_test

import (
	"context"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/trainer"
)

// rowCount is a count metric whose one count is the rows a step saw.
type rowCount struct{}

func (rowCount) Values(name string, c []float64, out map[string]float64) { out[name+"_rows"] = c[0] }

// countingReg logs, besides the losses, how many rows validation and test
// saw, as a count metric (summed over batches and ranks).
type countingReg struct{ evalReg }

func (m *countingReg) ValidationStep(s *module.Step) error {
	s.Log("val_loss", m.loss(s))
	s.LogCounts("val", rows(s), rowCount{})
	return nil
}

func (m *countingReg) TestStep(s *module.Step) error {
	s.Log("test_loss", m.loss(s))
	s.Log("test_max_y", G.Must(G.Max(s.Input("y"))), module.ReduceBy(module.Max))
	s.LogCounts("test", rows(s), rowCount{})
	return nil
}

func rows(s *module.Step) *G.Node {
	ones := G.Must(G.Add(G.Must(G.Mul(s.Input("y"), G.NewConstant(float32(0)))), G.NewConstant(float32(1))))
	return G.Must(G.Reshape(G.Must(G.Sum(ones)), []int{1}))
}

// TestEvaluationSetSmallerThanTheRanks: a validation and a test set of one
// example on two ranks. Under ddp and sharded rank 1's shard was empty, so
// it logged no metrics and the ranks' metric reductions disagreed (rank 0
// reduced [val_loss], rank 1 nothing), and its ModelCheckpoint failed with
// "val_loss was not logged"; fsdp dropped the metrics of its all-padding
// batch the same way. Every rank now evaluates (a rank with no example runs
// one padded row, left out of the metrics) and sees the one example's
// values, counted once; Predict returns the one row.
func TestEvaluationSetSmallerThanTheRanks(t *testing.T) {
	ctx := context.Background()
	trainDS := regression(t, 64, 0.01, 4)
	one := regression(t, 1, 0.01, 5)
	strategies := map[string]func(g collective.Collective) (strategy.Strategy, error){
		"ddp": func(g collective.Collective) (strategy.Strategy, error) {
			return ddp.NewDDP(ddp.DDPConfig{Group: g})
		},
		"sharded": func(g collective.Collective) (strategy.Strategy, error) {
			return sharded.New(sharded.Config{Group: g, Stage: 2})
		},
		"fsdp": func(g collective.Collective) (strategy.Strategy, error) {
			return fsdp.New(fsdp.Config{Group: g})
		},
	}
	for name, newStrat := range strategies {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			type result struct {
				val, test map[string]float64
				preds     []*tensor.Dense
				err       error
			}
			res := make([]result, 2)
			onStrat := func(r int, g collective.Collective) strategy.Strategy {
				s, err := newStrat(g)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			onRanks(t, 2, onStrat, func(int) trainer.Config {
				mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Monitor: "val_loss", SaveTopK: 1})
				if err != nil {
					t.Fatal(err)
				}
				return quiet(trainer.Config{MaxEpochs: 2, Seed: 3, DefaultRootDir: root, Callbacks: []trainer.Callback{mc}})
			}, func(r int, tr *trainer.Trainer) error {
				defer tr.Teardown(ctx)
				rr := &res[r]
				m := &countingReg{*newEvalReg()}
				if rr.err = tr.Fit(ctx, m, loader(t, trainDS, 8, true, false), loader(t, one, 8, false, false)); rr.err != nil {
					return nil
				}
				rr.val = tr.Metrics()
				if rr.test, rr.err = tr.Test(ctx, m, loader(t, one, 8, false, false)); rr.err != nil {
					return nil
				}
				rr.preds, rr.err = tr.Predict(ctx, m, loader(t, one, 8, false, false))
				return nil
			})
			x, y := make([]float32, 4), make([]float32, 1)
			if err := one.Read(0, [][]float32{x, y}); err != nil {
				t.Fatal(err)
			}
			for r := range res {
				if res[r].err != nil {
					t.Fatalf("rank %d: %v", r, res[r].err)
				}
				if got := res[r].val["val_rows"]; got != 1 {
					t.Errorf("rank %d: val_rows %g, want 1 (the one example, counted once)", r, got)
				}
				if got := res[r].test["test_rows"]; got != 1 {
					t.Errorf("rank %d: test_rows %g, want 1", r, got)
				}
				if got := res[r].test["test_max_y"]; got != float64(y[0]) {
					t.Errorf("rank %d: test_max_y %g, want the example's y %g", r, got, y[0])
				}
				if len(res[r].preds) != 1 || res[r].preds[0].Shape()[0] != 1 {
					t.Fatalf("rank %d: predictions %v, want one batch of one row", r, res[r].preds)
				}
			}
			// Every rank reports the one example's loss; the prediction's
			// square error is that loss.
			p := float64(res[0].preds[0].Float32s()[0])
			want := (p - float64(y[0])) * (p - float64(y[0]))
			for r := range res {
				if got := res[r].test["test_loss"]; math.Abs(got-want) > 1e-5*want+1e-7 {
					t.Errorf("rank %d: test_loss %g, want %g, the square error of the one prediction", r, got, want)
				}
				if got := float64(res[r].preds[0].Float32s()[0]); got != p {
					t.Errorf("rank %d: prediction %g, rank 0's %g", r, got, p)
				}
			}
		})
	}
}
