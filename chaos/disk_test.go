//go:build chaos

package chaos_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mountNS makes a private mount namespace with a tmpfs mounted with opts on
// a new directory, held by a sleeping process. It returns the nsenter
// prefix that runs a program inside, the directory as those programs see
// it, and the same directory as this process reaches it (through the
// holder's /proc/PID/root). Everything goes with the holder at cleanup.
func mountNS(t *testing.T, opts string) (via []string, inside, outside string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the disk faults mount a tmpfs in a private mount namespace, which needs root (CI runs as root)")
	}
	dir := t.TempDir()
	holder := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o "$0" tmpfs "$1" && echo mounted && exec sleep infinity`, opts, dir)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	holder.Stderr = &stderr
	if err := holder.Start(); err != nil {
		t.Fatalf("unshare (util-linux) makes the mount namespace: %v", err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "mounted\n" {
		holder.Wait()
		t.Fatalf("mount a tmpfs (%s) in a private mount namespace: %s", opts, stderr.String())
	}
	pid := strconv.Itoa(holder.Process.Pid)
	return []string{"nsenter", "-t", pid, "-m", "--"}, dir, filepath.Join("/proc", pid, "root", dir)
}

// fill writes into dir until its file system has no space left.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for block := make([]byte, 4096); ; {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

func tempsIn(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	return m
}

// TestDiskFaults: the run directory on a tmpfs that fills during a
// checkpoint save, a read-only run directory, and the temporary file of a
// save interrupted by SIGKILL.
func TestDiskFaults(t *testing.T) {
	want := baseline(t)
	t.Run("full", func(t *testing.T) { diskFull(t, want) })
	t.Run("read-only root", func(t *testing.T) { readOnly(t, false) })
	t.Run("read-only LogDir", func(t *testing.T) { readOnly(t, true) })
	t.Run("interrupted save", interruptedSave)
}

func diskFull(t *testing.T, want string) {
	r := row{section: sectionDisk, fault: "the run directory's tmpfs (1 MiB) fills while rank 0 writes last.ckpt", phase: phaseNames["save"]}
	defer recordRow(t, &r)
	via, root, outRoot := mountNS(t, "size=1m")
	marker, holdDir := newMarker(t), t.TempDir()
	j := startVia(t, via, marker, []string{holdEnv + "=save 0 " + holdDir}, "-root", root)
	if !waitFile(t, j, filepath.Join(holdDir, "reached"), 5*time.Minute) {
		r.outcome = "phase not reached"
		return
	}
	last := findFile(outRoot, "last.ckpt")
	if last == "" {
		t.Fatal("no last.ckpt of step 3 before the save of step 6")
	}
	before, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, outRoot)
	injected := time.Now()
	os.WriteFile(filepath.Join(holdDir, "go"), nil, 0o644)
	if !j.wait(t, timeout+margin) {
		r.outcome = "hang"
		return
	}
	r.timeToError = j.ended.Sub(injected).Round(10 * time.Millisecond).String()
	if left := survivors(marker, timeout+5*time.Second); len(left) > 0 {
		t.Errorf("processes %v of the job outlived it", left)
	}
	msg := strings.ReplaceAll(lastLine(j.stderr.String()), root, "ROOT")
	if j.err == nil {
		t.Errorf("the job succeeded on a full disk\n%s", j.stderr.String())
		r.outcome = "succeeded"
		return
	}
	r.outcome = "error: " + trimProgram(msg)
	for _, s := range []string{"last.ckpt", "no space left on device"} {
		if !strings.Contains(msg, s) {
			t.Errorf("rank 0's error does not say %q:\n%s", s, j.stderr.String())
		}
	}
	var checked []string
	if after, err := os.ReadFile(last); err != nil || !bytes.Equal(after, before) {
		t.Errorf("last.ckpt of step 3 changed or went: %v", err)
		checked = append(checked, "last.ckpt CHANGED")
	} else {
		checked = append(checked, "last.ckpt byte-identical to step 3's")
	}
	if left := tempsIn(filepath.Dir(last)); len(left) > 0 {
		t.Errorf("the failed save left %v", left)
		checked = append(checked, fmt.Sprintf("%d temporary files left", len(left)))
	} else {
		checked = append(checked, "no temporary file left")
	}
	r.checked = strings.Join(append(checked, checkResume(t, last, want)), "; ")
}

// readOnly: a run directory mounted read-only, as -root of a
// self-launched ddp job (the trainer makes lightning_logs/version_N in it),
// or as an existing Config.LogDir of a torchrun-style job (each rank its own
// process), where it is the trainer's check at the start of Fit that stops
// every rank.
func readOnly(t *testing.T, logDir bool) {
	r := row{section: sectionDisk, fault: "the root directory is a read-only mount", phase: "start (before the first step)"}
	if logDir {
		r.fault = "Config.LogDir is an existing directory on a read-only mount (torchrun-style ranks)"
	}
	defer recordRow(t, &r)
	via, dir, _ := mountNS(t, "ro,size=64k")
	marker, holdDir := newMarker(t), t.TempDir()
	// The first step would stop at the hold (passed at once): reached
	// says training started.
	os.WriteFile(filepath.Join(holdDir, "go"), nil, 0o644)
	env := []string{holdEnv + "=train 0 " + holdDir}
	began := time.Now()
	var js []*job
	if logDir {
		port, token := freePort(t), hex.EncodeToString([]byte(newMarker(t)))
		for rank := range 2 {
			js = append(js, startVia(t, via, marker, append(env, "RANK="+strconv.Itoa(rank), "WORLD_SIZE=2", "LOCAL_RANK="+strconv.Itoa(rank),
				"LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "FULGUR_TOKEN="+token),
				"-root", t.TempDir(), "-logdir", dir))
		}
	} else {
		js = append(js, startVia(t, via, marker, env, "-root", dir))
	}
	var outcomes []string
	var last time.Time
	for i, j := range js {
		if !j.wait(t, timeout+margin) {
			r.outcome = "hang"
			return
		}
		if j.ended.After(last) {
			last = j.ended
		}
		msg := strings.ReplaceAll(lastLine(j.stderr.String()), dir, "DIR")
		if j.err == nil {
			t.Errorf("rank %d succeeded with a read-only run directory\n%s", i, j.stderr.String())
			outcomes = append(outcomes, fmt.Sprintf("rank %d SUCCEEDED", i))
			continue
		}
		if !strings.Contains(msg, "DIR") {
			t.Errorf("rank %d's error does not name the read-only directory %s:\n%s", i, dir, j.stderr.String())
		}
		if len(js) > 1 {
			msg = fmt.Sprintf("rank %d: %s", i, trimProgram(msg))
		}
		outcomes = append(outcomes, trimProgram(msg))
	}
	r.outcome = "error: " + strings.Join(outcomes, "; ")
	r.timeToError = last.Sub(began).Round(10*time.Millisecond).String() + " from the start"
	if left := survivors(marker, timeout+5*time.Second); len(left) > 0 {
		t.Errorf("processes %v of the job outlived it", left)
	}
	if _, err := os.Stat(filepath.Join(holdDir, "reached")); err == nil {
		t.Errorf("training started before the error")
		r.checked = "training STARTED"
		return
	}
	r.checked = "no step ran"
}

// interruptedSave SIGKILLs a one-rank job while it writes a large
// last.ckpt (a wide MLP: tens of MB), then starts it again from the
// previous last.ckpt in the same root: the temporary file must be gone.
func interruptedSave(t *testing.T) {
	r := row{section: sectionDisk, fault: "SIGKILL while rank 0 writes last.ckpt (a wide MLP, -devices 1), then a restart with FromCheckpoint(last.ckpt)",
		phase: "checkpoint save (step 6), then the next start", timeToError: "-"}
	defer recordRow(t, &r)
	root := t.TempDir()
	args := []string{"-root", root, "-strategy", "single", "-devices", "1", "-hidden", "200000", "-epochs", "1"}
	var temp, last string
	var lastBytes []byte
	for try := 1; temp == "" && try <= 5; try++ {
		os.RemoveAll(root)
		os.MkdirAll(root, 0o755)
		last = ""
		j := start(t, newMarker(t), nil, args...)
	poll:
		for {
			if last == "" {
				last = findFile(root, "last.ckpt")
			} else if len(tempsIn(filepath.Dir(last))) > 0 {
				j.cmd.Process.Signal(syscall.SIGKILL)
				<-j.done
				if m := tempsIn(filepath.Dir(last)); len(m) > 0 {
					temp = m[0]
					lastBytes, _ = os.ReadFile(last)
				}
				break poll
			}
			select {
			case <-j.done:
				break poll
			case <-time.After(time.Millisecond): // polling for the save's temporary file
			}
		}
		if temp == "" {
			t.Logf("try %d: no save caught mid-write", try)
			<-j.done
		}
	}
	st, _ := os.Stat(temp)
	j := start(t, newMarker(t), nil, append(args, "-resume", last)...)
	if !j.wait(t, 5*time.Minute) {
		r.outcome = "the restart hung"
		return
	}
	if j.err != nil {
		t.Errorf("the restart failed: %v\n%s", j.err, j.stderr.String())
		r.outcome = "restart failed: " + trimProgram(lastLine(j.stderr.String()))
		return
	}
	r.outcome = "the restart completes"
	checked := []string{fmt.Sprintf("the kill left %s (%d bytes)", filepath.Base(temp), st.Size())}
	if _, err := os.Stat(temp); err == nil {
		t.Errorf("%s is still there after the restart", temp)
		checked = append(checked, "still there after the restart")
	} else {
		checked = append(checked, "removed by the restart")
	}
	if b, err := os.ReadFile(last); err != nil || !bytes.Equal(b, lastBytes) {
		t.Errorf("the last.ckpt of step 3 changed: %v", err)
	} else {
		checked = append(checked, "last.ckpt of step 3 intact, resumed from")
	}
	r.checked = strings.Join(checked, "; ")
}
