package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// edgeRanks runs f on n in-process ddp ranks (inproc collectives whose
// wait for a missing rank ends after 20 s, so that a rank left waiting
// fails with a timeout instead of hanging the test), each with a trainer
// of job's settings writing into root and the callbacks cbs(r).
func edgeRanks(t *testing.T, n int, job resumeJob, root string, cbs func(r int) []trainer.Callback, f func(r int, tr *trainer.Trainer) error) []error {
	t.Helper()
	group, err := inproc.NewGroup(n, inproc.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	trs := make([]*trainer.Trainer, n)
	teardownAtEnd(t, trs, group)
	for r := range n {
		c := quiet(job.cfg)
		c.DefaultRootDir = root
		c.Callbacks = cbs(r)
		c.HandleSignals = trainer.Bool(false)
		if n > 1 {
			d, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r], Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			c.StrategyImpl = d
		}
		if trs[r], err = trainer.New(c); err != nil {
			t.Fatal(err)
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range trs {
		wg.Go(func() { errs[r] = f(r, tr) })
	}
	wg.Wait()
	return errs
}

// stopAfterStep asks every rank to stop at the end of a global step's batch.
type stopAfterStep struct{ step int }

func (stopAfterStep) Name() string { return "stopAfterStep" }
func (s stopAfterStep) OnTrainBatchEnd(_ context.Context, st *trainer.State) error {
	if st.GlobalStep == s.step {
		return trainer.Stop("stop at step %d", s.step)
	}
	return nil
}

// cancelAfter cancels its rank's context once, in the hook named where,
// from global step `from` on (after training was asked to stop there).
type cancelAfter struct {
	where  string
	from   int
	cancel context.CancelFunc
}

func (*cancelAfter) Name() string { return "cancelAfter" }

func (c *cancelAfter) fire(where string, s *trainer.State) {
	if c.cancel != nil && where == c.where && s.GlobalStep >= c.from && !s.SanityChecking {
		c.cancel()
		c.cancel = nil
	}
}

func (c *cancelAfter) OnValidationBatchStart(_ context.Context, s *trainer.State) error {
	c.fire("validation", s)
	return nil
}

func (c *cancelAfter) OnTrainEpochEnd(_ context.Context, s *trainer.State) error {
	c.fire("epoch-end", s)
	return nil
}

func (c *cancelAfter) OnTrainEnd(_ context.Context, s *trainer.State) error {
	c.fire("train-end", s)
	return nil
}

// A cancel that comes after the ranks agreed to stop (a hook's Stop at a
// batch end, MaxSteps reached), while the epoch's end runs its validation
// and checkpoints or in OnTrainEnd, stops the Fit as an interrupt: every
// rank returns the *InterruptedError with the interrupt checkpoint of the
// step training ended at. Before, it was dropped after a Stop and in
// OnTrainEnd: Fit returned nil, and a program went on after it (a command
// line to its test, exiting 0 after the user's Ctrl-C).
func TestCancelAfterTheRanksAgreedToStop(t *testing.T) {
	for _, n := range []int{1, 2} {
		for _, tc := range []struct {
			name, where string
			maxSteps    int
		}{
			{"stop/validation", "validation", 0},
			{"stop/epoch-end", "epoch-end", 0},
			{"stop/train-end", "train-end", 0},
			{"max-steps/epoch-end", "epoch-end", 5},
			{"max-steps/train-end", "train-end", 5},
		} {
			t.Run(fmt.Sprintf("%d ranks/%s", n, tc.name), func(t *testing.T) {
				job := newResumeJob(t, 1, 0)
				job.cfg.MaxSteps = tc.maxSteps
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				errs := edgeRanks(t, n, job, t.TempDir(), func(r int) []trainer.Callback {
					var cbs []trainer.Callback
					if tc.maxSteps == 0 {
						cbs = append(cbs, stopAfterStep{5})
					}
					if r == 0 {
						cbs = append(cbs, &cancelAfter{where: tc.where, from: 5, cancel: cancel})
					}
					return cbs
				}, func(r int, tr *trainer.Trainer) error {
					c := context.Background()
					if r == 0 {
						c = ctx
					}
					return tr.Fit(c, job.mod(), job.train, job.val)
				})
				for r, err := range errs {
					var ie *trainer.InterruptedError
					if !errors.As(err, &ie) {
						t.Fatalf("rank %d: Fit returned %v after the cancel; want an *InterruptedError", r, err)
					}
					if ie.GlobalStep != 5 || ie.Checkpoint == "" {
						t.Errorf("rank %d: stopped at step %d with checkpoint %q; want step 5 and a checkpoint", r, ie.GlobalStep, ie.Checkpoint)
					}
					if _, err := os.Stat(ie.Checkpoint); err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
					if r == 0 && !errors.Is(err, context.Canceled) {
						t.Errorf("rank 0: %v does not wrap context.Canceled", err)
					}
				}
			})
		}
	}
}

// endHook blocks on its context, or fails, in one end hook of a Fit on
// one rank: as a logger flushing to a slow disk does, or a user's hook.
type endHook struct {
	where  string // OnTrainEnd, OnFitEnd or Teardown
	fail   bool   // return an error instead of cancelling and waiting
	cancel context.CancelFunc
}

func (*endHook) Name() string { return "endHook" }

func (h *endHook) act(ctx context.Context, where string) error {
	if where != h.where {
		return nil
	}
	if h.fail {
		return fmt.Errorf("%s failed here", where)
	}
	h.cancel()
	select {
	case <-ctx.Done():
		return fmt.Errorf("gave up waiting: %w", ctx.Err())
	case <-time.After(30 * time.Second):
		// Bounds the test when the context never ends (the defect).
		return errors.New("the hook's context was never cancelled")
	}
}

func (h *endHook) OnTrainEnd(ctx context.Context, _ *trainer.State) error {
	return h.act(ctx, "OnTrainEnd")
}
func (h *endHook) OnFitEnd(ctx context.Context, _ *trainer.State) error {
	return h.act(ctx, "OnFitEnd")
}
func (h *endHook) Teardown(ctx context.Context, _ *trainer.State, stage string) error {
	return h.act(ctx, "Teardown")
}

// The hooks that end a Fit (OnTrainEnd, OnFitEnd, Teardown) see the
// caller's cancel on every strategy, and when one fails, or stops on the
// cancel, on one rank only, every rank's Fit fails naming that rank (in
// OnTrainEnd, a cancel is an interrupt on every rank).
// Before, under ddp they got a context that was never cancelled (a hook
// waiting on it hung until its own timeout), and the other rank's Fit
// returned nil, or failed at its next collective's timeout.
func TestEndHooksOnOneRank(t *testing.T) {
	for _, tc := range []struct {
		where string
		fail  bool
		want0 string // rank 0's error
		want1 string // rank 1's error
	}{
		// After training, OnTrainEnd giving up on the cancel stops the
		// Fit as an interrupt, the checkpoint saved.
		{"OnTrainEnd", false, "training interrupted (context canceled) at global step 8; checkpoint saved", "training interrupted (another rank's context was cancelled) at global step 8; checkpoint saved"},
		{"OnFitEnd", false, "callbacks/endHook.OnFitEnd: gave up waiting: context canceled", "Fit's end hooks (OnFitEnd, Teardown) stopped on rank 0, whose context was cancelled"},
		{"Teardown", false, "callbacks/endHook.Teardown: gave up waiting: context canceled", "Fit's end hooks (OnFitEnd, Teardown) stopped on rank 0, whose context was cancelled"},
		{"OnFitEnd", true, "rank 0 of 2: callbacks/endHook.OnFitEnd: OnFitEnd failed here", "Fit's end hooks (OnFitEnd, Teardown) failed on rank 0"},
		{"OnTrainEnd", true, "rank 0 of 2: callbacks/endHook.OnTrainEnd: OnTrainEnd failed here", "OnTrainEnd failed on rank 0"},
	} {
		name := tc.where + "/cancel"
		if tc.fail {
			name = tc.where + "/error"
		}
		t.Run(name, func(t *testing.T) {
			job := newResumeJob(t, 1, 0)
			job.cfg.MaxEpochs = 1
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errs := edgeRanks(t, 2, job, t.TempDir(), func(r int) []trainer.Callback {
				if r == 0 {
					return []trainer.Callback{&endHook{where: tc.where, fail: tc.fail, cancel: cancel}}
				}
				return nil
			}, func(r int, tr *trainer.Trainer) error {
				c := context.Background()
				if r == 0 {
					c = ctx
				}
				return tr.Fit(c, job.mod(), job.train, job.val)
			})
			for r, want := range []string{tc.want0, tc.want1} {
				if errs[r] == nil || !strings.Contains(errs[r].Error(), want) {
					t.Errorf("rank %d: Fit returned %v; want %q", r, errs[r], want)
				}
			}
		})
	}
}

// evalEdge fails, or cancels its rank's context, at batch 1 of an
// evaluation loop.
type evalEdge struct {
	cancel context.CancelFunc // nil: fail
}

func (*evalEdge) Name() string { return "evalEdge" }

func (e *evalEdge) at(s *trainer.State) error {
	if s.BatchIdx != 1 || s.SanityChecking {
		return nil
	}
	if e.cancel == nil {
		return fmt.Errorf("batch %d failed here", s.BatchIdx)
	}
	e.cancel()
	return nil
}

func (e *evalEdge) OnValidationBatchStart(_ context.Context, s *trainer.State) error {
	if s.Stage != "validate" {
		return nil
	}
	return e.at(s)
}
func (e *evalEdge) OnPredictBatchStart(_ context.Context, s *trainer.State) error {
	return e.at(s)
}

// Validate, Predict and PredictEach called on every rank of a ddp job
// (as after Fit) with one rank failing, or cancelled, at its second batch:
// every rank's call returns an error naming that rank, the failing one its
// own error naming its rank, once the others' loops end. Before, the
// failing rank returned alone, and the other waited for it in the
// metrics' reduction or the gathering of predictions until the
// collective's timeout, or (PredictEach, which has no collective)
// returned nil with the job's predictions incomplete.
func TestEvaluationFailingOnOneRank(t *testing.T) {
	calls := map[string]func(ctx context.Context, tr *trainer.Trainer, job resumeJob) error{
		"validate": func(ctx context.Context, tr *trainer.Trainer, job resumeJob) error {
			_, err := tr.Validate(ctx, job.mod(), job.val)
			return err
		},
		"predict": func(ctx context.Context, tr *trainer.Trainer, job resumeJob) error {
			_, err := tr.Predict(ctx, job.mod(), job.val)
			return err
		},
		"PredictEach": func(ctx context.Context, tr *trainer.Trainer, job resumeJob) error {
			return tr.PredictEach(ctx, job.mod(), job.val, func(trainer.PredictBatch) error { return nil })
		},
	}
	for _, call := range []string{"validate", "predict", "PredictEach"} {
		for _, cancelled := range []bool{false, true} {
			loop := map[string]string{"validate": "the validate loop", "predict": "the predict loop", "PredictEach": "the predict loop"}[call]
			name, want1, want0 := call+"/error", loop+" failed on rank 1", "rank 1 of 2: predict batch 1: callbacks/evalEdge.OnPredictBatchStart: batch 1 failed here"
			if call == "validate" {
				want0 = "rank 1 of 2: validate batch 1: callbacks/evalEdge.OnValidationBatchStart: batch 1 failed here"
			}
			if cancelled {
				name, want1, want0 = call+"/cancel", loop+" stopped on rank 1, whose context was cancelled", "context canceled"
			}
			t.Run(name, func(t *testing.T) {
				job := newResumeJob(t, 1, 0)
				job.cfg.MaxEpochs = 1
				job.val = loader(t, regression(t, 256, 0.1, 10), 16, false, false) // 8 batches a rank
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var edge *evalEdge
				errs := edgeRanks(t, 2, job, t.TempDir(), func(r int) []trainer.Callback {
					if r != 1 {
						return nil
					}
					edge = &evalEdge{}
					return []trainer.Callback{edge}
				}, func(r int, tr *trainer.Trainer) error {
					if err := tr.Fit(context.Background(), job.mod(), job.train, nil); err != nil {
						return fmt.Errorf("Fit: %w", err)
					}
					c := context.Background()
					if r == 1 && cancelled {
						c, edge.cancel = ctx, cancel
					}
					return calls[call](c, tr, job)
				})
				// errs[0] is the healthy rank's, errs[1] the failing one's.
				for r, want := range []string{want1, want0} {
					if errs[r] == nil || !strings.Contains(errs[r].Error(), want) {
						t.Errorf("rank %d: %v; want %q", r, errs[r], want)
					}
				}
				if cancelled && !errors.Is(errs[1], context.Canceled) {
					t.Errorf("rank 1: %v does not wrap context.Canceled", errs[1])
				}
			})
		}
	}
}
