package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Cancelling the context of a Fit under self-launched ddp stops it as a
// signal does: every rank finishes its step, rank 0 saves the interrupt
// checkpoint and every rank's Fit returns the *InterruptedError (rank 0's
// wrapping context.Canceled). The ranks it launched used to be killed when
// that context ended: rank 0's Fit failed on its lost peer, or in a
// collective, with nothing saved.
func TestDDPCancelledFitStopsEveryRankAndSaves(t *testing.T) {
	needLinux(t)
	marker := newMarker(t)
	root := t.TempDir()
	r := startProgram(t, marker, nil, "-strategy", "ddp", "-devices", "2", "-epochs", "100", "-cancel-step", "3", "-root", root)
	if r.err == nil {
		t.Fatalf("the run went on to the end although rank 0's context was cancelled:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "training interrupted (context canceled) at global step") {
		t.Errorf("rank 0's Fit did not return the interruption:\n%s", lastLines(r.stderr, 5))
	}
	run := filepath.Join(root, "lightning_logs", "version_0")
	if _, err := os.Stat(filepath.Join(run, "checkpoints", "interrupted.ckpt")); err != nil {
		t.Errorf("no interrupt checkpoint: %v", err)
	}
	// Rank 0's program may end before rank 1 has written its last line
	// (it gets FULGUR_TIMEOUT to finish): its log is read once it is gone.
	if left := survivors(t, marker); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
	log, err := os.ReadFile(filepath.Join(run, "rank_1.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "training interrupted (another rank's context was cancelled)") {
		t.Errorf("rank 1 did not stop on rank 0's cancellation; its log ends:\n%s", lastLines(string(log), 5))
	}
}

// Under ddp_spawn, cancelling the launching process's Fit stops the
// workers as SIGTERM does: they finish their step and save, and Fit
// returns the *InterruptedError wrapping context.Canceled with the weights
// they had. The workers used to be killed when the context ended, and Fit
// returned "ddp_spawn workers failed", with nothing saved.
func TestDDPSpawnCancelledFitStopsTheWorkersAndSaves(t *testing.T) {
	needLinux(t)
	marker := newMarker(t)
	root := t.TempDir()
	r := startProgram(t, marker, nil, "-strategy", "ddp_spawn", "-devices", "2", "-epochs", "100", "-cancel-parent", filepath.Join(t.TempDir(), "step3"), "-root", root)
	if r.err == nil {
		t.Fatalf("the run went on to the end although its context was cancelled:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "program: training interrupted (context canceled) at global step") {
		t.Errorf("Fit did not return the interruption:\n%s", lastLines(r.stderr, 5))
	}
	if _, err := os.Stat(filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "interrupted.ckpt")); err != nil {
		t.Errorf("no interrupt checkpoint: %v", err)
	}
	if left := survivors(t, marker); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
}

// A cancel that lands outside the training steps of a self-launched ddp
// job (in the sanity check, in a validation during Fit, at an epoch's
// start, at its end before the epoch's checkpoints) ends as one during a
// step: every rank finishes what it was doing (a validation its loop) and
// stops at the next point where the ranks agree, rank 0 saves the
// interrupt checkpoint at the step every rank reached, and every rank's
// Fit returns the *InterruptedError. The cancelled rank used to fail alone
// with the context's error, nothing saved, and the other rank then failed
// on its lost peer.
func TestDDPCancelOutsideTheStepsStopsEveryRankAndSaves(t *testing.T) {
	needLinux(t)
	for _, tc := range []struct {
		where, backend string
		args           []string
		step           int // where every rank stops: 12 steps an epoch
	}{
		{"sanity", "tcp", nil, 0},
		{"validation", "tcp", nil, 24},
		{"validation", "shm", nil, 24},
		{"validation", "tcp", []string{"-val-check-interval", "5"}, 17}, // mid-epoch
		// Mid-epoch, inside an accumulation window of 2 (after batch 4 of
		// epoch 1): the ranks stop at the window's end, after batch 5.
		{"validation", "tcp", []string{"-val-check-interval", "5", "-accumulate", "2"}, 9},
		{"epoch-start", "tcp", nil, 12},
		{"epoch-end", "tcp", nil, 24},
		{"epoch-end", "shm", nil, 24},
	} {
		name := tc.where + "/" + tc.backend
		if tc.args != nil {
			name += "/" + strings.Join(tc.args, " ")
		}
		t.Run(name, func(t *testing.T) {
			marker := newMarker(t)
			root := t.TempDir()
			args := append([]string{"-strategy", "ddp", "-devices", "2", "-epochs", "5", "-val", "-cancel-in", tc.where, "-root", root}, tc.args...)
			r := startProgram(t, marker, []string{"FULGUR_BACKEND=" + tc.backend}, args...)
			if r.err == nil {
				t.Fatalf("the run went on to the end although rank 0's context was cancelled:\n%s", r.stderr)
			}
			run := filepath.Join(root, "lightning_logs", "version_0")
			want := fmt.Sprintf("training interrupted (context canceled) at global step %d;", tc.step)
			if !strings.Contains(r.stderr, want) {
				t.Errorf("rank 0's Fit did not return %q:\n%s", want, lastLines(r.stderr, 5))
			}
			if _, err := os.Stat(filepath.Join(run, "checkpoints", "interrupted.ckpt")); err != nil {
				t.Errorf("no interrupt checkpoint: %v", err)
			}
			// Read once rank 1 is gone: rank 0's program may end first.
			if left := survivors(t, marker); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
			log, err := os.ReadFile(filepath.Join(run, "rank_1.log"))
			if err != nil {
				t.Fatal(err)
			}
			want1 := fmt.Sprintf("training interrupted (another rank's context was cancelled) at global step %d;", tc.step)
			if !strings.Contains(string(log), want1) {
				t.Errorf("rank 1 did not stop with rank 0; its log ends:\n%s", lastLines(string(log), 5))
			}
			if strings.Contains(r.stderr+string(log), "peer lost") {
				t.Errorf("a rank lost its peer:\n%s\nrank 1:\n%s", lastLines(r.stderr, 5), lastLines(string(log), 5))
			}
			// Bounded well below FULGUR_TIMEOUT (60 s), which a rank
			// waiting for a lost peer would reach: what is left after the
			// cancel is a validation's few batches and a checkpoint.
			b, err := os.ReadFile(filepath.Join(root, "cancelled-at"))
			if err != nil {
				t.Fatalf("rank 0 never cancelled: %v", err)
			}
			ns, err := strconv.ParseInt(string(b), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if took := r.ended.Sub(time.Unix(0, ns)); took > 20*time.Second {
				t.Errorf("the job ended %v after the cancel", took)
			}
		})
	}
}

// Under ddp_spawn with elastic restarts, a cancelled Fit stops the
// workers and saves as without them: the stop is the caller's, not a
// failure to restart from. Cancelled at step 3, or at once (the workers
// still starting, maybe before they train): Fit returns the
// *InterruptedError wrapping context.Canceled in both, never a restart or
// "ddp_spawn workers failed".
func TestDDPSpawnElasticCancelledFitStopsTheWorkersAndSaves(t *testing.T) {
	needLinux(t)
	for _, tc := range []struct {
		name   string
		atOnce bool
	}{{"at step 3", false}, {"at once", true}} {
		t.Run(tc.name, func(t *testing.T) {
			marker := newMarker(t)
			root := t.TempDir()
			flag := filepath.Join(t.TempDir(), "step3")
			if tc.atOnce {
				if err := os.WriteFile(flag, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			r := startProgram(t, marker, []string{"FULGUR_MAX_RESTARTS=2"}, "-strategy", "ddp_spawn", "-devices", "2", "-epochs", "100", "-cancel-parent", flag, "-root", root)
			if r.err == nil {
				t.Fatalf("the run went on to the end although its context was cancelled:\n%s", r.stderr)
			}
			if !strings.Contains(r.stderr, "program: training interrupted (context canceled)") {
				t.Errorf("Fit did not return the interruption:\n%s", lastLines(r.stderr, 5))
			}
			if again, _ := filepath.Glob(filepath.Join(root, "attempt[1-9]*")); len(again) > 0 {
				t.Errorf("the workers were restarted (%v):\n%s", again, lastLines(r.stderr, 5))
			}
			saved := strings.Contains(r.stderr, "training interrupted (context canceled) at global step")
			if _, err := os.Stat(filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "interrupted.ckpt")); (err == nil) != saved || (!saved && !tc.atOnce) {
				t.Errorf("interrupt checkpoint: %v; Fit said:\n%s", err, lastLines(r.stderr, 5))
			}
			if left := survivors(t, marker); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
		})
	}
}

// cancelInValidation cancels its rank's context in the first batch of
// the first validation after the sanity check.
type cancelInValidation struct{ cancel context.CancelFunc }

func (*cancelInValidation) Name() string { return "cancelInValidation" }

func (c *cancelInValidation) OnValidationBatchEnd(_ context.Context, s *trainer.State) error {
	if !s.SanityChecking && c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	return nil
}

// In-process ranks, one cancelled in a mid-epoch validation: the
// validation runs to its end on both, and both stop right after it, at
// the step it followed, with the interrupt checkpoint. The cancelled rank
// used to fail alone with "validate data: context canceled" and the other
// in the metrics' reduce.
func TestInProcessRanksCancelledInValidationStopAfterIt(t *testing.T) {
	const n = 2
	ds, err := strategytest.Regression(8*n*6, 6, 2, 9) // 6 batches a rank an epoch
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctxs := []context.Context{context.Background(), ctx}
	trs, errs := fitDDP(t, n, ds, 4, nil, func(r int, _ *ddp.DDP) []trainer.Callback {
		if r == 1 {
			return []trainer.Callback{&cancelInValidation{cancel: cancel}}
		}
		return nil
	}, ctxs...)
	for r, err := range errs {
		var ie *trainer.InterruptedError
		if !errors.As(err, &ie) {
			t.Fatalf("rank %d: Fit returned %v, want an *InterruptedError", r, err)
		}
		if r == 1 && !errors.Is(err, context.Canceled) {
			t.Errorf("rank 1: %v, want it to wrap context.Canceled", err)
		}
		if ie.GlobalStep != 4 || ie.Checkpoint == "" {
			t.Errorf("rank %d stopped at step %d with checkpoint %q, want step 4 (the validation after batch 3) and a checkpoint", r, ie.GlobalStep, ie.Checkpoint)
		}
		if got := trs[r].Stats().ValidationsPassed; got != 1 {
			t.Errorf("rank %d passed %d validations, want the one the cancel came in", r, got)
		}
	}
}
