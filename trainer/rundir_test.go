package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// files lists the files under dir (relative, sorted) with their contents.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

func names(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// A plain Config (only the root and quiet output set) keeps each Fit in
// its own lightning_logs/version_N: last and epoch checkpoints and
// metrics.csv, and a second run replaces nothing of the first.
func TestDefaultRunDirectoryPerFit(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	ds := regression(t, 64, 0.1, 3)
	fit := func() *trainer.Trainer {
		cfg := quiet(trainer.Config{MaxEpochs: 2})
		cfg.DisableCheckpointing, cfg.DisableLogger = false, false // quiet turns them off without a root
		tr, err := trainer.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	fit()
	first := files(t, "lightning_logs")
	want := []string{"version_0/checkpoints/epoch=1-step=8.ckpt", "version_0/checkpoints/last.ckpt", "version_0/metrics.csv"}
	if got := names(first); !slices.Equal(got, want) {
		t.Fatalf("after one Fit: %v, want %v", got, want)
	}
	if !strings.Contains(first["version_0/metrics.csv"], "train_loss") {
		t.Errorf("metrics.csv holds no train_loss:\n%s", first["version_0/metrics.csv"])
	}
	info, err := trainer.VerifyCheckpoint(filepath.Join("lightning_logs", "version_0", "checkpoints", "last.ckpt"))
	if err != nil || info.GlobalStep != 8 {
		t.Fatalf("last.ckpt: %+v, %v; want global step 8", info, err)
	}
	fit()
	second := files(t, "lightning_logs")
	for k, v := range first {
		if second[k] != v {
			t.Errorf("the second Fit changed the first run's %s", k)
		}
	}
	for _, w := range want {
		w = strings.Replace(w, "version_0", "version_1", 1)
		if _, ok := second[w]; !ok {
			t.Errorf("the second Fit wrote no %s (it wrote %v)", w, names(second))
		}
	}
	if p, err := trainer.ResolveCheckpoint(".", "last"); err != nil || !strings.Contains(p, "version_1") {
		t.Errorf(`ResolveCheckpoint(".", "last") = %s, %v; want version_1's last.ckpt`, p, err)
	}
}

// The default checkpoints keep the newest epoch checkpoint, also across a
// resume in the same run directory (Config.LogDir): the resumed run's
// next epoch checkpoint replaces the one of the run it resumes. Resumed
// into another run directory, it leaves the first run's alone.
func TestDefaultEpochCheckpointReplacedAfterResume(t *testing.T) {
	ds := regression(t, 64, 0.1, 3)
	fit := func(dir string, epochs int, ckpt string) {
		t.Helper()
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: epochs, LogDir: dir}))
		if err != nil {
			t.Fatal(err)
		}
		var opts []trainer.FitOption
		if ckpt != "" {
			opts = append(opts, trainer.FromCheckpoint(ckpt))
		}
		if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil, opts...); err != nil {
			t.Fatal(err)
		}
	}
	ckpts := func(dir string) []string {
		var out []string
		for _, n := range names(files(t, filepath.Join(dir, "checkpoints"))) {
			out = append(out, n)
		}
		return out
	}
	dir := t.TempDir()
	fit(dir, 2, "")
	fit(dir, 3, filepath.Join(dir, "checkpoints", "last.ckpt"))
	if got, want := ckpts(dir), []string{"epoch=2-step=12.ckpt", "last.ckpt"}; !slices.Equal(got, want) {
		t.Errorf("resumed in the same run directory: checkpoints %v, want %v", got, want)
	}
	other := t.TempDir()
	fit(other, 4, filepath.Join(dir, "checkpoints", "last.ckpt"))
	if got, want := ckpts(dir), []string{"epoch=2-step=12.ckpt", "last.ckpt"}; !slices.Equal(got, want) {
		t.Errorf("after a resume into another run directory, the first's checkpoints are %v, want %v", got, want)
	}
	if got, want := ckpts(other), []string{"epoch=3-step=16.ckpt", "last.ckpt"}; !slices.Equal(got, want) {
		t.Errorf("resumed into another run directory: checkpoints %v, want %v", got, want)
	}
}

func TestDefaultOutputsTurnOff(t *testing.T) {
	ds := regression(t, 64, 0.1, 3)
	cases := []struct {
		name       string
		noCkpt     bool
		noLog      bool
		wantFiles  []string
		wantRunDir bool
	}{
		{"no checkpoints", true, false, []string{"lightning_logs/version_0/metrics.csv"}, true},
		{"no logger", false, true, []string{"lightning_logs/version_0/checkpoints/epoch=0-step=4.ckpt", "lightning_logs/version_0/checkpoints/last.ckpt"}, true},
		{"neither", true, true, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: root, DisableCheckpointing: c.noCkpt, DisableLogger: c.noLog}))
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil); err != nil {
				t.Fatal(err)
			}
			if got := names(files(t, root)); !slices.Equal(got, c.wantFiles) {
				t.Errorf("files %v, want %v", got, c.wantFiles)
			}
		})
	}
}

// A ModelCheckpoint and a logger the user adds without a path write into
// the run's version directory; the ModelCheckpoint replaces the default
// checkpoints and the user's logger the default one.
func TestUserCallbacksWriteIntoRunDirectory(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "lightning_logs", "version_3"), 0o755); err != nil {
		t.Fatal(err)
	}
	ds := regression(t, 64, 0.1, 3)
	mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{SaveLast: true})
	if err != nil {
		t.Fatal(err)
	}
	dirs := &logDirs{}
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: root, Callbacks: []trainer.Callback{mc, dirs}, Loggers: []trainer.Logger{dirs}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(root, "lightning_logs", "version_4")
	if dirs.seen != run {
		t.Errorf("State.LogDir %q, want %q (one above the existing version_3)", dirs.seen, run)
	}
	want := []string{"lightning_logs/version_4/checkpoints/epoch=0-step=4.ckpt", "lightning_logs/version_4/checkpoints/last.ckpt"}
	if got := names(files(t, root)); !slices.Equal(got, want) {
		t.Errorf("files %v, want %v (ModelCheckpoint's, in the run directory; no default metrics.csv beside a user's logger)", got, want)
	}
	if mc.Dir() != filepath.Join(run, "checkpoints") {
		t.Errorf("ModelCheckpoint.Dir() = %s, want the run directory's checkpoints", mc.Dir())
	}
}

// logDirs is a callback and a logger that records State.LogDir.
type logDirs struct{ seen string }

func (l *logDirs) Name() string                             { return "logDirs" }
func (l *logDirs) LogHyperparams(map[string]any) error      { return nil }
func (l *logDirs) LogMetrics(int, map[string]float64) error { return nil }
func (l *logDirs) Finalize(string) error                    { return nil }
func (l *logDirs) OnFitStart(_ context.Context, s *trainer.State) error {
	l.seen = s.LogDir
	return nil
}

// canceller cancels Fit's context after a global step.
type canceller struct {
	at     int
	cancel context.CancelFunc
}

func (c *canceller) Name() string { return "canceller" }
func (c *canceller) OnTrainBatchEnd(_ context.Context, s *trainer.State) error {
	if s.GlobalStep == c.at {
		c.cancel()
	}
	return nil
}

// Cancelling Fit's context saves a resumable checkpoint at the step
// boundary and returns an *InterruptedError naming it; resuming from it
// ends with the weights of an uninterrupted run.
func TestCancelSavesResumableCheckpoint(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	root := t.TempDir()
	cfg := quiet(job.cfg)
	cfg.DefaultRootDir = root
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Callbacks = []trainer.Callback{&canceller{at: 7, cancel: cancel}}
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(ctx, job.mod(), job.train, job.val)
	var ie *trainer.InterruptedError
	if !errors.As(err, &ie) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Fit after cancel: %v, want an *InterruptedError wrapping context.Canceled", err)
	}
	// The interrupted epoch's batches count in Stats: the examples'
	// summary printed "train_samples_per_s":0 for a run stopped in its
	// first epoch.
	if st := tr.Stats(); st.GlobalStep != 7 || st.TrainSamples == 0 || st.TrainTime <= 0 || st.TrainSamplesPerS <= 0 {
		t.Errorf("stats after 7 steps: %+v, want the samples, their time and a positive rate", st)
	}
	ckpt := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "interrupted.ckpt")
	if ie.Checkpoint != ckpt || !strings.Contains(err.Error(), fmt.Sprintf("trainer.FromCheckpoint(%q)", ckpt)) {
		t.Errorf("error %q (checkpoint %q), want one naming %s and how to resume", err, ie.Checkpoint, ckpt)
	}
	info, err := trainer.VerifyCheckpoint(ckpt)
	if err != nil || info.GlobalStep != 7 {
		t.Fatalf("checkpoint: %+v, %v; want global step 7", info, err)
	}
	if p, err := trainer.ResolveCheckpoint(root, "last"); err != nil || p != ckpt {
		t.Errorf(`"last" after the interrupt: %s, %v; want %s`, p, err, ckpt)
	}
	want := job.run(t, "").Store().SHA256()
	if h := job.run(t, ckpt).Store().SHA256(); h != want {
		t.Errorf("resumed after cancel: weights %s, want %s (uninterrupted)", h, want)
	}
}

// Two SIGINTs at once (a shell signalling the process group, go run
// forwarding) are one request: the run saves one checkpoint and Fit
// returns the error; the second signal does not kill it.
func TestDuplicateSIGINTIsOneRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd, sc, stdin := startChild(t, "int", dir)
	waitFor(t, sc, "parked 13")
	for range 2 {
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Fprintln(stdin, "go on")
	msg := waitFor(t, sc, "error")
	done := waitFor(t, sc, "done interrupted=true")
	// The signal reaches the loop asynchronously: the stop lands at the
	// first step boundary after it, 13 or a little later.
	var stopped int
	if _, err := fmt.Sscanf(done, "done interrupted=true step=%d", &stopped); err != nil || stopped < 13 {
		t.Fatalf("first job: %q: want the step it stopped at, 13 or later", done)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child exit: %v", err)
	}
	ckpt := filepath.Join(dir, "lightning_logs", "version_0", "checkpoints", "interrupted.ckpt")
	if want := "error exit=130 training interrupted (SIGINT)"; !strings.HasPrefix(msg, want) || !strings.Contains(msg, ckpt) {
		t.Errorf("Fit's error %q, want %q... naming %s", msg, want, ckpt)
	}
	if _, err := trainer.VerifyCheckpoint(ckpt); err != nil {
		t.Fatal(err)
	}
}

// Under SLURM, SIGUSR1 saves the checkpoint and requeues the job with
// scontrol (a fake one on PATH records its arguments).
func TestSLURMSIGUSR1Requeues(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	if sigUSR1 == nil {
		t.Skip("this platform has no SIGUSR1")
	}
	dir := t.TempDir()
	bin := t.TempDir()
	record := filepath.Join(dir, "scontrol.args")
	script := "#!/bin/sh\necho \"$@\" > " + record + "\n"
	if err := os.WriteFile(filepath.Join(bin, "scontrol"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, sc, stdin := startChild(t, "usr1", dir, "SLURM_JOB_ID=4242", "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	waitFor(t, sc, "parked 13")
	if err := cmd.Process.Signal(sigUSR1); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "go on")
	msg := waitFor(t, sc, "error")
	done := waitFor(t, sc, "done interrupted=true")
	// The signal reaches the loop asynchronously: the stop lands at the
	// first step boundary after it, 13 or a little later.
	var stopped int
	if _, err := fmt.Sscanf(done, "done interrupted=true step=%d", &stopped); err != nil || stopped < 13 {
		t.Fatalf("first job: %q: want the step it stopped at, 13 or later", done)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child exit: %v", err)
	}
	if !strings.Contains(msg, "SIGUSR1") || !strings.Contains(msg, "requeued") {
		t.Errorf("Fit's error %q, want SIGUSR1 and the requeue", msg)
	}
	b, err := os.ReadFile(record)
	if err != nil || strings.TrimSpace(string(b)) != "requeue 4242" {
		t.Errorf("scontrol got %q (%v), want \"requeue 4242\"", b, err)
	}
	if _, err := trainer.VerifyCheckpoint(filepath.Join(dir, "lightning_logs", "version_0", "checkpoints", "interrupted.ckpt")); err != nil {
		t.Fatal(err)
	}
	// SLURM starts the requeued job again (SLURM_RESTART_COUNT=1): Fit,
	// given no checkpoint, resumes from the interrupted one.
	cmd, sc, stdin = startChild(t, "usr1", dir, "SLURM_JOB_ID=4242", "SLURM_RESTART_COUNT=1")
	// A resumed job never parks at step 13; one that started over would
	// park there, read end of file and exit, failing the test instead of
	// hanging it.
	stdin.Close()
	if l, want := waitFor(t, sc, "first step"), fmt.Sprintf("first step %d", stopped+1); l != want {
		t.Errorf("requeued job: %q, want %q (resumed after step %d, where the first job stopped)", l, want, stopped)
	}
	if l := waitFor(t, sc, "done"); !strings.HasPrefix(l, "done interrupted=false") {
		t.Errorf("requeued job: %q, want it to finish", l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("requeued child exit: %v", err)
	}
}
