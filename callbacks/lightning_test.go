package callbacks_test

import (
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// The tests of this file run the callbacks as a Lightning user would and
// check what Lightning 2.x's callbacks do in the same run.

// Without validation, Lightning's EarlyStopping checks at each training
// epoch's end (check_on_train_epoch_end defaults to true there), so a
// training metric stops the run. Before, it waited for validations that
// never came and never stopped.
func TestEarlyStoppingWithoutValidationWatchesTheTrainingMetric(t *testing.T) {
	// The loss falls by less than MinDelta from one epoch to the next.
	es, err := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "train_loss", Patience: 1, MinDelta: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := fit(t, trainer.Config{MaxEpochs: 5, Callbacks: []trainer.Callback{es}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Epochs != 2 || es.StoppedEpoch() != 1 || !strings.Contains(st.StoppedEarly, "monitored metric train_loss did not improve in the last 1 checks") {
		t.Errorf("epochs %d, stopped epoch %d, reason %q; want a stop at epoch 1", st.Epochs, es.StoppedEpoch(), st.StoppedEarly)
	}
	// A validation metric in a Fit without validation is an error naming
	// what was logged, as Lightning's strict check raises.
	es2, _ := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "val_loss"})
	_, err = fit(t, trainer.Config{MaxEpochs: 2, Callbacks: []trainer.Callback{es2}}, false)
	if err == nil || !strings.Contains(err.Error(), `callbacks/EarlyStopping.OnTrainEpochEnd: EarlyStopping(Monitor "val_loss"): the metric was not logged; logged metrics are [train_loss_epoch train_loss_step]`) {
		t.Errorf("err = %v", err)
	}
}

// Lightning keys EarlyStopping's state by monitor and mode: resumed with
// the same, its wait count and best carry on (one more check without
// improvement stops a run that waited 2 of 3); resumed with the other
// mode, it starts afresh. Before, a "max" run took the "min" run's lowest
// value as its best and its wait count, and stopped early.
func TestEarlyStoppingResumedWithAnotherModeStartsAfresh(t *testing.T) {
	dir := t.TempDir()
	mc, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, LastOnly: true})
	es, _ := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "score", Patience: 3})
	sc := &script{name: "score", values: []float64{0.3, 0.5, 0.6}}
	if _, err := fit(t, trainer.Config{MaxEpochs: 3, LimitTrainBatches: 2, Callbacks: []trainer.Callback{sc, es, mc}}, true); err != nil {
		t.Fatal(err)
	}
	if es.Best() != 0.3 || es.Wait() != 2 {
		t.Fatalf("first run: best %v, wait %d; want 0.3 and 2", es.Best(), es.Wait())
	}
	for _, c := range []struct {
		mode    string
		score   float64
		best    float64
		wait    int
		stopped int
	}{{"min", 0.4, 0.3, 3, 3}, {"max", 0.2, 0.2, 0, -1}} {
		es2, _ := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "score", Mode: c.mode, Patience: 3})
		sc2 := &script{name: "score", values: []float64{c.score}}
		if _, err := fit(t, trainer.Config{MaxEpochs: 4, LimitTrainBatches: 2, Callbacks: []trainer.Callback{sc2, es2}}, true, trainer.FromCheckpoint(filepath.Join(dir, "last.ckpt"))); err != nil {
			t.Fatal(err)
		}
		if es2.Best() != c.best || es2.Wait() != c.wait || es2.StoppedEpoch() != c.stopped {
			t.Errorf("resumed with mode %s: best %v, wait %d, stopped in epoch %d; want %v, %d and %d", c.mode, es2.Best(), es2.Wait(), es2.StoppedEpoch(), c.best, c.wait, c.stopped)
		}
	}
}

// Lightning's Timer checks its budget at fit start: a run resumed with the
// budget spent trains no further. Before, with Interval "epoch", it
// trained a whole epoch more.
func TestTimerResumedWithItsBudgetSpentStopsBeforeTraining(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	dir := t.TempDir()
	for _, interval := range []string{"epoch", "step"} {
		t.Run(interval, func(t *testing.T) {
			tm, _ := callbacks.NewTimer(callbacks.TimerConfig{Duration: 10 * time.Second, Interval: interval, Now: clock})
			mc, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, LastOnly: true})
			tr, err := fit(t, trainer.Config{MaxEpochs: 5, LimitTrainBatches: 4, Callbacks: []trainer.Callback{tick{&now}, tm, mc}}, false)
			if err != nil {
				t.Fatal(err)
			}
			spent := tr.Stats().GlobalStep // one second a step
			tm2, _ := callbacks.NewTimer(callbacks.TimerConfig{Duration: 10 * time.Second, Interval: interval, Now: clock})
			tr, err = fit(t, trainer.Config{MaxEpochs: 5, LimitTrainBatches: 4, Callbacks: []trainer.Callback{tick{&now}, tm2}}, false, trainer.FromCheckpoint(filepath.Join(dir, "last.ckpt")))
			if err != nil {
				t.Fatal(err)
			}
			if st := tr.Stats(); st.GlobalStep != spent || !strings.Contains(st.StoppedEarly, "Timer: the time budget of 10s is spent") {
				t.Errorf("resumed at step %d with the budget spent: ended at step %d (%q); want no step more", spent, st.GlobalStep, st.StoppedEarly)
			}
		})
	}
}

// slashMetrics logs metrics named with "/", as Lightning users group them
// ("val/loss"), at each validation: 0.123456 + epoch.
type slashMetrics struct{}

func (slashMetrics) Name() string { return "slashMetrics" }
func (slashMetrics) OnValidationEnd(ctx context.Context, s *trainer.State) error {
	if s.SanityChecking {
		return nil
	}
	return s.LogMetrics(map[string]float64{"val/loss": 0.123456 + float64(s.Epoch)})
}

// A metric named with "/" in a Filename template is written with "_", as
// ModelCheckpointConfig.Filename says (Lightning would make a
// subdirectory). Before, Validate refused any "/" in the template, in
// braces too. A "/" outside braces is still refused.
func TestModelCheckpointFilenameWithSlashInMetricName(t *testing.T) {
	dir := t.TempDir()
	mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, Monitor: "val/loss", SaveTopK: 2, Filename: "{epoch:02d}-{val/loss:.2f}"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fit(t, trainer.Config{MaxEpochs: 3, LimitTrainBatches: 2, Callbacks: []trainer.Callback{slashMetrics{}, mc}}, true); err != nil {
		t.Fatal(err)
	}
	if got, want := files(t, dir), []string{"epoch=00-val_loss=0.12.ckpt", "epoch=01-val_loss=1.12.ckpt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	_, err = callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Filename: "runs/{epoch}"})
	if err == nil || !strings.Contains(err.Error(), `ModelCheckpoint Filename "runs/{epoch}": braces must pair up, as in "{epoch}-{val_loss:.2f}", and outside them it must not contain a path separator (use Dirpath)`) {
		t.Errorf("a Filename with a directory: err = %v", err)
	}
}

// A file a ModelCheckpoint does not keep, found where a new checkpoint is
// to go, is left alone and the new one is named -v1, as Lightning's
// version counter does. Before, the callback overwrote it and, once a
// newer checkpoint displaced it, deleted it: an earlier run's checkpoint in
// the same Dirpath, or one another ModelCheckpoint in the same directory
// keeps (trainer.New refuses two with the same Dirpath and Filename, but
// not one given the run directory's checkpoints/ by name beside one
// defaulting to it).
func TestModelCheckpointLeavesFilesItDoesNotKeep(t *testing.T) {
	t.Run("an earlier run's", func(t *testing.T) {
		dir := t.TempDir()
		earlier := filepath.Join(dir, "epoch=0-step=2.ckpt")
		if err := os.WriteFile(earlier, []byte("an earlier run's checkpoint"), 0o644); err != nil {
			t.Fatal(err)
		}
		mc, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir})
		if _, err := fit(t, trainer.Config{MaxEpochs: 2, LimitTrainBatches: 2, Callbacks: []trainer.Callback{mc}}, true); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(earlier); err != nil || string(b) != "an earlier run's checkpoint" {
			t.Errorf("the earlier run's checkpoint: %q, %v", b, err)
		}
		if got, want := files(t, dir), []string{"epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt"}; !reflect.DeepEqual(got, want) {
			t.Errorf("files %v, want %v", got, want)
		}
	})
	t.Run("another callback's", func(t *testing.T) {
		root := t.TempDir()
		top3, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Name: "top3", Monitor: "val/loss", SaveTopK: 3})
		dir := filepath.Join(root, "lightning_logs", "version_0", "checkpoints")
		newest, _ := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Name: "newest", Dirpath: dir})
		if _, err := fit(t, trainer.Config{DefaultRootDir: root, MaxEpochs: 3, LimitTrainBatches: 2, Callbacks: []trainer.Callback{slashMetrics{}, top3, newest}}, true); err != nil {
			t.Fatal(err)
		}
		if len(top3.BestK()) != 3 {
			t.Fatalf("top3 keeps %v", top3.BestK())
		}
		for p := range top3.BestK() {
			if _, err := trainer.VerifyCheckpoint(p); err != nil {
				t.Errorf("top3's %s: %v", filepath.Base(p), err)
			}
		}
		if got, want := filepath.Base(newest.BestModelPath()), "epoch=2-step=6-v1.ckpt"; got != want {
			t.Errorf("newest's checkpoint %s, want %s", got, want)
		}
		if got, want := files(t, dir), []string{"epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=2-step=6-v1.ckpt", "epoch=2-step=6.ckpt"}; !reflect.DeepEqual(got, want) {
			t.Errorf("files %v, want %v", got, want)
		}
	})
}

// Of checkpoints scoring alike, Lightning's best is the older and the
// older is the first displaced (best_k_models keeps insertion order), a
// resumed run's too. Before, ties went by name: epoch=10 beat epoch=9 as
// the best, and a better score displaced epoch=1 rather than epoch=0.
func TestModelCheckpointTiesGoToTheOlder(t *testing.T) {
	run := func(t *testing.T, dir string, epochs int, scores []float64, opts ...trainer.FitOption) *callbacks.ModelCheckpoint {
		t.Helper()
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, Monitor: "score", SaveTopK: 2, Filename: "{epoch}", SaveLast: true})
		if err != nil {
			t.Fatal(err)
		}
		sc := &script{name: "score", values: scores}
		if _, err := fit(t, trainer.Config{MaxEpochs: epochs, LimitTrainBatches: 2, Callbacks: []trainer.Callback{sc, mc}}, true, opts...); err != nil {
			t.Fatal(err)
		}
		return mc
	}
	check := func(t *testing.T, mc *callbacks.ModelCheckpoint, wantFiles []string, wantBest string) {
		t.Helper()
		if got := files(t, mc.Dir()); !reflect.DeepEqual(got, wantFiles) {
			t.Errorf("files %v, want %v", got, wantFiles)
		}
		if got := filepath.Base(mc.BestModelPath()); got != wantBest {
			t.Errorf("best %s, want %s", got, wantBest)
		}
	}
	t.Run("best", func(t *testing.T) {
		mc := run(t, t.TempDir(), 12, []float64{9, 9, 9, 9, 9, 9, 9, 9, 9, 1, 1, 1})
		check(t, mc, []string{"epoch=10.ckpt", "epoch=9.ckpt", "last.ckpt"}, "epoch=9.ckpt")
	})
	t.Run("displaced", func(t *testing.T) {
		mc := run(t, t.TempDir(), 3, []float64{1, 1, 0.5})
		check(t, mc, []string{"epoch=1.ckpt", "epoch=2.ckpt", "last.ckpt"}, "epoch=2.ckpt")
	})
	t.Run("displaced after resume", func(t *testing.T) {
		dir := t.TempDir()
		// epoch=9 and epoch=10 tie; by name, epoch=10 would go.
		run(t, dir, 11, []float64{9, 9, 9, 9, 9, 9, 9, 9, 9, 1, 1})
		mc := run(t, dir, 12, []float64{0.5}, trainer.FromCheckpoint(filepath.Join(dir, "last.ckpt")))
		check(t, mc, []string{"epoch=10.ckpt", "epoch=11.ckpt", "last.ckpt"}, "epoch=11.ckpt")
	})
}

// Lightning's auto_insert_metric_name=False writes the values alone, for
// templates that name the fields themselves.
func TestModelCheckpointOmitMetricNames(t *testing.T) {
	dir := t.TempDir()
	mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, Monitor: "val/loss", SaveTopK: -1, OmitMetricNames: true,
		Filename: "sample-epoch{epoch:02d}-val_loss{val/loss:.2f}"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fit(t, trainer.Config{MaxEpochs: 2, LimitTrainBatches: 2, Callbacks: []trainer.Callback{slashMetrics{}, mc}}, true); err != nil {
		t.Fatal(err)
	}
	if got, want := files(t, dir), []string{"sample-epoch00-val_loss0.12.ckpt", "sample-epoch01-val_loss1.12.ckpt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
}

// Lightning never deletes the checkpoint the Fit resumed from
// (trainer.ckpt_path), though a better one displaces it from the top k:
// the user may resume from it again. Before, resumed into the same
// Dirpath, the callback deleted it. State.ResumedFrom names it.
func TestModelCheckpointKeepsTheCheckpointResumedFrom(t *testing.T) {
	dir := t.TempDir()
	newMC := func() *callbacks.ModelCheckpoint {
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, Monitor: "score", Filename: "{epoch}"})
		if err != nil {
			t.Fatal(err)
		}
		return mc
	}
	sc := &script{name: "score", values: []float64{5, 3}}
	if _, err := fit(t, trainer.Config{MaxEpochs: 2, LimitTrainBatches: 2, Callbacks: []trainer.Callback{sc, newMC()}}, true); err != nil {
		t.Fatal(err)
	}
	from := filepath.Join(dir, "epoch=1.ckpt")
	mc := newMC()
	sc = &script{name: "score", values: []float64{1, 0.5}}
	if _, err := fit(t, trainer.Config{MaxEpochs: 4, LimitTrainBatches: 2, Callbacks: []trainer.Callback{sc, mc}}, true, trainer.FromCheckpoint(from)); err != nil {
		t.Fatal(err)
	}
	if got, want := files(t, dir), []string{"epoch=1.ckpt", "epoch=3.ckpt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("files %v, want %v: the one resumed from kept, epoch=2's displaced by epoch=3's", got, want)
	}
	if got := mc.BestK(); len(got) != 1 || got[filepath.Join(dir, "epoch=3.ckpt")] != 0.5 {
		t.Errorf("ranked %v, want epoch=3.ckpt alone", got)
	}
}

// With several ranks, rank 0 looks for the file and every rank takes its
// answer, so that they name the checkpoint alike: with ShardedCheckpoint
// each writes its shard beside that name, and the index must find them.
func TestModelCheckpointRanksAgreeOnTheVersionedName(t *testing.T) {
	dir := t.TempDir()
	earlier := filepath.Join(dir, "epoch=0-step=1.ckpt")
	if err := os.WriteFile(earlier, []byte("an earlier run's checkpoint"), 0o644); err != nil {
		t.Fatal(err)
	}
	const ranks = 2
	group, err := inproc.NewGroup(ranks, inproc.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mcs := make([]*callbacks.ModelCheckpoint, ranks)
	trs := make([]*trainer.Trainer, ranks)
	for r := range ranks {
		s, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
		if err != nil {
			t.Fatal(err)
		}
		if mcs[r], err = callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, SaveTopK: -1}); err != nil {
			t.Fatal(err)
		}
		if trs[r], err = trainer.New(trainer.Config{MaxEpochs: 2, LimitTrainBatches: 1, Seed: 5, StrategyImpl: s, ShardedCheckpoint: true,
			Callbacks: []trainer.Callback{mcs[r]}, Out: io.Discard, EnableProgressBar: trainer.Bool(false), DefaultRootDir: t.TempDir(), HandleSignals: trainer.Bool(false)}); err != nil {
			t.Fatal(err)
		}
	}
	fitRanks(t, trs, func() module.Module { return &linreg{} })
	want := []string{filepath.Join(dir, "epoch=0-step=1-v1.ckpt"), filepath.Join(dir, "epoch=1-step=2.ckpt")}
	for r, mc := range mcs {
		var got []string
		for p := range mc.BestK() {
			got = append(got, p)
		}
		slices.Sort(got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d keeps %v, want %v", r, got, want)
		}
	}
	for _, p := range want {
		if _, err := trainer.VerifyCheckpoint(p); err != nil {
			t.Errorf("%s: %v", filepath.Base(p), err)
		}
	}
	if b, err := os.ReadFile(earlier); err != nil || string(b) != "an earlier run's checkpoint" {
		t.Errorf("the earlier run's checkpoint: %q, %v", b, err)
	}
}

// As Lightning's, a NaN score is kept while the top k has room, ranked
// worst (+Inf for "min", -Inf for "max"), and never displaces a number.
func TestModelCheckpointNaNIsNeverBetter(t *testing.T) {
	for _, mode := range []string{"min", "max"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, Monitor: "score", Mode: mode, SaveTopK: 2, Filename: "{epoch}"})
			if err != nil {
				t.Fatal(err)
			}
			sc := &script{name: "score", values: []float64{math.NaN(), 0.5, math.NaN(), 0.7}}
			if _, err := fit(t, trainer.Config{MaxEpochs: 4, LimitTrainBatches: 2, Callbacks: []trainer.Callback{sc, mc}}, true); err != nil {
				t.Fatal(err)
			}
			want := map[string]float64{filepath.Join(dir, "epoch=1.ckpt"): 0.5, filepath.Join(dir, "epoch=3.ckpt"): 0.7}
			if got := mc.BestK(); !reflect.DeepEqual(got, want) {
				t.Errorf("kept %v, want %v", got, want)
			}
			if got := files(t, dir); !reflect.DeepEqual(got, []string{"epoch=1.ckpt", "epoch=3.ckpt"}) {
				t.Errorf("files %v", got)
			}
		})
	}
}

// Patience counts validation checks, not epochs, as Lightning's: with
// validation every 2 epochs the third check (epoch 5) stops, and with two
// validations an epoch the third (step 6 of 4-batch epochs).
func TestEarlyStoppingPatienceCountsValidations(t *testing.T) {
	for _, c := range []struct {
		name           string
		cfg            trainer.Config
		epochs, step   int // epochs completed (Stats.Epochs), steps taken
		stoppedAtEpoch int
	}{
		{"every 2 epochs", trainer.Config{CheckValEveryNEpoch: 2}, 6, 24, 5},
		{"twice an epoch", trainer.Config{ValCheckInterval: 2}, 1, 6, 1}, // epoch 1 stopped half-way
	} {
		t.Run(c.name, func(t *testing.T) {
			es, err := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "score", Patience: 2})
			if err != nil {
				t.Fatal(err)
			}
			c.cfg.MaxEpochs, c.cfg.LimitTrainBatches = 20, 4
			c.cfg.Callbacks = []trainer.Callback{&script{name: "score", values: []float64{1, 2, 2}}, es}
			tr, err := fit(t, c.cfg, true)
			if err != nil {
				t.Fatal(err)
			}
			if st := tr.Stats(); st.Epochs != c.epochs || st.GlobalStep != c.step || es.StoppedEpoch() != c.stoppedAtEpoch {
				t.Errorf("%d epochs, step %d, stopped in epoch %d; want %d, %d and %d", st.Epochs, st.GlobalStep, es.StoppedEpoch(), c.epochs, c.step, c.stoppedAtEpoch)
			}
		})
	}
}

// Lightning ranks by the epoch and global step too, so that
// monitor="step", mode="max", save_top_k=k keeps the newest k (its
// documentation's "last-K checkpoints"). Before, Monitor "step" was a
// metric never logged: the Fit failed at its first checkpoint, and the
// newest k could not be kept at all.
func TestModelCheckpointMonitorStepKeepsTheNewestK(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   callbacks.ModelCheckpointConfig
		files []string
		best  string
		score float64
	}{
		{"step, at epoch ends", callbacks.ModelCheckpointConfig{Monitor: "step", Mode: "max", SaveTopK: 2},
			[]string{"epoch=2-step=6.ckpt", "epoch=3-step=8.ckpt"}, "epoch=3-step=8.ckpt", 8},
		{"epoch, at epoch ends", callbacks.ModelCheckpointConfig{Monitor: "epoch", Mode: "max", SaveTopK: 3, Filename: "{epoch}"},
			[]string{"epoch=1.ckpt", "epoch=2.ckpt", "epoch=3.ckpt"}, "epoch=3.ckpt", 3},
		{"step, every 3 steps", callbacks.ModelCheckpointConfig{Monitor: "step", Mode: "max", SaveTopK: 2, EveryNTrainSteps: 3, Filename: "{step}"},
			[]string{"step=3.ckpt", "step=6.ckpt"}, "step=6.ckpt", 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Dirpath = t.TempDir()
			mc, err := callbacks.NewModelCheckpoint(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fit(t, trainer.Config{MaxEpochs: 4, LimitTrainBatches: 2, Callbacks: []trainer.Callback{mc}}, true); err != nil {
				t.Fatal(err)
			}
			if got := files(t, c.cfg.Dirpath); !reflect.DeepEqual(got, c.files) {
				t.Errorf("files %v, want %v", got, c.files)
			}
			if got := filepath.Base(mc.BestModelPath()); got != c.best || mc.BestModelScore() != c.score {
				t.Errorf("best %s (%v), want %s (%v)", got, mc.BestModelScore(), c.best, c.score)
			}
		})
	}
	_, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{SaveTopK: 3})
	if err == nil || !strings.Contains(err.Error(), `ModelCheckpoint SaveTopK is 3 but Monitor is empty: ranking needs a metric; set Monitor ("step" with Mode "max" keeps the newest 3), or use 1 (the newest) or -1 (all)`) {
		t.Errorf("SaveTopK 3 without Monitor: err = %v", err)
	}
}

// KthBest is Lightning's kth_best_model_path and kth_value, restored with
// the ranking when a run resumes: a score worse than it is not kept.
func TestModelCheckpointKthBestAfterResume(t *testing.T) {
	dir := t.TempDir()
	newMC := func() *callbacks.ModelCheckpoint {
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, Monitor: "score", SaveTopK: 2, Filename: "{epoch}", SaveLast: true})
		if err != nil {
			t.Fatal(err)
		}
		return mc
	}
	mc := newMC()
	if p, v := mc.KthBest(); p != "" || !math.IsNaN(v) {
		t.Errorf("before any checkpoint: KthBest %q, %v; want \"\" and NaN", p, v)
	}
	sc := &script{name: "score", values: []float64{5, 3, 4}}
	if _, err := fit(t, trainer.Config{MaxEpochs: 3, LimitTrainBatches: 2, Callbacks: []trainer.Callback{sc, mc}}, true); err != nil {
		t.Fatal(err)
	}
	e2 := filepath.Join(dir, "epoch=2.ckpt")
	if p, v := mc.KthBest(); p != e2 || v != 4 {
		t.Errorf("KthBest %s, %v; want epoch=2.ckpt, 4", p, v)
	}
	mc2 := newMC()
	sc = &script{name: "score", values: []float64{4.5}}
	if _, err := fit(t, trainer.Config{MaxEpochs: 4, LimitTrainBatches: 2, Callbacks: []trainer.Callback{sc, mc2}}, true, trainer.FromCheckpoint(filepath.Join(dir, "last.ckpt"))); err != nil {
		t.Fatal(err)
	}
	if p, v := mc2.KthBest(); p != e2 || v != 4 {
		t.Errorf("resumed: KthBest %s, %v; want epoch=2.ckpt, 4", p, v)
	}
	if got, want := files(t, dir), []string{"epoch=1.ckpt", "epoch=2.ckpt", "last.ckpt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
}

// TrainTimeInterval is Lightning's train_time_interval: a checkpoint at
// the first batch end after that much wall time since training started or
// the last such save; inside an accumulation window, at the window's end.
// One second passes per training batch here.
func TestModelCheckpointTrainTimeInterval(t *testing.T) {
	for _, c := range []struct {
		name  string
		accum int
		files []string
	}{
		{"every 3 batches", 1, []string{"step=3.ckpt", "step=6.ckpt"}},
		// Due after batch 3, inside the second window: saved at its end
		// (batch 4, step 2), then due again after batch 7, saved at 8.
		{"accumulating 2 batches", 2, []string{"step=2.ckpt", "step=4.ckpt"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			dir := t.TempDir()
			mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, Filename: "{step}", SaveTopK: -1,
				TrainTimeInterval: 3 * time.Second, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fit(t, trainer.Config{MaxEpochs: 2, LimitTrainBatches: 4, AccumulateGradBatches: c.accum, Callbacks: []trainer.Callback{tick{&now}, mc}}, false); err != nil {
				t.Fatal(err)
			}
			if got := files(t, dir); !reflect.DeepEqual(got, c.files) {
				t.Errorf("files %v, want %v", got, c.files)
			}
		})
	}
	_, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{TrainTimeInterval: time.Minute, EveryNTrainSteps: 100})
	if err == nil || !strings.Contains(err.Error(), "ModelCheckpoint EveryNTrainSteps (100) and TrainTimeInterval (1m0s) are both set: choose one, as in Lightning") {
		t.Errorf("TrainTimeInterval beside EveryNTrainSteps: err = %v", err)
	}
	_, err = callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{TrainTimeInterval: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "ModelCheckpoint TrainTimeInterval is -1s: use 0 (off) or a wall time between checkpoints, such as 30*time.Minute") {
		t.Errorf("negative TrainTimeInterval: err = %v", err)
	}
}
