//go:build linux

package cli_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Ctrl-C on a program run with FULGUR_MAX_RESTARTS (the terminal signals
// its whole process group: the launching process and every rank) stops
// the job: the ranks save interrupted.ckpt, nothing is restarted, the
// program prints how to resume and exits 130. Before, the launcher took
// the ranks' exit status 130 for a failure and restarted them, and the
// job trained on to its end (or, under ddp, the supervisor died of the
// signal before its ranks had saved); under ddp_spawn Fit then failed in
// the launching process (exit status 1).
func TestElasticSelfLaunchStopsOnCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts training processes")
	}
	for _, s := range []string{"ddp", "ddp_spawn"} {
		t.Run(s, func(t *testing.T) { ctrlC(t, s, "FULGUR_MAX_RESTARTS=2") })
	}
}

// Ctrl-C on a ddp_spawn program (no restarts): the workers save
// interrupted.ckpt and the launching process prints the summary and the
// command that resumes, and exits 130. Before, the launching process died
// of the signal at once and took the workers with it: no checkpoint.
func TestSpawnStopsOnCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts training processes")
	}
	ctrlC(t, "ddp_spawn", "FULGUR_MAX_RESTARTS=")
}

func ctrlC(t *testing.T, strategy, restarts string) {
	root := t.TempDir()
	args := []string{"-devices", "2", "-strategy", strategy, "-max-epochs", "1", "-limit-train-batches", "2000", "-ckpt-every-n-steps", "5",
		"-limit-val-batches", "1", "-limit-test-batches", "1", "-no-progress-bar", "-no-plots", "-loggers", "csv", "-root-dir", root}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), programEnv+"=1", "FULGUR_TIMEOUT=60s", restarts)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's foreground group
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ckpt := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
	deadline := time.After(90 * time.Second)
	for training := false; !training; {
		select {
		case err := <-done:
			t.Fatalf("the job ended before it was interrupted: %v\n%s", err, errb.String())
		case <-deadline:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("no checkpoint at %s after 90 s:\n%s", ckpt, errb.String())
		case <-time.After(20 * time.Millisecond):
			_, err := os.Stat(ckpt)
			training = err == nil
		}
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("the job did not end within 90 s of SIGINT:\n%s", errb.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("exit %v, want status 130\n%s", err, errb.String())
	}
	if strings.Contains(errb.String(), "elastic: restart") {
		t.Errorf("the launcher restarted the ranks after Ctrl-C:\n%s", errb.String())
	}
	saved := filepath.Join(filepath.Dir(ckpt), "interrupted.ckpt")
	if _, err := os.Stat(saved); err != nil {
		t.Errorf("no interrupted.ckpt: %v\n%s", err, errb.String())
	}
	if s := summaryOf(t, out.String()); !s.Interrupted || s.Checkpoint != saved {
		t.Errorf("summary %+v, want interrupted with checkpoint %s", s, saved)
	}
	if !strings.Contains(errb.String(), "-ckpt-path "+saved) {
		t.Errorf("no resume command naming %s:\n%s", saved, errb.String())
	}
	// One account of the stop reaches the terminal: rank 0's, with the
	// command. Before, under the elastic supervisor every rank printed its
	// own "training interrupted" line (rank 1's pointing at rank 0's).
	if n := strings.Count(errb.String(), "training interrupted"); restarts != "FULGUR_MAX_RESTARTS=" && n != 1 {
		t.Errorf("%d lines say the training was interrupted, want rank 0's alone:\n%s", n, errb.String())
	}
	// So too what the ranks do with the signal (every rank gets it):
	// one line, the first rank's, under ddp_spawn as under the elastic
	// supervisor. Each rank logged its own.
	if n := strings.Count(errb.String(), "finishing the current step"); n != 1 {
		t.Errorf("%d lines say the ranks finish the current step, want the first rank's alone:\n%s", n, errb.String())
	}
	// A command-line program's ranks never point at the Go API to resume.
	if strings.Contains(errb.String(), "trainer.FromCheckpoint") {
		t.Errorf("a rank's message names trainer.FromCheckpoint, not the command:\n%s", errb.String())
	}
}

// Ctrl-C while ddp_spawn's workers are still starting (before their
// program has set up its signal handlers) kills them: the run is
// interrupted, not failed, so the program exits 130 as after they started,
// saying nothing was saved; with FULGUR_MAX_RESTARTS the job is not
// restarted either. Before, it exited 1 with "rank 0 was killed by signal
// interrupt".
func TestSpawnCtrlCWhileWorkersStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tc := range []struct{ name, restarts, started string }{
		{"plain", "FULGUR_MAX_RESTARTS=", "ddp_spawn: started workers"},
		{"elastic", "FULGUR_MAX_RESTARTS=2", "elastic: started the ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) { ctrlCWhileStarting(t, tc.restarts, tc.started) })
	}
}

func ctrlCWhileStarting(t *testing.T, restarts, startedLine string) {
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-devices", "2", "-strategy", "ddp_spawn", "-max-steps", "3", "-no-progress-bar", "-no-plots", "-root-dir", root)
	cmd.Env = append(os.Environ(), programEnv+"=1", slowWorkerEnv+"=1", restarts)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's foreground group
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	started := make(chan struct{})
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		seen := false
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			errb.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), startedLine) && !seen {
				seen = true
				close(started)
			}
		}
	}()
	select {
	case <-started:
	case <-copied:
		cmd.Wait()
		t.Fatalf("the program ended before starting its workers:\n%s", errb.String())
	case <-time.After(60 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-copied
		t.Fatalf("no workers after 60 s:\n%s", errb.String())
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(60*time.Second, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer timer.Stop()
	<-copied
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("exit %v, want status 130\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "training interrupted (SIGINT) before it began; nothing was saved") {
		t.Errorf("stderr does not say the run was interrupted before training:\n%s", errb.String())
	}
	if strings.Count(errb.String(), startedLine) != 1 {
		t.Errorf("%q %d times: the workers were started again after Ctrl-C:\n%s", startedLine, strings.Count(errb.String(), startedLine), errb.String())
	}
	if strings.Count(errb.String(), startedLine) != 1 {
		t.Errorf("%q %d times: the workers were started again after Ctrl-C:\n%s", startedLine, strings.Count(errb.String(), startedLine), errb.String())
	}
	if strings.Contains(errb.String(), "elastic: restart") {
		t.Errorf("the launcher restarted the ranks after Ctrl-C:\n%s", errb.String())
	}
	if s := summaryOf(t, out.String()); !s.Interrupted || s.Checkpoint != "" || s.GlobalStep != 0 {
		t.Errorf("summary %+v, want interrupted at step 0 with no checkpoint", s)
	}
}
