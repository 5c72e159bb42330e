package trainer_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// tmpfsEnv tells a test binary started by inTmpfs where its tmpfs is.
const tmpfsEnv = "FULGUR_TEST_TMPFS"

// inTmpfs runs the calling (top-level) test again in a child process inside
// a private mount namespace, with a tmpfs mounted with opts on a new
// directory, and fails if the child fails. It returns the directory and
// true in the child, "" and false in the parent (which has nothing more to
// do). Mounting needs root; the mount is gone with the child.
func inTmpfs(t *testing.T, opts string) (string, bool) {
	t.Helper()
	if dir := os.Getenv(tmpfsEnv); dir != "" {
		return dir, true
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs in a private mount namespace needs root (CI runs as root)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed to make a private mount namespace: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o "$1" tmpfs "$2" && exec "$0" -test.run "^$3\$" -test.count 1 -test.v`, exe, opts, dir, t.Name())
	cmd.Env = append(os.Environ(), tmpfsEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("in a tmpfs (%s): %v\n%s", opts, err, out)
	}
	return "", false
}

// tempFiles lists the temporary files of saves in dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A save that fills the disk fails naming the checkpoint and saying the
// disk is full; the previous checkpoint at that path keeps its bytes and
// loads, and no temporary file is left.
func TestFullDiskKeepsPreviousCheckpoint(t *testing.T) {
	dir, child := inTmpfs(t, "size=256k")
	if !child {
		return
	}
	ctx := context.Background()
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(ctx, &linreg{in: 4, lr: 0.05}, loader(t, regression(t, 64, 0.1, 3), 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	last := filepath.Join(dir, "last.ckpt")
	if err := tr.SaveCheckpoint(ctx, last); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	fill, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for block := make([]byte, 512); ; {
		if _, err := fill.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	fill.Close()
	err = tr.SaveCheckpoint(ctx, last)
	if err == nil {
		t.Fatal("a save on a full disk returned no error")
	}
	for _, want := range []string{last, "no space left on device", "is full", "last.ckpt is unchanged"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if after, _ := os.ReadFile(last); !bytes.Equal(after, before) {
		t.Errorf("last.ckpt changed on a failed save: %d bytes, were %d", len(after), len(before))
	}
	if _, err := trainer.VerifyCheckpoint(last); err != nil {
		t.Errorf("last.ckpt does not verify after the failed save: %v", err)
	}
	if left := tempFiles(t, dir); len(left) > 0 {
		t.Errorf("the failed save left %v", left)
	}
}

// A run directory that cannot be written stops Fit before the first step,
// with an error naming the directory (it used to train for an epoch and
// fail at the first checkpoint).
func TestReadOnlyRunDirectoryFailsBeforeTraining(t *testing.T) {
	var dir string
	if os.Geteuid() == 0 {
		// Root writes through permission bits: a read-only mount.
		var child bool
		if dir, child = inTmpfs(t, "ro,size=64k"); !child {
			return
		}
	} else {
		dir = t.TempDir()
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
	}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, LogDir: dir}))
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, regression(t, 64, 0.1, 3), 16, false, false), nil)
	if err == nil {
		t.Fatal("Fit into a read-only run directory returned no error")
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "not writable") {
		t.Errorf("the error does not name the run directory %s as not writable: %v", dir, err)
	}
	if s := tr.Stats().GlobalStep; s != 0 {
		t.Errorf("Fit trained %d steps before failing on the run directory", s)
	}
}

// The next Fit removes the temporary files that saves killed mid-write left
// in the run directories under the root and beside the checkpoint it
// resumes from; a temporary file whose writer still holds it (another job
// saving now) and files that only look alike stay.
func TestInterruptedSaveTempsRemovedAtStart(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ds := regression(t, 64, 0.1, 3)
	fit := func(epochs int, opts ...trainer.FitOption) {
		t.Helper()
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: epochs, DefaultRootDir: root}))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(ctx, &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil, opts...); err != nil {
			t.Fatal(err)
		}
	}
	fit(1)
	ckpts := filepath.Join(root, "lightning_logs", "version_0", "checkpoints")
	elsewhere := t.TempDir()
	b, err := os.ReadFile(filepath.Join(ckpts, "last.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	resume := filepath.Join(elsewhere, "mine.ckpt")
	if err := os.WriteFile(resume, b, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(p string) string {
		t.Helper()
		if err := os.WriteFile(p, []byte("half a checkpoint"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := []string{
		write(filepath.Join(ckpts, ".last.ckpt.tmp-1234567")),
		write(filepath.Join(ckpts, ".epoch=0-step=4.ckpt.tmp-89")),
		write(filepath.Join(elsewhere, ".mine.ckpt.tmp-42")),
	}
	busy := write(filepath.Join(ckpts, ".last.ckpt.tmp-777"))
	f, err := os.Open(busy)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := holdAsWriter(f); err != nil {
		t.Fatal(err)
	}
	lookalikes := []string{write(filepath.Join(ckpts, ".notes.tmp-draft")), write(filepath.Join(elsewhere, "mine.ckpt.tmp-1"))}

	fit(2, trainer.FromCheckpoint(resume))
	for _, p := range stale {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s from an interrupted save is still there after the next start (%v)", p, err)
		}
	}
	for _, p := range append(lookalikes, busy, resume, filepath.Join(ckpts, "last.ckpt")) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s should stay: %v", p, err)
		}
	}
}
