package ddp_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	log, err := os.ReadFile(filepath.Join(run, "rank_1.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "training interrupted (another rank's context was cancelled)") {
		t.Errorf("rank 1 did not stop on rank 0's cancellation; its log ends:\n%s", lastLines(string(log), 5))
	}
	if left := survivors(t, marker); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
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
