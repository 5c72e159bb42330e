package trainer_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/trainer"
)

// sanityWatch records what its hooks see of the sanity check and logs a
// metric of its own while it runs.
type sanityWatch struct {
	sanityLoss []float64 // val_loss in each OnValidationEnd of the check
	events     []string
}

func (*sanityWatch) Name() string { return "watch" }
func (w *sanityWatch) OnValidationEnd(ctx context.Context, s *trainer.State) error {
	if !s.SanityChecking {
		w.events = append(w.events, "validation end")
		return nil
	}
	v, ok := s.Metrics.Get("val_loss")
	if !ok || !s.Metrics.FromValidation("val_loss") {
		return fmt.Errorf("the sanity check's OnValidationEnd has no val_loss from validation: %v", s.Metrics.Names())
	}
	w.sanityLoss = append(w.sanityLoss, v)
	w.events = append(w.events, "sanity validation end")
	return s.LogMetrics(map[string]float64{"logged_in_sanity_check": 1})
}
func (w *sanityWatch) OnTrainStart(ctx context.Context, s *trainer.State) error {
	if s.SanityChecking {
		return fmt.Errorf("SanityChecking is still set when training starts")
	}
	if names := s.Metrics.Names(); len(names) != 0 {
		return fmt.Errorf("the sanity check's metrics %v outlived it", names)
	}
	w.events = append(w.events, "train start")
	return nil
}

// TestSanityCheckRunsValidationHooks: as Lightning's sanity check, Fit's
// runs the validation hooks with State.SanityChecking set and the check's
// val_loss (reduced across ranks: the loss of the initial weights on the
// whole set, what Validate measures before training) in State.Metrics;
// afterwards no metric of it is left, and nothing logged during it reaches
// metrics.csv.
func TestSanityCheckRunsValidationHooks(t *testing.T) {
	val := regression(t, 16, 0.1, 4)
	train := regression(t, 32, 0.1, 5)
	// The initial weights' val_loss, measured by Validate.
	tr, err := trainer.New(quiet(trainer.Config{Seed: 3}))
	if err != nil {
		t.Fatal(err)
	}
	before, err := tr.Validate(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, val, 4, false, false))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		ranks int
		strat func(r int, g collective.Collective) strategy.Strategy
	}{
		{"single", 1, func(int, collective.Collective) strategy.Strategy { return single.NewSingle() }},
		{"ddp", 2, ddpRank(t)},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			watches := make([]*sanityWatch, c.ranks)
			_, errs := onRanks(t, c.ranks, c.strat, func(r int) trainer.Config {
				watches[r] = &sanityWatch{}
				return quiet(trainer.Config{MaxEpochs: 1, Seed: 3, NumSanityValSteps: -1, DefaultRootDir: root, Callbacks: []trainer.Callback{watches[r]}})
			}, func(r int, tr *trainer.Trainer) error {
				return tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, train, 4, false, false), loader(t, val, 4, false, false))
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				w := watches[r]
				if want := []string{"sanity validation end", "train start", "validation end"}; !slices.Equal(w.events, want) {
					t.Errorf("rank %d: hooks saw %v, want %v", r, w.events, want)
				}
				if len(w.sanityLoss) != 1 || !near(w.sanityLoss[0], before["val_loss"], 1e-6) {
					t.Errorf("rank %d: the sanity check's val_loss %v, Validate's before training %v", r, w.sanityLoss, before["val_loss"])
				}
			}
			b, err := os.ReadFile(filepath.Join(root, "lightning_logs", "version_0", "metrics.csv"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "logged_in_sanity_check") {
				t.Errorf("metrics.csv holds what a callback logged during the sanity check:\n%s", b)
			}
		})
	}
}

func near(a, b, rel float64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= rel*max(1, b, -b)
}

// TestSanityCheckIsNotJudged: ModelCheckpoint and EarlyStopping do not act
// on the sanity check's metrics (the initial weights' val_loss, the worst
// of the run): EarlyStopping in mode "max" takes the first epoch's as its
// best, not the check's, and ModelCheckpoint saves no checkpoint of step 0.
func TestSanityCheckIsNotJudged(t *testing.T) {
	dir := t.TempDir()
	es, err := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "val_loss", Mode: "max", Patience: 1})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, Monitor: "val_loss", EveryNTrainSteps: 4, SaveTopK: -1, Filename: "{step}"})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 4, Seed: 3, DefaultRootDir: t.TempDir(), Callbacks: []trainer.Callback{es, mc}}))
	if err != nil {
		t.Fatal(err)
	}
	// 8 training batches an epoch, the loss falling from the start.
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, regression(t, 32, 0.1, 5), 4, false, false), loader(t, regression(t, 16, 0.1, 4), 4, false, false)); err != nil {
		t.Fatal(err)
	}
	if es.StoppedEpoch() != 1 || tr.Stats().Epochs != 2 {
		t.Errorf("EarlyStopping stopped in epoch %d after %d epochs (%q); want epoch 1, the first whose val_loss is below the first epoch's", es.StoppedEpoch(), tr.Stats().Epochs, es.Reason())
	}
	// Ranked by val_loss, the step checkpoints wait for the validation
	// that measures them: at each epoch's end.
	want := []string{"step=16.ckpt", "step=8.ckpt"}
	if got := slices.Sorted(maps.Keys(files(t, dir))); !slices.Equal(got, want) {
		t.Errorf("checkpoints %v, want %v (none of step 0)", got, want)
	}
}
