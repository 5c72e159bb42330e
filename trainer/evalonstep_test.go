package trainer_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
)

// perBatchEval logs its validation and test losses with OnStep, as a
// Lightning user logs on_step=True to see each batch.
type perBatchEval struct{ linreg }

func (m *perBatchEval) ValidationStep(s *module.Step) error {
	s.Log("val_loss", m.loss(s), module.OnStep(true))
	return nil
}

func (m *perBatchEval) TestStep(s *module.Step) error {
	s.Log("test_loss", m.loss(s), module.OnStep(true), module.OnEpoch(false))
	return nil
}

// TestEvaluationOnStepIsSaid: evaluation records one value per loop, the
// mean of its batches; a value logged with OnStep in a validation or test
// step gets no per-batch record, and the trainer says so once per name
// (with the name the mean is recorded under) instead of dropping the
// per-batch values, or turning OnEpoch(false) into a mean, without a word.
func TestEvaluationOnStepIsSaid(t *testing.T) {
	ds := regression(t, 32, 0.01, 1)
	var out bytes.Buffer
	cfg := quiet(trainer.Config{MaxEpochs: 2})
	cfg.Out = &out
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &perBatchEval{linreg{in: 4, lr: 0.05}}
	if err := tr.Fit(context.Background(), m, loader(t, ds, 16, false, false), loader(t, ds, 8, false, false)); err != nil {
		t.Fatal(err)
	}
	res, err := tr.Test(context.Background(), m, loader(t, ds, 8, false, false))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res["test_loss"]; !ok {
		t.Fatalf("Test returned %v, want test_loss", res)
	}
	log := out.String()
	for _, want := range []string{`"val_loss"`, "val_loss_epoch", `"test_loss"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the trainer's log does not name %s:\n%s", want, log)
		}
	}
	if n := strings.Count(log, "logged with OnStep"); n != 2 {
		t.Errorf("%d warnings about OnStep in evaluation, want 2 (once per name):\n%s", n, log)
	}
}
