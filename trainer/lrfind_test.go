package trainer_test

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// TestLRFindSuggestsARateThatTrains: the range test on the linear
// regression with SGD (one batch of the whole set every step, so the curve
// is the rate's alone) tries rates from 1e-6 growing geometrically, stops
// once the loss diverges at the high end, and suggests a rate at which
// training gets the loss far lower than the lowest rate tried does.
func TestLRFindSuggestsARateThatTrains(t *testing.T) {
	ds := regression(t, 64, 0.01, 1)
	root := t.TempDir()
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 3, DefaultRootDir: root}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.LRFind(context.Background(), &linreg{in: 4, lr: 0.01, sgd: true}, loader(t, ds, 64, false, false), trainer.LRFindConfig{MinLR: 1e-6, MaxLR: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.LRs) != len(res.Losses) || len(res.LRs) < 20 || len(res.LRs) > 100 {
		t.Fatalf("%d rates and %d losses, want as many, 20 to 100", len(res.LRs), len(res.Losses))
	}
	step := math.Pow(100/1e-6, 1.0/99)
	for i, lr := range res.LRs {
		if want := 1e-6 * math.Pow(step, float64(i)); math.Abs(lr-want) > 1e-9*want {
			t.Fatalf("step %d ran at rate %g, want %g (geometric from 1e-6 to 100 in 100 steps)", i, lr, want)
		}
	}
	if res.Stopped == "" || len(res.LRs) == 100 {
		t.Errorf("SGD at rates up to 100 did not diverge and stop the search (%d steps, stopped %q)", len(res.LRs), res.Stopped)
	}
	if !(res.Suggestion > 1e-6 && res.Suggestion < 100) {
		t.Fatalf("suggestion %g, want a rate inside the range tried", res.Suggestion)
	}
	if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
		t.Errorf("LRFind left files under DefaultRootDir: %v %v", entries, err)
	}
	valLoss := func(lr float64) float64 {
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 20, Seed: 3}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), &linreg{in: 4, lr: lr, sgd: true}, loader(t, ds, 64, false, false), loader(t, ds, 64, false, false)); err != nil {
			t.Fatal(err)
		}
		return tr.Metrics()["val_loss"]
	}
	good, slow := valLoss(res.Suggestion), valLoss(1e-6)
	if !(good < slow/100) {
		t.Errorf("20 steps at the suggested rate %g: val_loss %g; at 1e-6: %g; want the suggestion 100 times better", res.Suggestion, good, slow)
	}
	t.Logf("suggestion %.3g after %d steps (%s): val_loss %.3g against %.3g", res.Suggestion, len(res.LRs), res.Stopped, good, slow)
}

// TestLRFindLeavesTheTrainerAlone: a Fit after LRFind on the same trainer
// and module value trains from the initial weights, as if LRFind had not
// run.
func TestLRFindLeavesTheTrainerAlone(t *testing.T) {
	ds := regression(t, 128, 0.1, 2)
	cfg := trainer.Config{MaxEpochs: 2, Seed: 11, Deterministic: true}
	want := fitHash(t, cfg, &linreg{in: 4, lr: 0.01}, loader(t, ds, 16, true, false))
	tr, err := trainer.New(quiet(cfg))
	if err != nil {
		t.Fatal(err)
	}
	m := &linreg{in: 4, lr: 0.01}
	if _, err := tr.LRFind(context.Background(), m, loader(t, ds, 16, true, false), trainer.LRFindConfig{NumTraining: 30, Mode: "linear", MinLR: 1e-4, MaxLR: 0.5}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), m, loader(t, ds, 16, true, false), nil); err != nil {
		t.Fatal(err)
	}
	if got := tr.Store().SHA256(); got != want {
		t.Errorf("Fit after LRFind gave weights %s, a fresh Fit %s", got, want)
	}
	if st := tr.Stats(); st.GlobalStep != 16 {
		t.Errorf("Fit after LRFind took %d steps, want 2 epochs of 8", st.GlobalStep)
	}
}

func TestLRFindLinearRates(t *testing.T) {
	tr, err := trainer.New(quiet(trainer.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.LRFind(context.Background(), &linreg{in: 4, lr: 0.01, sgd: true}, loader(t, regression(t, 64, 0.1, 2), 16, true, false),
		trainer.LRFindConfig{NumTraining: 11, Mode: "linear", MinLR: 0.001, MaxLR: 0.011, EarlyStopThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.LRs) != 11 || res.Stopped != "" {
		t.Fatalf("%d steps, stopped %q: want all 11", len(res.LRs), res.Stopped)
	}
	for i, lr := range res.LRs {
		if want := 0.001 + 0.001*float64(i); math.Abs(lr-want) > 1e-12 {
			t.Errorf("step %d at rate %g, want %g", i, lr, want)
		}
	}
}

func TestLRFindErrors(t *testing.T) {
	ctx := context.Background()
	l := loader(t, regression(t, 64, 0.1, 2), 16, true, false)
	for _, c := range []struct {
		name string
		cfg  trainer.Config
		lf   trainer.LRFindConfig
		want []string
	}{
		{"several devices", trainer.Config{Devices: 2, Strategy: "ddp"}, trainer.LRFindConfig{}, []string{`Strategy is "ddp" on 2 devices and 1 node`, "one device"}},
		{"rates reversed", trainer.Config{}, trainer.LRFindConfig{MinLR: 1, MaxLR: 0.1}, []string{"MinLR 1 and MaxLR 0.1", "0 < MinLR < MaxLR"}},
		{"one step", trainer.Config{}, trainer.LRFindConfig{NumTraining: 1}, []string{"NumTraining is 1"}},
		{"mode", trainer.Config{}, trainer.LRFindConfig{Mode: "cosine"}, []string{`Mode is "cosine"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := trainer.New(quiet(c.cfg))
			if err != nil {
				t.Fatal(err)
			}
			_, err = tr.LRFind(ctx, &linreg{in: 4, lr: 0.01}, l, c.lf)
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("LRFind = %v, want an error saying %q", err, w)
				}
			}
		})
	}
}

// TestLRFindEndsAtANonFiniteLoss: with early stopping off, rates up to 1e12
// drive SGD's loss to infinity or NaN; that ends the search with its
// results, not LRFind with an error.
func TestLRFindEndsAtANonFiniteLoss(t *testing.T) {
	tr, err := trainer.New(quiet(trainer.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	ds := regression(t, 64, 0.01, 1)
	res, err := tr.LRFind(context.Background(), &linreg{in: 4, lr: 0.01, sgd: true}, loader(t, ds, 64, false, false),
		trainer.LRFindConfig{MinLR: 1e-4, MaxLR: 1e12, EarlyStopThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stopped, "the loss was") || len(res.LRs) == 100 {
		t.Fatalf("stopped %q after %d steps, want a stop at a non-finite loss", res.Stopped, len(res.LRs))
	}
	if !(res.Suggestion >= 1e-4 && res.Suggestion < 1e12) {
		t.Errorf("suggestion %g", res.Suggestion)
	}
}
