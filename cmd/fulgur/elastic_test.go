package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/strategy/launch"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// programEnv makes the test binary the training program that "fulgur run"
// starts as every rank; dieEnv ("RANK:STEP:HOW") makes that rank fail at
// the end of that global step: HOW "kill" SIGKILLs it in the first
// attempt only, "panic" panics in every attempt; "slow" makes every step of
// every rank take 50 ms more (a job to interrupt).
const (
	// asFulgur as the first argument makes the test binary the fulgur
	// command (for tests that signal its process).
	asFulgur   = "-as-fulgur"
	programEnv = "FULGUR_ELASTIC_TEST_PROGRAM"
	// commandEnv makes the test binary a rank that prints the launcher's
	// command line it was given.
	commandEnv = "FULGUR_ELASTIC_TEST_COMMAND"
	dieEnv     = "FULGUR_ELASTIC_TEST_DIE"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == asFulgur {
		// The fulgur command itself, as main runs it (exit statuses too).
		os.Exit(exitCode(run(os.Args[2:], os.Stdout, os.Stderr), os.Stderr))
	}
	if os.Getenv(commandEnv) != "" {
		fmt.Printf("rank %s: %s\n", os.Getenv(launch.EnvRank), os.Getenv(launch.EnvLaunchCommand))
		os.Exit(0)
	}
	if os.Getenv(programEnv) != "" {
		if err := trainProgram(os.Args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "program:", err)
			// As the cli's programs: a stop that saved exits 130
			// (SIGINT) or 143 (SIGTERM).
			var ie *trainer.InterruptedError
			if errors.As(err, &ie) && ie.Signal == syscall.SIGTERM {
				os.Exit(143)
			} else if errors.As(err, &ie) {
				os.Exit(130)
			}
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// scheduled is the test MLP with a per-step learning-rate schedule, so that
// a resume that lost the optimizer step count would change the weights.
type scheduled struct{ *strategytest.MLP }

func (m scheduled) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewSGD(optim.SGDConfig{LR: 0.05, Momentum: 0.9})
	if err != nil {
		return nil, nil, err
	}
	s, err := optim.NewStepLR(0.05, 4, 0.7)
	return o, s, err
}

// die fails this rank as dieEnv says.
type die struct {
	rank, step int
	how        string
}

func (d die) Name() string { return "die" }
func (d die) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if d.how == "slow" { // every step of every rank takes a while
		time.Sleep(50 * time.Millisecond)
		return nil
	}
	if s.GlobalStep != d.step || os.Getenv(launch.EnvRank) != strconv.Itoa(d.rank) {
		return nil
	}
	switch {
	case d.how == "kill" && os.Getenv(launch.EnvRestartCount) <= "0": // the first attempt, or no elastic launcher
		killSelf()
	case d.how == "panic":
		panic(fmt.Sprintf("user code fails at step %d", d.step))
	}
	return nil
}

type programResult struct {
	SHA256     string `json:"weights_sha256"`
	GlobalStep int    `json:"global_step"`
	WorldSize  int    `json:"world_size"`
}

func trainProgram(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("program", flag.ContinueOnError)
	devices := fs.Int("devices", 2, "")
	nodes := fs.Int("num-nodes", 1, "")
	strat := fs.String("strategy", "ddp", "")
	root := fs.String("root", "", "")
	resume := fs.String("resume", "", "")
	versionDir := fs.Bool("versiondir", false, "pick the run directory before Fit with trainer.VersionDir, as callbacks.Plots' Dir asks, with a Timeline profiler in it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ds, err := strategytest.Regression(96, 6, 2, 1)
	if err != nil {
		return err
	}
	train, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 4, Shuffle: true, Seed: 3})
	if err != nil {
		return err
	}
	ckpt, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{LastOnly: true, EveryNTrainSteps: 3})
	if err != nil {
		return err
	}
	cbs := []trainer.Callback{ckpt}
	if v := os.Getenv(dieEnv); v != "" {
		var d die
		f := strings.Split(v, ":")
		d.rank, _ = strconv.Atoi(f[0])
		d.step, _ = strconv.Atoi(f[1])
		d.how = f[2]
		cbs = append([]trainer.Callback{d}, cbs...)
	}
	logDir := ""
	var prof profiler.Profiler
	if *versionDir {
		if logDir, err = trainer.VersionDir(*root, ""); err != nil {
			return err
		}
		// It makes its directory now, before Fit, in every process that
		// runs the program: the elastic supervisor too.
		env, _, err := cluster.Detect(cluster.OSLookup)
		if err != nil {
			return err
		}
		if prof, err = profiler.NewTimeline(profiler.TimelineConfig{Dir: filepath.Join(logDir, "timeline"), Rank: env.Rank}); err != nil {
			return err
		}
	}
	tr, err := trainer.New(trainer.Config{MaxEpochs: 2, Seed: 5, Strategy: *strat, Devices: *devices, NumNodes: *nodes, LogEveryNSteps: 1,
		Out: os.Stderr, EnableProgressBar: trainer.Bool(false), DefaultRootDir: *root, LogDir: logDir, Profiler: prof, Callbacks: cbs})
	if err != nil {
		return err
	}
	var opts []trainer.FitOption
	if *resume != "" {
		opts = append(opts, trainer.FromCheckpoint(*resume))
	}
	m := scheduled{&strategytest.MLP{In: 6, Hidden: 16, Out: 2}}
	if err := tr.Fit(context.Background(), m, train, nil, opts...); err != nil {
		return err
	}
	zero, st, sha := tr.IsGlobalZero(), tr.Stats(), tr.Store().SHA256()
	if err := tr.Teardown(context.Background()); err != nil {
		return err
	}
	if !zero {
		return nil
	}
	return json.NewEncoder(stdout).Encode(programResult{SHA256: sha, GlobalStep: st.GlobalStep, WorldSize: st.WorldSize})
}

// fulgurRun runs "fulgur run FLAGS <this test binary> ARGS" with die as
// dieEnv, returning rank 0's result, the launcher's log and its error.
func fulgurRun(t *testing.T, flags []string, die string, args ...string) (programResult, string, error) {
	t.Helper()
	t.Setenv(programEnv, "1")
	t.Setenv(dieEnv, die)
	t.Setenv("FULGUR_BACKEND", "tcp") // real sockets over loopback
	var out, errb bytes.Buffer
	cmd := append(append(append([]string{"run"}, flags...), os.Args[0]), args...)
	err := run(cmd, &out, &errb)
	var r programResult
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err == nil {
		if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &r); jerr != nil {
			t.Fatalf("fulgur %v: the last line of output is not the result: %v\nstdout:\n%s\nstderr:\n%s", cmd, jerr, out.String(), errb.String())
		}
	}
	return r, errb.String(), err
}

// metricSteps returns the steps of metrics.csv rows that logged train_loss_step.
func metricSteps(t *testing.T, path string) map[int]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	col := map[string]int{}
	for i, c := range recs[0] {
		col[c] = i
	}
	steps := map[int]bool{}
	for _, r := range recs[1:] {
		if r[col["train_loss_step"]] != "" {
			s, _ := strconv.Atoi(r[col["step"]])
			steps[s] = true
		}
	}
	return steps
}

// checkRunDir: one version directory, whose metrics.csv has a step row
// for every step 1..steps (those of the killed attempt too) and whose
// last.ckpt is whole and the newest.
func checkRunDir(t *testing.T, root string, steps int) {
	t.Helper()
	vs, err := filepath.Glob(filepath.Join(root, "lightning_logs", "version_*"))
	if err != nil || len(vs) != 1 {
		t.Fatalf("run directories %v (%v), want one version_0: a restart must continue the run", vs, err)
	}
	got := metricSteps(t, filepath.Join(vs[0], "metrics.csv"))
	for s := 1; s <= steps; s++ {
		if !got[s] {
			t.Errorf("metrics.csv has no row for step %d (rows: %v)", s, got)
		}
	}
	ckpts, _ := filepath.Glob(filepath.Join(vs[0], "checkpoints", "*"))
	if len(ckpts) != 1 || filepath.Base(ckpts[0]) != "last.ckpt" {
		t.Fatalf("checkpoints %v: want one last.ckpt (no temporary file left)", ckpts)
	}
	info, err := trainer.VerifyCheckpoint(ckpts[0])
	// Saved every 3 steps and, as Lightning's save_last, at each epoch's
	// end: the jobs end at an epoch's end, so it holds their final step.
	if err != nil || info.GlobalStep != steps {
		t.Errorf("last.ckpt: step %d, %v: want a whole checkpoint of the final step %d", info.GlobalStep, err, steps)
	}
}

func TestFulgurRunRestartsKilledRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real multi-process training jobs")
	}
	for _, c := range []struct {
		name  string
		world int
		die   string
		steps int
	}{
		{"2 ranks, rank 1 killed at step 5", 2, "1:5:kill", 24},
		{"3 ranks, rank 2 killed at step 5", 3, "2:5:kill", 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := strconv.Itoa(c.world)
			want, _, err := fulgurRun(t, []string{"-nproc", n}, "", "-devices", n, "-root", t.TempDir())
			if err != nil {
				t.Fatalf("uninterrupted run: %v", err)
			}
			root := t.TempDir()
			got, log, err := fulgurRun(t, []string{"-nproc", n, "-max-restarts", "2"}, c.die, "-devices", n, "-root", root)
			if err != nil {
				t.Fatalf("elastic run: %v\nlog:\n%s", err, log)
			}
			if got != want || got.GlobalStep != c.steps {
				t.Errorf("restarted job ended with %+v, the uninterrupted one with %+v (want %d steps): the restart did not continue bit for bit", got, want, c.steps)
			}
			for _, w := range []string{fmt.Sprintf("rank=%s", c.die[:1]), "was killed by SIGKILL (signal 9)",
				fmt.Sprintf("restart 1 of 2 with %d ranks (was %d)", c.world, c.world), "elastic restart: resuming from the run's newest checkpoint", "elastic: the job completed after restarting"} {
				if !strings.Contains(log, w) {
					t.Errorf("the log lacks %q:\n%s", w, log)
				}
			}
			checkRunDir(t, root, c.steps)
		})
	}
}

// TestFulgurRunShrinks: a 3-rank job whose rank 2 is SIGKILLed at step 5
// restarts with 2 ranks (-nproc 2:3) from the last.ckpt of step 3, and
// ends with the weights of a 2-rank run resumed from that checkpoint. The
// 3 ranks had trained 3 batches each (36 samples) of epoch 0; 2 ranks go
// on at their batch 4 (32 samples, rounded down to whole 2-rank batches),
// so epoch 0 takes 3 + (12-4) steps and the job 11 + 12 = 23.
func TestFulgurRunShrinks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real multi-process training jobs")
	}
	ref := t.TempDir()
	_, log, err := fulgurRun(t, []string{"-nproc", "3", "-max-restarts", "0"}, "2:5:kill", "-devices", "3", "-root", ref)
	if err == nil || !strings.Contains(err.Error(), "rank 2 (pid") || !strings.Contains(err.Error(), "restarts are off (MaxRestarts 0") {
		t.Fatalf("a killed rank without restarts: error %v, want one naming rank 2 and the restarts\nlog:\n%s", err, log)
	}
	ckpt, err := trainer.ResolveCheckpoint(ref, trainer.CkptLast)
	if err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(t.TempDir(), "step3.ckpt")
	if b, err := os.ReadFile(ckpt); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(keep, b, 0o644); err != nil {
		t.Fatal(err)
	}
	want, _, err := fulgurRun(t, []string{"-nproc", "2"}, "", "-devices", "2", "-root", t.TempDir(), "-resume", keep)
	if err != nil {
		t.Fatalf("2-rank run resumed from the 3-rank checkpoint: %v", err)
	}
	root := t.TempDir()
	got, log, err := fulgurRun(t, []string{"-nproc", "2:3", "-max-restarts", "2"}, "2:5:kill", "-devices", "3", "-root", root)
	if err != nil {
		t.Fatalf("elastic run: %v\nlog:\n%s", err, log)
	}
	if got != want || got.GlobalStep != 23 || got.WorldSize != 2 {
		t.Errorf("shrunk job ended with %+v, the 2-rank run resumed from its checkpoint with %+v; want 23 steps at world size 2", got, want)
	}
	if !strings.Contains(log, "restart 1 of 2 with 2 ranks (was 3)") {
		t.Errorf("the log does not say the job restarted with 2 ranks:\n%s", log)
	}
	checkRunDir(t, root, 23)
}

// TestFulgurRunStopsDeterministicFailure: user code that panics at step 5
// in every attempt is restarted once, then the job fails naming the rank.
func TestFulgurRunStopsDeterministicFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real multi-process training jobs")
	}
	_, log, err := fulgurRun(t, []string{"-nproc", "2", "-max-restarts", "5"}, "1:5:panic", "-devices", "2", "-root", t.TempDir())
	if err == nil {
		t.Fatalf("the job succeeded\nlog:\n%s", log)
	}
	for _, w := range []string{"rank 1 (pid", "user code fails at step 5", "failed the same way in attempt 1", "restart 2 of 5 not done"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q\nlog:\n%s", err, w, log)
		}
	}
}

// TestSelfLaunchRestarts: a ddp program that launches its own ranks, run
// with FULGUR_MAX_RESTARTS, supervises them as "fulgur run" does: rank 1
// SIGKILLed at step 5 is restarted and the job ends with the weights of an
// uninterrupted run.
func TestSelfLaunchRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real multi-process training jobs")
	}
	self := func(root string, env ...string) (programResult, string) {
		cmd := exec.Command(os.Args[0], "-devices", "2", "-root", root)
		cmd.Env = append(os.Environ(), append(env, programEnv+"=1", "FULGUR_BACKEND=tcp")...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v %v: %v\nstdout:\n%s\nstderr:\n%s", env, cmd.Args, err, out.String(), errb.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var r programResult
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
			t.Fatalf("%v: the last line of output is not the result: %v\nstdout:\n%s", env, err, out.String())
		}
		return r, errb.String()
	}
	want, _ := self(t.TempDir())
	root := t.TempDir()
	got, log := self(root, launch.EnvMaxRestarts+"=2", dieEnv+"=1:5:kill")
	if got != want {
		t.Errorf("restarted job ended with %+v, the uninterrupted one with %+v", got, want)
	}
	for _, w := range []string{"this process supervises the job", "was killed by SIGKILL (signal 9)", "restart 1 of 2 with 2 ranks (was 2)", "elastic restart: resuming from the run's newest checkpoint"} {
		if !strings.Contains(log, w) {
			t.Errorf("the log lacks %q:\n%s", w, log)
		}
	}
	checkRunDir(t, root, 24)
}

// A program that picks its run directory before Fit with
// trainer.VersionDir (as callbacks.Plots' Dir and a Timeline profiler need
// it) keeps one run directory across an elastic restart: the restarted
// ranks' VersionDir is the job's, not the next version_N beside it. Before,
// the restarted attempt logged into version_1 (with a warning), and
// metrics.csv, the checkpoints and the plots were split in two. In the
// first attempt too, every process names one: the supervisor (which runs
// the program up to Fit, and here makes the Timeline's directory) and the
// ranks, started together, named version_0, version_1 and version_2.
func TestSelfLaunchRestartsWithVersionDir(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real multi-process training jobs")
	}
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-devices", "2", "-root", root, "-versiondir")
	cmd.Env = append(os.Environ(), programEnv+"=1", "FULGUR_BACKEND=tcp", launch.EnvMaxRestarts+"=2", dieEnv+"=1:5:kill")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\nstderr:\n%s", cmd.Args, err, errb.String())
	}
	if !strings.Contains(errb.String(), "restart 1 of 2") {
		t.Fatalf("the job was not restarted:\n%s", errb.String())
	}
	if strings.Contains(errb.String(), "is not the directory the job's first attempt ran in") {
		t.Errorf("the restarted attempt logged apart:\n%s", errb.String())
	}
	checkRunDir(t, root, 24)
	for _, f := range []string{"timeline-rank0.json", "timeline-rank1.json", "timeline.json"} {
		if _, err := os.Stat(filepath.Join(root, "lightning_logs", "version_0", "timeline", f)); err != nil {
			t.Errorf("the run's timeline: %v", err)
		}
	}
}

// Under "fulgur run" (as under any launcher that starts the ranks
// together) every rank runs the program's VersionDir before Fit: they name
// one run directory when nothing there is made before the ranks meet at
// Fit. A Timeline profiler made its directory when built, so the rank that
// came second named the next version_N and its trace was missing from the
// merged timeline.
func TestFulgurRunRanksNameOneRunDirWithVersionDir(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real multi-process training jobs")
	}
	root := t.TempDir()
	if _, log, err := fulgurRun(t, []string{"-nproc", "2"}, "", "-devices", "2", "-root", root, "-versiondir"); err != nil {
		t.Fatalf("fulgur run: %v\n%s", err, log)
	}
	checkRunDir(t, root, 24)
	for _, f := range []string{"timeline-rank0.json", "timeline-rank1.json", "timeline.json"} {
		if _, err := os.Stat(filepath.Join(root, "lightning_logs", "version_0", "timeline", f)); err != nil {
			t.Errorf("the run's timeline: %v", err)
		}
	}
}

func TestFulgurRunRejectsBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"-nproc", "0", "x"}, "", `-nproc "0": use a number of ranks such as 2, or MIN:MAX`},
		{[]string{"-nproc", "3:2", "x"}, "", `-nproc "3:2"`},
		{[]string{"-nproc", "two", "x"}, "", `-nproc "two"`},
		{[]string{"-max-restarts", "-1", "x"}, "", "-max-restarts is -1: use 0 (no restarts) or more"},
		{[]string{"x"}, "many", `FULGUR_MAX_RESTARTS="many": use the number of restarts`},
		{[]string{}, "", "no PROGRAM given"},
		{[]string{"./no-such-program"}, "", `PROGRAM "./no-such-program"`},
	} {
		t.Setenv(launch.EnvMaxRestarts, c.env)
		var out, errb bytes.Buffer
		err := run(append([]string{"run"}, c.args...), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("fulgur run %v (%s=%q): error %v, want %q", c.args, launch.EnvMaxRestarts, c.env, err, c.want)
		}
	}
}

// TestFulgurRunStopsOnCtrlC: a SIGINT to the fulgur run process stops the
// job as torchrun's agent does: the ranks are asked to stop, save
// interrupted.ckpt and end, and fulgur exits 130 saying so (it printed
// "context canceled" and exited 2, as for a failed job), with one line, not
// one per rank, on what the ranks do with the signal.
func TestFulgurRunStopsOnCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real multi-process training jobs")
	}
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], asFulgur, "run", "-nproc", "2", os.Args[0], "-devices", "2", "-root", root)
	cmd.Env = append(os.Environ(), programEnv+"=1", dieEnv+"=0:0:slow", "FULGUR_BACKEND=tcp")
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Wait until training runs (the first checkpoint, after step 3).
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(root, "*", "*", "checkpoints", "last.ckpt")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after 30 s:\n%s", errb.String())
		}
		time.Sleep(20 * time.Millisecond) // polling another process's files
	}
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("fulgur run ended with %v, want exit status 130\n%s", err, errb.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("fulgur run still ran 60 s after SIGINT:\n%s", errb.String())
	}
	if !strings.Contains(errb.String(), "stopped by SIGINT") || strings.Contains(errb.String(), "context canceled") {
		t.Errorf("fulgur run's output does not say it was stopped by SIGINT (or reads as a failure):\n%s", errb.String())
	}
	if m, _ := filepath.Glob(filepath.Join(root, "*", "*", "checkpoints", "interrupted.ckpt")); len(m) != 1 {
		t.Errorf("interrupted.ckpt: found %v, want one: the ranks did not save", m)
	}
	// Both ranks got the signal (fulgur run passes it on to each), and
	// their output meets on one terminal: one line says what a rank does
	// with it, as one account says how the run stopped. Each rank logged
	// its own.
	if n := strings.Count(errb.String(), "finishing the current step"); n != 1 {
		t.Errorf("%d lines say the ranks finish the current step, want one (the machine's first rank's):\n%s", n, errb.String())
	}
	// The ranks agreed to stop: one ending before another closes its
	// connections is the stop they agreed on, not a lost peer to warn of.
	if strings.Contains(errb.String(), "collective group broken") || strings.Contains(errb.String(), "peer lost") {
		t.Errorf("a rank warns of a broken group after the interrupt every rank agreed on:\n%s", errb.String())
	}
}

// TestFulgurRunTellsRanksItsCommand: the ranks learn how fulgur run was
// started, so that a rank's "resume with" starts the whole job again (it
// gave the bare program's command, one process).
func TestFulgurRunTellsRanksItsCommand(t *testing.T) {
	cmd := exec.Command(os.Args[0], asFulgur, "run", "-nproc", "2", "-grace", "5s", os.Args[0], "-devices", "2")
	cmd.Env = append(os.Environ(), commandEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for r := range 2 {
		want := fmt.Sprintf("rank %d: %s run -nproc 2 -grace 5s\n", r, os.Args[0])
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestFulgurRunLabelsRankOutput: two ranks write to one terminal; each line
// of their logs says which rank wrote it (torchrun's and mpirun
// --tag-output's "[rank1]"), while rank 0's stdout stays bare so its last
// line is still the result a script reads.
func TestFulgurRunLabelsRankOutput(t *testing.T) {
	root := t.TempDir()
	res, log, err := fulgurRun(t, []string{"-nproc", "2"}, "", "-devices", "2", "-root", root)
	if err != nil {
		t.Fatalf("fulgur run: %v\n%s", err, log)
	}
	if res.WorldSize != 2 {
		t.Fatalf("result %+v, want world size 2", res)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if (strings.Contains(line, "elastic: ") || strings.Contains(line, "launcher: ")) && !strings.HasPrefix(line, "[rank") {
			continue // the launcher's own log
		}
		prefix, _, ok := strings.Cut(line, "] ")
		if !ok || (prefix != "[rank0" && prefix != "[rank1") {
			t.Errorf("a rank's line without its rank: %q", line)
			continue
		}
		seen[prefix+"]"]++
	}
	if seen["[rank0]"] == 0 || seen["[rank1]"] == 0 {
		t.Errorf("lines per rank %v, want some from each of rank 0 and 1; log:\n%s", seen, log)
	}
}

// TestFulgurRunTwoNodes: two "fulgur run" launchers on loopback, as two
// machines would run them (torchrun's --nnodes, --node-rank,
// --master-addr, --master-port), train one job whose weights equal those of
// one launcher running both ranks; options that cannot work across
// machines are refused by name.
func TestFulgurRunTwoNodes(t *testing.T) {
	want, log, err := fulgurRun(t, []string{"-nproc", "2"}, "", "-devices", "2", "-root", t.TempDir())
	if err != nil {
		t.Fatalf("one machine: %v\n%s", err, log)
	}
	ln, port, err := launch.Loopback(0)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // node 0's rank 0 binds it
	root := t.TempDir()
	cmds := make([]*exec.Cmd, 2)
	outs := make([]bytes.Buffer, 2)
	errs := make([]bytes.Buffer, 2)
	for node := range cmds {
		cmd := exec.Command(os.Args[0], asFulgur, "run", "-nnodes", "2", "-node-rank", strconv.Itoa(node), "-nproc", "1",
			"-master-addr", "127.0.0.1", "-master-port", strconv.Itoa(port), os.Args[0], "-devices", "1", "-num-nodes", "2", "-root", root)
		cmd.Env = append(os.Environ(), programEnv+"=1", "FULGUR_BACKEND=tcp", "FULGUR_TOKEN=two-nodes", "FULGUR_TIMEOUT=60s")
		cmd.Stdout, cmd.Stderr = &outs[node], &errs[node]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[node] = cmd
	}
	for node, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("node %d: %v\n%s", node, err, errs[node].String())
		}
	}
	if t.Failed() {
		return
	}
	var got programResult
	if err := json.Unmarshal([]byte(lastLine(outs[0].String())), &got); err != nil {
		t.Fatalf("node 0's last line is not the result: %v\n%s", err, outs[0].String())
	}
	if got != want {
		t.Errorf("two nodes: %+v, one node with two ranks: %+v", got, want)
	}
	if !strings.Contains(errs[1].String(), "[rank1] ") {
		t.Errorf("node 1's log does not name rank 1:\n%s", errs[1].String())
	}
	// Each launcher says which of the job's ranks it started (its
	// "world" counts its own).
	for node := range errs {
		if l := errs[node].String(); !strings.Contains(l, "job_world=2") || !strings.Contains(l, fmt.Sprintf("node_rank=%d", node)) || !strings.Contains(l, fmt.Sprintf("ranks=[%d]", node)) {
			t.Errorf("node %d's launcher does not say which ranks it started:\n%s", node, l)
		}
	}

	t.Setenv("FULGUR_TOKEN", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-nnodes", "2", "-node-rank", "2"}, "-node-rank is 2: use 0 to 1"},
		{[]string{"-nnodes", "2", "-max-restarts", "1"}, "restarts do not cross machines"},
		{[]string{"-nnodes", "2", "-nproc", "1:2"}, "restarts do not cross machines"},
		{[]string{"-nnodes", "2"}, "FULGUR_TOKEN is not set"},
		{[]string{"-nnodes", "0"}, "-nnodes is 0"},
		{[]string{"-node-rank", "1"}, "-node-rank is 1 but -nnodes is 1"},
	} {
		err := run(append(append([]string{"run"}, c.args...), os.Args[0]), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("fulgur run %v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// A -master-port that another process holds is an error naming the flag the
// user gave (not the MASTER_PORT variable the launcher sets for its ranks),
// on one machine and on node 0 of several.
func TestFulgurRunMasterPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	t.Setenv(programEnv, "1")
	t.Setenv("FULGUR_TOKEN", "t")
	t.Setenv("FULGUR_TIMEOUT", "5s")
	for _, flags := range [][]string{
		{"-nproc", "2", "-master-port", port},
		{"-nnodes", "2", "-node-rank", "0", "-nproc", "1", "-master-port", port},
	} {
		var errb bytes.Buffer
		err := run(append(append([]string{"run"}, flags...), os.Args[0], "-devices", "1", "-root", t.TempDir()), io.Discard, &errb)
		if err == nil {
			t.Fatalf("fulgur run %v: no error with the port taken", flags)
		}
		for _, want := range []string{"-master-port " + port, "in use", "leave -master-port out"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("fulgur run %v: error %q lacks %q", flags, err, want)
			}
		}
	}
}

// TestFulgurRunTwoNodesCtrlCOnOne: Ctrl-C to one machine's launcher stops
// the whole job (the ranks agree to stop and save); the other machine's
// launcher then reports a stopped job with the ranks' status (130), not a
// failed rank 0 with exit status 2.
func TestFulgurRunTwoNodesCtrlCOnOne(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real multi-process training jobs")
	}
	ln, port, err := launch.Loopback(0)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	root := t.TempDir()
	cmds := make([]*exec.Cmd, 2)
	errs := make([]bytes.Buffer, 2)
	for node := range cmds {
		cmd := exec.Command(os.Args[0], asFulgur, "run", "-nnodes", "2", "-node-rank", strconv.Itoa(node), "-nproc", "1",
			"-master-addr", "127.0.0.1", "-master-port", strconv.Itoa(port), os.Args[0], "-devices", "1", "-num-nodes", "2", "-root", root)
		cmd.Env = append(os.Environ(), programEnv+"=1", dieEnv+"=0:0:slow", "FULGUR_BACKEND=tcp", "FULGUR_TOKEN=two-nodes", "FULGUR_TIMEOUT=60s")
		cmd.Stdout, cmd.Stderr = io.Discard, &errs[node]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		cmds[node] = cmd
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(root, "*", "*", "checkpoints", "last.ckpt")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after 30 s:\n%s\n%s", errs[0].String(), errs[1].String())
		}
		time.Sleep(20 * time.Millisecond) // polling another process's files
	}
	cmds[1].Process.Signal(os.Interrupt)
	for node, cmd := range cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 130 {
				t.Errorf("node %d's fulgur run ended with %v, want exit status 130\n%s", node, err, errs[node].String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("node %d's fulgur run still ran 60 s after SIGINT:\n%s", node, errs[node].String())
		}
	}
	if s := errs[0].String(); !strings.Contains(s, "stopped") || strings.Contains(s, "elastic job failed") {
		t.Errorf("node 0's launcher does not report a stopped job:\n%s", s)
	}
	if m, _ := filepath.Glob(filepath.Join(root, "*", "*", "checkpoints", "interrupted.ckpt")); len(m) != 1 {
		t.Errorf("interrupted.ckpt: found %v, want one: the ranks did not save", m)
	}
}

// TestFulgurRunRefusesOneProcessStrategies: under a launcher each process
// is a rank; a one-process strategy (single, dp) made each of them train a
// whole job of its own as rank 0, into the same run directory, and the
// launcher reported success. Every rank now fails naming the strategy.
func TestFulgurRunRefusesOneProcessStrategies(t *testing.T) {
	for strat, devices := range map[string]string{"dp": "2", "single": "1"} {
		root := t.TempDir()
		_, log, err := fulgurRun(t, []string{"-nproc", "2"}, "", "-strategy", strat, "-devices", devices, "-root", root)
		if err == nil {
			t.Errorf("-strategy %s: fulgur run succeeded with two one-process jobs\n%s", strat, log)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, strat) || !strings.Contains(msg, "trains in one process") || !strings.Contains(msg, "WORLD_SIZE=2") {
			t.Errorf("-strategy %s: error %v, want one naming the strategy and WORLD_SIZE=2", strat, err)
		}
		if m, _ := filepath.Glob(filepath.Join(root, "*", "*", "checkpoints", "*.ckpt")); len(m) > 0 {
			t.Errorf("-strategy %s: checkpoints %v written", strat, m)
		}
	}
}

// TestFulgurRunRefusesFewerRanksThanDevices: a program asking for more
// devices than fulgur run started trained silently on the smaller world in
// the first attempt (a smaller world is only a restart's retired slots);
// it is now the mismatch error naming both numbers.
func TestFulgurRunRefusesFewerRanksThanDevices(t *testing.T) {
	_, log, err := fulgurRun(t, []string{"-nproc", "2"}, "", "-devices", "3", "-root", t.TempDir())
	if err == nil {
		t.Fatalf("fulgur run -nproc 2 trained a program with -devices 3\n%s", log)
	}
	if !strings.Contains(err.Error(), "fulgur run started 2 processes, but Devices × NumNodes is 3 × 1 = 3") {
		t.Errorf("error %v, want the mismatch of 2 processes and 3 devices", err)
	}
}

// A machine other than node 0 started without -master-addr looks for rank
// 0 on itself, and its ranks wait the whole timeout for it: the launcher
// warns at once; given, even as 127.0.0.1 (two launchers on one host), it
// does not.
func TestFulgurRunWarnsWithoutMasterAddr(t *testing.T) {
	t.Setenv("FULGUR_TOKEN", "t")
	for _, tc := range []struct {
		flags []string
		warn  bool
	}{
		{[]string{"-nnodes", "2", "-node-rank", "1", "-nproc", "1"}, true},
		{[]string{"-nnodes", "2", "-node-rank", "1", "-nproc", "1", "-master-addr", "127.0.0.1"}, false},
		{[]string{"-nnodes", "2", "-node-rank", "0", "-nproc", "1"}, false},
	} {
		var errb bytes.Buffer
		// true exits at once: only the launcher's own lines matter here.
		run(append(append([]string{"run"}, tc.flags...), "true"), io.Discard, &errb)
		if got := strings.Contains(errb.String(), "-master-addr is not given"); got != tc.warn {
			t.Errorf("fulgur run %v: warned %v, want %v:\n%s", tc.flags, got, tc.warn, errb.String())
		}
	}
}

// FULGUR_MAX_RESTARTS left exported from a one-machine elastic run (the
// README's self-launch line) makes a -nnodes job's launcher refuse to
// start: the error names the variable the user set, and that unsetting it
// is the fix, not a -max-restarts flag that was never given.
func TestFulgurRunSeveralMachinesNamesMaxRestartsFromTheEnvironment(t *testing.T) {
	t.Setenv("FULGUR_TOKEN", "t")
	t.Setenv("FULGUR_MAX_RESTARTS", "3")
	err := run([]string{"run", "-nnodes", "2", "-node-rank", "0", "-nproc", "1", os.Args[0]}, io.Discard, io.Discard)
	for _, want := range []string{"FULGUR_MAX_RESTARTS=3", "restarts do not cross machines", "unset FULGUR_MAX_RESTARTS"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("fulgur run -nnodes 2 with FULGUR_MAX_RESTARTS=3: error %v, want one containing %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "-max-restarts 3") {
		t.Errorf("error %v names a -max-restarts flag that was not given", err)
	}
}
