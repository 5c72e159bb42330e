package callbacks_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// With the everyday callbacks, a ddp run's ranks agree on stopping with
// each step's gradients: their own all-reduce ("stop agreement") runs at
// each epoch's last batch and its end only. A Timer checking its budget
// after each batch keeps one after every batch (it stops in the batch
// its time runs out); one checking at each epoch's end does not.
func TestEverydayCallbacksLetTheStopFlagsRide(t *testing.T) {
	const ranks, epochs = 2, 2
	for _, tc := range []struct {
		name  string
		cbs   func(t *testing.T, dir string) []trainer.Callback
		perEp func(steps int) int // stop agreements a rank runs in an epoch of steps
	}{
		{"everyday callbacks", func(t *testing.T, dir string) []trainer.Callback {
			pb, err := callbacks.NewProgressBar(callbacks.ProgressBarConfig{Out: io.Discard})
			must(t, err)
			lr, err := callbacks.NewLearningRateMonitor("step")
			must(t, err)
			ds, err := callbacks.NewDeviceStatsMonitor(callbacks.DeviceStatsConfig{EveryNSteps: 2})
			must(t, err)
			mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, EveryNTrainSteps: 3, LastOnly: true})
			must(t, err)
			return []trainer.Callback{pb, lr, ds, mc}
		}, func(int) int { return 2 }},
		{"Timer every step", func(t *testing.T, dir string) []trainer.Callback {
			tm, err := callbacks.NewTimer(callbacks.TimerConfig{Duration: time.Hour})
			must(t, err)
			return []trainer.Callback{tm}
		}, func(steps int) int { return steps + 1 }},
		{"Timer every epoch", func(t *testing.T, dir string) []trainer.Callback {
			tm, err := callbacks.NewTimer(callbacks.TimerConfig{Duration: time.Hour, Interval: "epoch"})
			must(t, err)
			return []trainer.Callback{tm}
		}, func(int) int { return 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group, err := inproc.NewGroup(ranks, inproc.Timeout(20*time.Second))
			must(t, err)
			prof := profiler.NewSimple() // both ranks' spans
			root, dir := t.TempDir(), t.TempDir()
			trs := make([]*trainer.Trainer, ranks)
			for r := range trs {
				d, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
				must(t, err)
				// The ProgressBar among the everyday callbacks replaces the
				// trainer's own (EnableProgressBar left unset).
				trs[r], err = trainer.New(trainer.Config{MaxEpochs: epochs, Seed: 5, StrategyImpl: d, Callbacks: tc.cbs(t, dir), Profiler: prof,
					Out: io.Discard, DefaultRootDir: root, HandleSignals: trainer.Bool(false)})
				must(t, err)
			}
			errs := make([]error, ranks)
			var wg sync.WaitGroup
			for r, tr := range trs {
				train, _ := regression(t)
				wg.Go(func() { errs[r] = tr.Fit(context.Background(), &linreg{}, train, nil) })
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			steps := trs[0].Stats().GlobalStep / epochs
			calls := 0
			for _, row := range prof.Rows() {
				if row.Action == "stop agreement" {
					calls = row.Calls
				}
			}
			// Three agreements a rank before the first batch (after
			// OnFitStart, the sanity check and OnTrainStart), then those
			// of each epoch.
			if want := ranks * (3 + epochs*tc.perEp(steps)); steps < 4 || calls != want {
				t.Errorf("%d ranks, %d epochs of %d steps: %d stop agreements, want %d", ranks, epochs, steps, calls, want)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
