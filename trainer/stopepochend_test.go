package trainer_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// epochEndRec stops a Fit from OnTrainBatchEnd at batch stopAt of epoch 0
// and records what the rest of the run does: the hooks after the stop, the
// losses of the batches that ran, and each checkpoint written (a checkpoint
// holds every Stateful callback's StateDict, asked on rank 0 once per file).
type epochEndRec struct {
	stopAt int
	losses []float64
	after  []string // the hooks run from the stop on
	saves  int
}

func (*epochEndRec) Name() string { return "epochEndRec" }
func (r *epochEndRec) OnTrainBatchEnd(_ context.Context, s *trainer.State) error {
	r.losses = append(r.losses, s.Loss)
	if s.Epoch == 0 && s.BatchIdx == r.stopAt {
		r.after = append(r.after, fmt.Sprintf("OnTrainBatchEnd %d", s.BatchIdx))
		return trainer.Stop("batch %d", s.BatchIdx)
	}
	return nil
}
func (r *epochEndRec) OnValidationEnd(_ context.Context, s *trainer.State) error {
	if len(r.after) > 0 {
		r.after = append(r.after, "OnValidationEnd")
	}
	return nil
}
func (r *epochEndRec) OnTrainEpochEnd(_ context.Context, s *trainer.State) error {
	r.after = append(r.after, fmt.Sprintf("OnTrainEpochEnd %d", s.Epoch))
	return nil
}
func (r *epochEndRec) OnTrainEnd(context.Context, *trainer.State) error {
	r.after = append(r.after, "OnTrainEnd")
	return nil
}
func (r *epochEndRec) StateDict() ([]byte, error) { r.saves++; return []byte("{}"), nil }
func (r *epochEndRec) LoadStateDict([]byte) error { return nil }

// epochRows is a Logger keeping the train_loss_epoch rows.
type epochRows struct {
	mu   sync.Mutex
	rows [][2]float64 // step, value
}

func (*epochRows) Name() string                        { return "epochRows" }
func (*epochRows) LogHyperparams(map[string]any) error { return nil }
func (*epochRows) Finalize(string) error               { return nil }
func (l *epochRows) LogMetrics(step int, m map[string]float64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v, ok := m["train_loss_epoch"]; ok {
		l.rows = append(l.rows, [2]float64{float64(step), v})
	}
	return nil
}

// TestStopMidEpochRunsTheEpochEnd: a Stop from OnTrainBatchEnd in the
// middle of an epoch ends the epoch there and runs its end, as Lightning's
// training epoch loop does once should_stop is set: the validation (the
// epoch is one that validates), OnTrainEpochEnd once, with the mean loss
// of the batches that ran logged as train_loss_epoch, the default
// checkpoints once each (the epoch's and last.ckpt, which resumes at the
// next batch), then OnTrainEnd; under every strategy, every rank alike.
// Inside an
// accumulation window the epoch's end runs without the validation and
// without a checkpoint.
func TestStopMidEpochRunsTheEpochEnd(t *testing.T) {
	train := regression(t, 64, 0.1, 1) // batches of 4: 16 an epoch, 8 per ddp rank
	val := regression(t, 8, 0.1, 2)
	type run struct {
		name  string
		sc    int // in hookStrategies
		accum int
	}
	var runs []run
	for sc, s := range hookStrategies {
		runs = append(runs, run{s.name, sc, 1})
	}
	runs = append(runs, run{"inside an accumulation window", 0, 2})
	for _, c := range runs {
		t.Run(c.name, func(t *testing.T) {
			ranks := hookStrategies[c.sc].ranks
			const stopAt = 4 // the fifth batch; with accum 2, a window's first
			root := t.TempDir()
			recs := make([]*epochEndRec, ranks)
			logs := make([]*epochRows, ranks)
			cfg := func(r int) trainer.Config {
				recs[r], logs[r] = &epochEndRec{stopAt: stopAt}, &epochRows{}
				return quiet(trainer.Config{MaxEpochs: 2, Seed: 1, AccumulateGradBatches: c.accum, DisableSanityCheck: true,
					DefaultRootDir: root, Loggers: []trainer.Logger{logs[r]}, Callbacks: []trainer.Callback{recs[r]}})
			}
			fit := func(_ int, tr *trainer.Trainer) error {
				return tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, train, 4, false, false), loader(t, val, 4, false, false))
			}
			errs := onStrategy(t, c.sc, cfg, fit)
			window := c.accum > 1
			want := []string{fmt.Sprintf("OnTrainBatchEnd %d", stopAt), "OnValidationEnd", "OnTrainEpochEnd 0", "OnTrainEnd"}
			wantSaves := 2 // epoch=0-step=S.ckpt and last.ckpt
			if window {
				want = slices.Delete(want, 1, 2)
				wantSaves = 0
			}
			for r, rec := range recs {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				if !slices.Equal(rec.after, want) {
					t.Errorf("rank %d: from the stop on, %v; want %v", r, rec.after, want)
				}
				saves := wantSaves
				if r > 0 {
					saves = 0 // rank 0 writes
				}
				if hookStrategies[c.sc].fitOnly {
					saves++ // a ddp_spawn worker hands its state to the launching process
				}
				if rec.saves != saves {
					t.Errorf("rank %d: StateDict asked %d times after the stop; want %d", r, rec.saves, saves)
				}
			}
			// Rank 0 logs: its losses' mean, weighted alike (batches of 4).
			var sum float64
			for _, l := range recs[0].losses {
				sum += l
			}
			mean := sum / float64(len(recs[0].losses))
			if len(recs[0].losses) != stopAt+1 {
				t.Fatalf("rank 0 ran %d batches; want %d", len(recs[0].losses), stopAt+1)
			}
			rows := logs[0].rows
			if len(rows) != 1 || math.Abs(rows[0][1]-mean) > 1e-6*math.Abs(mean) {
				t.Fatalf("train_loss_epoch rows (step, value) %v; want one, the mean %g of the %d batches that ran", rows, mean, stopAt+1)
			}
			if window {
				return
			}
			info, err := trainer.ReadCheckpointInfo(filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt"))
			if err != nil {
				t.Fatal(err)
			}
			if info.Epoch != 0 || info.BatchIdx != stopAt+1 || int(rows[0][0]) != info.GlobalStep {
				t.Errorf("last.ckpt at epoch %d batch %d step %d; want epoch 0, batch %d (the next), step %d", info.Epoch, info.BatchIdx, info.GlobalStep, stopAt+1, int(rows[0][0]))
			}
		})
	}
}

// stopAtValidation stops a Fit from OnValidationEnd at global step n.
type stopAtValidation struct{ n int }

func (*stopAtValidation) Name() string { return "stopAtValidation" }
func (s *stopAtValidation) OnValidationEnd(_ context.Context, st *trainer.State) error {
	if !st.SanityChecking && st.GlobalStep == s.n {
		return trainer.Stop("validated at step %d", s.n)
	}
	return nil
}

// TestStopFromAMidEpochValidationResumesMidEpoch: a Stop from a validation
// in the middle of an epoch (ValCheckInterval) ends the epoch there as a
// batch end's does: its checkpoints resume at the next batch, and a
// resumed run trains the rest of the epoch, to the weights of a run never
// stopped (not skipping to the next epoch).
func TestStopFromAMidEpochValidationResumesMidEpoch(t *testing.T) {
	train, val := regression(t, 64, 0.01, 1), regression(t, 16, 0.01, 2)
	fit := func(root string, cbs []trainer.Callback, opts ...trainer.FitOption) *trainer.Trainer {
		t.Helper()
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, Seed: 1, ValCheckInterval: 2, DefaultRootDir: root, Callbacks: cbs}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, train, 16, true, false), loader(t, val, 16, false, false), opts...); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	// 4 batches an epoch, validating after the second: step 6 is epoch 1's.
	root := t.TempDir()
	stopped := fit(root, []trainer.Callback{&stopAtValidation{6}})
	if s := stopped.Stats(); s.GlobalStep != 6 || s.Epochs != 1 || s.StoppedEarly == "" {
		t.Fatalf("stats %+v: want a stop at step 6, in epoch 1 (one epoch done)", s)
	}
	last := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
	info, err := trainer.ReadCheckpointInfo(last)
	if err != nil {
		t.Fatal(err)
	}
	if info.Epoch != 1 || info.BatchIdx != 2 || info.GlobalStep != 6 {
		t.Errorf("last.ckpt at epoch %d, batch %d, step %d; want epoch 1, batch 2 (the next), step 6", info.Epoch, info.BatchIdx, info.GlobalStep)
	}
	resumed := fit(root, nil, trainer.FromCheckpoint(last))
	whole := fit(t.TempDir(), nil)
	if got, want := resumed.Store().SHA256(), whole.Store().SHA256(); got != want || resumed.Stats().GlobalStep != 8 {
		t.Errorf("resumed from the stop's last.ckpt: weights %s at step %d, want %s at step 8 (a run never stopped)", got, resumed.Stats().GlobalStep, want)
	}
}

// TestStopMidEpochLeavesThePerEpochScheduler: the end of an epoch a Stop
// cut short does not step a per-epoch scheduler (Lightning's steps after
// an epoch's last batch only): resumed from the stop's last.ckpt, a run
// with a StepLR halving the rate each epoch reaches the weights of a run
// never stopped.
func TestStopMidEpochLeavesThePerEpochScheduler(t *testing.T) {
	ds := regression(t, 64, 0.01, 1)
	fit := func(root string, cbs []trainer.Callback, opts ...trainer.FitOption) *trainer.Trainer {
		t.Helper()
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 3, Seed: 1, DefaultRootDir: root, Callbacks: cbs}))
		if err != nil {
			t.Fatal(err)
		}
		m := &everyEpochHalved{linreg{in: 4, lr: 0.05, sgd: true}}
		if err := tr.Fit(context.Background(), m, loader(t, ds, 16, true, false), nil, opts...); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	root := t.TempDir()
	fit(root, []trainer.Callback{&stopAtStep{6}}) // the second batch of epoch 1
	last := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
	resumed := fit(root, nil, trainer.FromCheckpoint(last))
	whole := fit(t.TempDir(), nil)
	if got, want := resumed.Store().SHA256(), whole.Store().SHA256(); got != want {
		t.Errorf("resumed from the stop's last.ckpt: weights %s, want %s (a run never stopped): the scheduler stepped at the stopped epoch's end", got, want)
	}
}
