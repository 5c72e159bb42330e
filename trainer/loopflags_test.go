package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// loopTrace records, as Lightning's tests of its loop flags do, where the
// training batches, validations and epoch ends fall, and asks to stop
// once (as EarlyStopping does) at a global step or at an epoch's end.
type loopTrace struct {
	events          []string
	stopAtStep      int // at this global step's batch end; 0: never
	stopAtEpochEnd  int // at the end of epoch stopAtEpochEnd-1; 0: never
	stopped         bool
	cancel          context.CancelFunc
	cancelAtEpochOf int // cancel at the end of this epoch (with cancel)
}

func (*loopTrace) Name() string { return "loopTrace" }

func (c *loopTrace) stop(s *trainer.State) error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	return trainer.Stop("loopTrace at epoch %d, step %d", s.Epoch, s.GlobalStep)
}

func (c *loopTrace) OnTrainBatchEnd(_ context.Context, s *trainer.State) error {
	c.events = append(c.events, fmt.Sprintf("b%d.%d", s.Epoch, s.BatchIdx))
	if c.stopAtStep > 0 && s.GlobalStep == c.stopAtStep {
		return c.stop(s)
	}
	return nil
}

func (c *loopTrace) OnValidationEnd(_ context.Context, s *trainer.State) error {
	if !s.SanityChecking {
		c.events = append(c.events, "val")
	}
	return nil
}

func (c *loopTrace) OnTrainEpochEnd(_ context.Context, s *trainer.State) error {
	c.events = append(c.events, fmt.Sprintf("end%d/s%d", s.Epoch, s.GlobalStep))
	if c.cancel != nil && s.Epoch == c.cancelAtEpochOf {
		c.cancel()
	}
	if c.stopAtEpochEnd > 0 && s.Epoch == c.stopAtEpochEnd-1 {
		return c.stop(s)
	}
	return nil
}

// MinEpochs and MinSteps hold off a Stop (EarlyStopping's, a Timer's)
// until they are met, as Lightning's min_epochs and min_steps hold off
// should_stop: training goes on and stops at the first batch end or epoch
// end where both are, validating there as at any Stop. Before, the Stop
// ended training at once and there was no way to ask for a minimum.
func TestMinEpochsAndMinStepsHoldOffAStop(t *testing.T) {
	ds := regression(t, 32, 0.01, 5) // 4 batches of 8
	for _, c := range []struct {
		name  string
		cfg   trainer.Config
		trace loopTrace
		want  string
		steps int
	}{
		{"stop at epoch 0's end, MinEpochs 3", trainer.Config{MaxEpochs: 5, MinEpochs: 3}, loopTrace{stopAtEpochEnd: 1},
			"b0.0 b0.1 b0.2 b0.3 val end0/s4 b1.0 b1.1 b1.2 b1.3 val end1/s8 b2.0 b2.1 b2.2 b2.3 val end2/s12", 12},
		// Met at a batch end: the epoch ends there, with its validation.
		{"stop at step 2, MinSteps 6", trainer.Config{MaxEpochs: 5, MinSteps: 6}, loopTrace{stopAtStep: 2},
			"b0.0 b0.1 b0.2 b0.3 val end0/s4 b1.0 b1.1 val end1/s6", 6},
		// Steps are optimizer steps: with 2 batches each, step 3 is batch 5.
		{"stop at step 1, MinSteps 3, accumulating 2", trainer.Config{MaxEpochs: 5, MinSteps: 3, AccumulateGradBatches: 2}, loopTrace{stopAtStep: 1},
			"b0.0 b0.1 b0.2 b0.3 val end0/s2 b1.0 b1.1 val end1/s3", 3},
		{"both: MinEpochs 2, MinSteps 9", trainer.Config{MaxEpochs: 5, MinEpochs: 2, MinSteps: 9}, loopTrace{stopAtStep: 1},
			"b0.0 b0.1 b0.2 b0.3 val end0/s4 b1.0 b1.1 b1.2 b1.3 val end1/s8 b2.0 val end2/s9", 9},
		{"met already", trainer.Config{MaxEpochs: 5, MinEpochs: 1}, loopTrace{stopAtStep: 6},
			"b0.0 b0.1 b0.2 b0.3 val end0/s4 b1.0 b1.1 val end1/s6", 6},
		// MaxEpochs ends training even while a Stop is held.
		{"MaxEpochs first", trainer.Config{MaxEpochs: 2, MinSteps: 20}, loopTrace{stopAtStep: 1},
			"b0.0 b0.1 b0.2 b0.3 val end0/s4 b1.0 b1.1 b1.2 b1.3 val end1/s8", 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Seed, cfg.Callbacks = 1, []trainer.Callback{&c.trace}
			tr, err := trainer.New(quiet(cfg))
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Fit(context.Background(), newEvalReg(), loader(t, ds, 8, false, false), loader(t, ds, 8, false, false)); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(c.trace.events, " "); got != c.want {
				t.Errorf("trace\n%s\nwant\n%s", got, c.want)
			}
			s := tr.Stats()
			if s.GlobalStep != c.steps {
				t.Errorf("GlobalStep %d, want %d", s.GlobalStep, c.steps)
			}
			if stopped := s.StoppedEarly != ""; stopped != (c.name != "MaxEpochs first") {
				t.Errorf("StoppedEarly %q", s.StoppedEarly)
			}
		})
	}
}

// A cancel is never held: MinEpochs holds a hook's Stop only.
func TestMinEpochsDoesNotHoldACancel(t *testing.T) {
	ds := regression(t, 32, 0.01, 5)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trace := &loopTrace{cancel: cancel, cancelAtEpochOf: 0}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 5, MinEpochs: 4, Seed: 1, DefaultRootDir: t.TempDir(), Callbacks: []trainer.Callback{trace}}))
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(ctx, newEvalReg(), loader(t, ds, 8, false, false), nil)
	var ie *trainer.InterruptedError
	if !errors.As(err, &ie) || tr.Stats().GlobalStep != 4 {
		t.Errorf("Fit: %v after %d steps; want an *InterruptedError after epoch 0's 4", err, tr.Stats().GlobalStep)
	}
}

// MaxEpochs -1 is Lightning's max_epochs=-1: no epoch limit, training ends
// at MaxSteps or a Stop. It was refused, and the fix the error offered, 0,
// means 1000 epochs without MaxSteps.
func TestMaxEpochsMinusOneHasNoEpochLimit(t *testing.T) {
	ds := regression(t, 8, 0.01, 5) // 1 batch an epoch
	trace := &loopTrace{stopAtEpochEnd: 3}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: -1, Seed: 1, Callbacks: []trainer.Callback{trace}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), newEvalReg(), loader(t, ds, 8, false, false), nil); err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.Epochs != 3 || s.StoppedEarly == "" {
		t.Errorf("%d epochs, StoppedEarly %q; want 3, stopped by the callback", s.Epochs, s.StoppedEarly)
	}
}

func TestLoopLimitsRefuseWhatTheyCannotMean(t *testing.T) {
	for _, c := range []struct {
		cfg  trainer.Config
		want string
	}{
		{trainer.Config{MaxEpochs: -2}, "MaxEpochs is -2: use a positive number, 0 (the default: 1000 epochs, or no limit beside MaxSteps) or -1 (no limit)"},
		{trainer.Config{MinEpochs: -1}, "MinEpochs is -1"},
		{trainer.Config{MinSteps: -1}, "MinSteps is -1"},
		{trainer.Config{MaxEpochs: 2, MinEpochs: 3}, "MinEpochs is 3 and MaxEpochs 2"},
		{trainer.Config{MaxSteps: 2, MinSteps: 3}, "MinSteps is 3 and MaxSteps 2"},
	} {
		_, err := trainer.New(quiet(c.cfg))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.cfg, err, c.want)
		}
	}
}

// Every rank holds the Stop one rank asked for and releases it at the
// same batch: none trains on alone or waits in a collective.
func TestMinStepsHoldsAStopOnEveryRank(t *testing.T) {
	ds := regression(t, 32, 0.01, 5) // 2 batches of 8 per rank and epoch
	traces := []*loopTrace{{stopAtStep: 1}, {}}
	trs, errs := onRanks(t, 2, ddpRank(t), func(r int) trainer.Config {
		return quiet(trainer.Config{MaxEpochs: 5, MinSteps: 3, Seed: 1, Callbacks: []trainer.Callback{traces[r]}})
	}, func(r int, tr *trainer.Trainer) error {
		return tr.Fit(context.Background(), newEvalReg(), loader(t, ds, 8, false, false), nil)
	})
	for r, tr := range trs {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if s := tr.Stats(); s.GlobalStep != 3 || s.StoppedEarly == "" {
			t.Errorf("rank %d: %d steps, StoppedEarly %q; want 3 steps, stopped", r, s.GlobalStep, s.StoppedEarly)
		}
		if got, want := strings.Join(traces[r].events, " "), "b0.0 b0.1 end0/s2 b1.0 end1/s3"; got != want {
			t.Errorf("rank %d: trace %s, want %s", r, got, want)
		}
	}
}

// The step training stops at is logged whatever LogEveryNSteps, as
// Lightning logs a step's metrics once should_stop is set: metrics.csv
// used to end at the last multiple of the interval, without the loss the
// run stopped with.
func TestTheStepAStopEndsAtIsLogged(t *testing.T) {
	ds := regression(t, 64, 0.01, 5) // 8 batches of 8
	for _, c := range []struct {
		stop, accum int
		want        string
	}{
		{stop: 5, accum: 1, want: "2 4 5"},
		{stop: 4, accum: 1, want: "2 4"}, // logged once
		{stop: 3, accum: 2, want: "2 3"}, // optimizer steps
	} {
		t.Run(fmt.Sprintf("stop at %d, accumulating %d", c.stop, c.accum), func(t *testing.T) {
			root := t.TempDir()
			tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, LogEveryNSteps: 2, AccumulateGradBatches: c.accum, Seed: 1, DefaultRootDir: root,
				DisableCheckpointing: true, Callbacks: []trainer.Callback{&stopAtGlobalStep{step: c.stop}}}))
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Fit(context.Background(), newEvalReg(), loader(t, ds, 8, false, false), nil); err != nil {
				t.Fatal(err)
			}
			var steps []string
			for _, r := range rowsWith(csvRows(t, filepath.Join(root, "lightning_logs", "version_0", "metrics.csv")), "train_loss_step") {
				steps = append(steps, r["step"])
			}
			if got := strings.Join(steps, " "); got != c.want {
				t.Errorf("train_loss_step rows at steps %s, want %s", got, c.want)
			}
		})
	}
}

// LRFind's search is its own short run: the trainer's MinEpochs and
// MinSteps, meant for training, neither refuse it (MinSteps above its
// steps) nor hold off the stop at a diverging loss.
func TestLRFindIgnoresMinEpochsAndMinSteps(t *testing.T) {
	ds := regression(t, 64, 0.01, 1) // 1 batch an epoch
	var got []trainer.LRFindResult
	for _, cfg := range []trainer.Config{{MaxEpochs: 100}, {MaxEpochs: 100, MinEpochs: 99, MinSteps: 500}} {
		cfg.Seed = 3
		tr, err := trainer.New(quiet(cfg))
		if err != nil {
			t.Fatal(err)
		}
		res, err := tr.LRFind(context.Background(), &linreg{in: 4, lr: 0.01, sgd: true}, loader(t, ds, 64, false, false), trainer.LRFindConfig{MinLR: 1e-3, MaxLR: 1e6})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res)
	}
	if a, b := got[0], got[1]; b.Stopped == "" || len(b.LRs) != len(a.LRs) || b.Stopped != a.Stopped {
		t.Errorf("with MinEpochs and MinSteps: %d steps, stopped %q; without: %d steps, stopped %q", len(b.LRs), b.Stopped, len(a.LRs), a.Stopped)
	}
}

// batchCounts records State.NumTrainBatches where Lightning's hooks see
// num_training_batches: on_train_start and on_train_epoch_start.
type batchCounts struct{ seen []string }

func (*batchCounts) Name() string { return "batchCounts" }
func (c *batchCounts) OnTrainStart(_ context.Context, s *trainer.State) error {
	c.seen = append(c.seen, fmt.Sprintf("start:%d", s.NumTrainBatches))
	return nil
}
func (c *batchCounts) OnTrainEpochStart(_ context.Context, s *trainer.State) error {
	c.seen = append(c.seen, fmt.Sprintf("epoch%d:%d", s.Epoch, s.NumTrainBatches))
	return nil
}

// OnTrainStart and OnTrainEpochStart see the epoch's number of training
// batches (within LimitTrainBatches). They saw 0 in the first epoch (and
// OnTrainEpochStart the previous epoch's count later): it was counted
// after the hook.
func TestTrainStartHooksSeeTheEpochsBatchCount(t *testing.T) {
	ds := regression(t, 64, 0.01, 5) // 8 batches of 8
	for _, c := range []struct {
		limit int
		want  string
	}{{0, "start:8 epoch0:8 epoch1:8"}, {3, "start:3 epoch0:3 epoch1:3"}} {
		rec := &batchCounts{}
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, LimitTrainBatches: c.limit, Seed: 1, Callbacks: []trainer.Callback{rec}}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), newEvalReg(), loader(t, ds, 8, false, false), nil); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(rec.seen, " "); got != c.want {
			t.Errorf("LimitTrainBatches %d: %s, want %s", c.limit, got, c.want)
		}
	}
}
