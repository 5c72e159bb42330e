package trainer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// TestEvalLoaderDroppingEveryBatchIsAnError: 40 validation examples in
// batches of 32 with DropLast are one batch on one device, but 20 a rank
// under ddp at 2 ranks, so no batch: Validate returned an empty map and
// Fit validated nothing, without a word. Every rank now fails naming
// DropLast and BatchSize.
func TestEvalLoaderDroppingEveryBatchIsAnError(t *testing.T) {
	for _, during := range []string{"Validate", "Fit"} {
		t.Run(during, func(t *testing.T) {
			res := make([]map[string]float64, 2)
			_, errs := onRanks(t, 2, ddpRank(t), func(int) trainer.Config {
				return quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: t.TempDir()})
			}, func(r int, tr *trainer.Trainer) error {
				defer tr.Teardown(context.Background())
				m := newResumeJob(t, 1, 0).mod()
				train := loader(t, regression(t, 64, 0.1, 9), 8, true, false)
				valLoader := loader(t, regression(t, 40, 0.1, 9), 32, false, true)
				if during == "Fit" {
					return tr.Fit(context.Background(), m, train, valLoader)
				}
				if err := tr.Fit(context.Background(), m, train, nil); err != nil {
					return err
				}
				var err error
				res[r], err = tr.Validate(context.Background(), m, valLoader)
				return err
			})
			for r, err := range errs {
				if err == nil || !strings.Contains(err.Error(), "DropLast is set") || !strings.Contains(err.Error(), "BatchSize 32") {
					t.Errorf("rank %d: %v (metrics %v), want an error naming DropLast and BatchSize", r, err, res[r])
				}
			}
		})
	}
	// One device: the same loader has its one batch, and validates.
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, HandleSignals: trainer.Bool(false), DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	m := newResumeJob(t, 1, 0).mod()
	if err := tr.Fit(context.Background(), m, loader(t, regression(t, 64, 0.1, 9), 8, true, false), nil); err != nil {
		t.Fatal(err)
	}
	got, err := tr.Validate(context.Background(), m, loader(t, regression(t, 40, 0.1, 9), 32, false, true))
	if err != nil || len(got) == 0 {
		t.Errorf("one device: Validate = %v, %v; want the metrics of its one batch", got, err)
	}
}
