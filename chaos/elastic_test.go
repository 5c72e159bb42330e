//go:build chaos

package chaos_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestElasticRestarts: rank 1 SIGKILLed in each phase of a job whose ddp
// self-launch runs with FULGUR_MAX_RESTARTS=2: the job restarts from its
// last checkpoint and completes with the undisturbed weights in one run
// directory; with FULGUR_MAX_RESTARTS=1 and rank 1 killed in both
// attempts, every process ends with an error naming rank 1 and the
// restarts.
// elasticPhases are where the elastic rows kill rank 1: one point of each
// stage of the job (the process-fault matrix splits the training step
// finer).
var elasticPhases = []string{"setup", "train", "validation", "save", "teardown"}

func TestElasticRestarts(t *testing.T) {
	want := baseline(t)
	for _, phase := range elasticPhases {
		t.Run("SIGKILL/"+phase, func(t *testing.T) { elasticFault(t, "ddp", phase, want, 1) })
	}
	// ddp_spawn's workers are an elastic job of the launching process.
	t.Run("SIGKILL/train/ddp_spawn", func(t *testing.T) { elasticFault(t, "ddp_spawn", "train", want, 1) })
	t.Run("exhausted", func(t *testing.T) { elasticFault(t, "ddp", "train", want, 2) })
	// fsdp with sharded checkpoints: rank 1 is killed before its part of
	// the save of step 6 while rank 0 writes its shard; the restart resumes
	// from step 3's checkpoint, which that shard must not have replaced.
	t.Run("SIGKILL/save/fsdp-sharded", func(t *testing.T) {
		sharded := []string{"-strategy", "fsdp", "-sharded"}
		j := start(t, newMarker(t), tcp2.env(), append(append(tcp2.args(), "-root", t.TempDir()), sharded...)...)
		if !j.wait(t, 5*time.Minute) || j.err != nil {
			t.Fatalf("the undisturbed fsdp run: %v\n%s", j.err, j.stderr.String())
		}
		elasticFault(t, "fsdp", "save", j.result(t).SHA256, 1, "-sharded")
	})
	t.Run("shrink", elasticShrink)
}

// elasticShrink: rank 2 of a 3-rank job with FULGUR_MIN_WORLD=2 SIGKILLed
// in a training step: the job restarts with 2 ranks and ends with the
// weights of a 2-rank job resumed from the checkpoint the 3 ranks left.
func elasticShrink(t *testing.T) {
	r := row{section: sectionRe, fault: "rank 2 of 3 SIGKILL, FULGUR_MAX_RESTARTS=2 FULGUR_MIN_WORLD=2 (elastic restart, smaller world)", phase: phaseNames["train"]}
	defer func() {
		if t.Failed() {
			r.outcome = "WRONG: " + r.outcome
		}
		t.Logf("outcome: %s; time to error: %s; checked: %s", r.outcome, r.timeToError, r.checked)
		record(r)
	}()
	marker, root, holdDir := newMarker(t), t.TempDir(), t.TempDir()
	j := start(t, marker, []string{holdEnv + "=train 2 " + holdDir, "FULGUR_MAX_RESTARTS=2", "FULGUR_MIN_WORLD=2"}, "-root", root, "-devices", "3")
	reached := filepath.Join(holdDir, "reached")
	if !waitFile(t, j, reached, 5*time.Minute) {
		r.outcome = "phase not reached"
		return
	}
	b, _ := os.ReadFile(reached)
	pid, _ := strconv.Atoi(string(b))
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err != nil ||
		!bytes.Contains(env, []byte("FULGUR_CHAOS_MARKER="+marker)) || !bytes.Contains(env, []byte("\x00RANK=2\x00")) {
		t.Fatalf("process %d is not rank 2 of this job", pid)
	}
	// The ranks hold at batch 4 of epoch 0: last.ckpt is step 3's, and
	// nothing writes until the restart has resumed from it.
	ckpt := findFile(root, "last.ckpt")
	kept := filepath.Join(t.TempDir(), "step3.ckpt")
	if b, err := os.ReadFile(ckpt); err != nil || os.WriteFile(kept, b, 0o644) != nil {
		t.Fatalf("keep %q: %v", ckpt, err)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	if !j.wait(t, timeout+margin+5*time.Minute) {
		r.outcome = "hang"
		return
	}
	r.timeToError = "-"
	if j.err != nil {
		t.Errorf("the elastic job failed: %v\n%s", j.err, j.stderr.String())
		r.outcome = "failed: " + lastLine(j.stderr.String())
		return
	}
	got := j.result(t)
	ref := start(t, newMarker(t), nil, "-root", t.TempDir(), "-devices", "2", "-resume", kept)
	if !ref.wait(t, 5*time.Minute) || ref.err != nil {
		t.Fatalf("2-rank job resumed from the 3-rank checkpoint: %v\n%s", ref.err, ref.stderr.String())
	}
	if want := ref.result(t); got != want || got.WorldSize != 2 {
		t.Errorf("shrunk job ended with %+v, a 2-rank job resumed from its checkpoint with %+v", got, want)
		r.outcome = "completed, other weights"
		return
	}
	r.outcome = fmt.Sprintf("completes with 2 ranks (global step %d)", got.GlobalStep)
	checked := []string{"weights = a 2-rank run resumed from the 3 ranks' last.ckpt"}
	if vs, _ := filepath.Glob(filepath.Join(root, "lightning_logs", "version_*")); len(vs) == 1 {
		checked = append(checked, "one run directory")
	} else {
		t.Errorf("run directories %v: want one, continued by the restart", vs)
	}
	r.checked = strings.Join(checked, "; ")
}

// elasticFault kills rank 1 in phase in each of the first kills attempts
// of an elastic job of strategy strat (and the program's further args)
// allowed 2 restarts (kills 1) or 1 (kills 2).
func elasticFault(t *testing.T, strat, phase, want string, kills int, args ...string) {
	restarts := 3 - kills
	r := row{section: sectionRe, fault: fmt.Sprintf("rank 1 SIGKILL in %d attempt(s), FULGUR_MAX_RESTARTS=%d (elastic restart)", kills, restarts), phase: phaseNames[phase]}
	if strat != "ddp" {
		r.fault += ", strategy " + strat
	}
	if slices.Contains(args, "-sharded") {
		r.fault += ", sharded checkpoints"
	}
	defer func() {
		if t.Failed() {
			r.outcome = "WRONG: " + r.outcome
		}
		t.Logf("outcome: %s; time to error: %s; checked: %s", r.outcome, r.timeToError, r.checked)
		record(r)
	}()
	marker, root, holdDir := newMarker(t), t.TempDir(), t.TempDir()
	j := start(t, marker, []string{holdEnv + "=" + phase + " 1 " + holdDir, "FULGUR_MAX_RESTARTS=" + strconv.Itoa(restarts)}, append([]string{"-root", root, "-strategy", strat}, args...)...)
	var injected time.Time
	for k := 0; k < kills; k++ {
		reached := filepath.Join(holdDir, "reached")
		if !waitFile(t, j, reached, 5*time.Minute) {
			r.outcome = "phase not reached"
			return
		}
		b, _ := os.ReadFile(reached)
		pid, _ := strconv.Atoi(string(b))
		if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err != nil ||
			!bytes.Contains(env, []byte("FULGUR_CHAOS_MARKER="+marker)) || !bytes.Contains(env, []byte("\x00RANK=1\x00")) {
			t.Fatalf("process %d is not rank 1 of this job", pid)
		}
		os.Remove(reached)
		injected = time.Now()
		syscall.Kill(pid, syscall.SIGKILL)
	}
	os.WriteFile(filepath.Join(holdDir, "go"), nil, 0o644) // the next attempt's rank 1 goes on
	if !j.wait(t, timeout+margin+5*time.Minute) {
		r.outcome = "hang"
		return
	}
	if left := survivors(marker, timeout+5*time.Second); len(left) > 0 {
		t.Errorf("processes %v of the job outlived it", left)
		r.outcome = "processes left behind"
		return
	}
	msg := j.stderr.String()
	var checked []string
	if kills > restarts {
		r.timeToError = j.ended.Sub(injected).Round(10 * time.Millisecond).String()
		if j.err == nil {
			t.Errorf("the job succeeded although rank 1 was killed in %d attempts with %d restarts allowed\n%s", kills, restarts, msg)
			r.outcome = "succeeded"
			return
		}
		last := lastLine(msg)
		for _, w := range []string{"rank 1 (pid", "killed", fmt.Sprintf("used all %d restarts", restarts)} {
			if !strings.Contains(last, w) {
				t.Errorf("the job's last error line lacks %q:\n%s", w, msg)
			}
		}
		r.outcome = "error: " + strings.ReplaceAll(last, root, "ROOT")
		if ckpt := findFile(root, "last.ckpt"); ckpt != "" {
			checked = append(checked, checkResume(t, ckpt, want))
		}
	} else {
		r.timeToError = "-"
		if j.err != nil {
			t.Errorf("the elastic job failed: %v\n%s", j.err, msg)
			r.outcome = "failed: " + lastLine(msg)
			return
		}
		if got := j.result(t).SHA256; got != want {
			t.Errorf("restarted job: weights %s, undisturbed %s\n%s", got, want, msg)
			r.outcome = "completed, other weights"
			return
		}
		r.outcome = "completes after 1 restart"
		checked = append(checked, "weights = undisturbed run's")
	}
	vs, _ := filepath.Glob(filepath.Join(root, "lightning_logs", "version_*"))
	if len(vs) != 1 {
		t.Errorf("run directories %v: want one, continued by the restart", vs)
		checked = append(checked, fmt.Sprintf("%d run directories", len(vs)))
	} else {
		checked = append(checked, "one run directory")
	}
	if tmp, _ := filepath.Glob(filepath.Join(root, "lightning_logs", "*", "checkpoints", ".*")); len(tmp) > 0 {
		checked = append(checked, fmt.Sprintf("temporary files left: %v", tmp))
	}
	r.checked = strings.Join(checked, "; ")
}
