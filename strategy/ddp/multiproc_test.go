package ddp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// inProcess runs the test program as n in-process DDP ranks over inproc and
// returns rank 0's result. They reduce their gradient buckets after the
// backward pass (NoOverlap): the processes compared with them overlap (the
// default) and must end with the same weights, bit for bit.
func inProcess(t *testing.T, n int, args ...string) programResult {
	t.Helper()
	return inProcessBuckets(t, n, 0, args...)
}

// inProcessBuckets is inProcess with buckets of at most bucketBytes (0:
// the default).
func inProcessBuckets(t *testing.T, n, bucketBytes int, args ...string) programResult {
	t.Helper()
	group, err := inproc.NewGroup(n, inproc.Timeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	outs := make([]bytes.Buffer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		d, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r], BucketBytes: bucketBytes, NoOverlap: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = runProgram(context.Background(), args, &outs[r], d)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return parseResult(t, outs[0].String())
}

func parseResult(t *testing.T, out string) programResult {
	t.Helper()
	var res programResult
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("no result line in the output %q: %v", out, err)
	}
	return res
}

// TestDDPTrainerMatchesSingle runs whole Fits through the trainer: two DDP
// ranks with batch 4 (the distributed sampler inserted by the trainer) and
// one process with batch 8 visit the same examples per step, so they end
// with the same parameters within float32 tolerance.
func TestDDPTrainerMatchesSingle(t *testing.T) {
	got := inProcess(t, 2, "-batch", "4", "-rows", "96")
	var out bytes.Buffer
	if err := runProgram(context.Background(), []string{"-batch", "8", "-rows", "96"}, &out, nil); err != nil {
		t.Fatal(err)
	}
	want := parseResult(t, out.String())
	if got.GlobalStep != want.GlobalStep || got.GlobalStep != 24 {
		t.Fatalf("ddp took %d steps, single %d, want 24", got.GlobalStep, want.GlobalStep)
	}
	worst := 0.0
	for i := range want.Params {
		worst = math.Max(worst, math.Abs(float64(got.Params[i]-want.Params[i]))/(1e-3+math.Abs(float64(want.Params[i]))))
	}
	t.Logf("largest relative difference after 24 Adam steps: %.3g", worst)
	if worst > 1e-4 {
		t.Errorf("ddp 2×4 and single 8 differ by %g (relative) after 24 steps", worst)
	}
}

type run struct {
	stdout, stderr string
	err            error
	took           time.Duration
	ended          time.Time // when the process exited
}

// startProgram runs the test binary as a training program, with marker in
// its environment so that its descendants can be found afterwards.
func startProgram(t *testing.T, marker string, extraEnv []string, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), programEnv+"=1", "FULGUR_TEST_MARKER="+marker, "FULGUR_TIMEOUT=60s")
	cmd.Env = append(cmd.Env, extraEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	return run{stdout: out.String(), stderr: errb.String(), err: err, took: time.Since(t0), ended: time.Now()}
}

func newMarker(t *testing.T) string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// survivors lists processes whose environment holds marker, waiting up to
// 10 s for dying ones to go (a killed process's children are killed by the
// kernel, asynchronously).
func survivors(t *testing.T, marker string) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var found []string
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			env, err := os.ReadFile(d + "/environ")
			if err != nil || !bytes.Contains(env, []byte("FULGUR_TEST_MARKER="+marker)) {
				continue
			}
			found = append(found, filepath.Base(d))
		}
		if len(found) == 0 || time.Now().After(deadline) {
			return found
		}
		time.Sleep(50 * time.Millisecond) // polling other processes, not goroutines
	}
}

func needLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("multi-process tests use /proc and PDEATHSIG (Linux)")
	}
	if testing.Short() {
		t.Skip("multi-process tests skipped with -short")
	}
}

func TestDDPMultiProcessMatchesInProcess(t *testing.T) {
	needLinux(t)
	want := inProcess(t, 2)
	// 104-byte buckets (0.0001 MiB): several per step, the first ones
	// queued during the backward pass.
	wantSmall := inProcessBuckets(t, 2, 104)
	for _, tc := range []struct {
		strategy string
		backend  string
		bucketMB string
	}{
		{"ddp", "tcp", ""},
		{"ddp", "auto", ""},
		{"ddp", "hier", ""}, // one node: connects as auto does
		{"ddp", "tcp", "0.0001"},
		{"ddp", "shm", "0.0001"},
		{"ddp", "tcp", "0.0001 " + ddp.EnvOverlap + "=0"},
		{"ddp_spawn", "auto", ""},
		// ZeRO updates each element as DDP does, from the same reduced
		// gradient: two ranks end bit-identical to DDP's.
		{"sharded", "auto", ""},
		{"sharded_stage1", "tcp", "0.0001"},
	} {
		t.Run(tc.strategy+"/"+tc.backend+"/bucket-mb="+tc.bucketMB, func(t *testing.T) {
			env := []string{"FULGUR_BACKEND=" + tc.backend}
			want := want
			if tc.bucketMB != "" {
				mb, extra, _ := strings.Cut(tc.bucketMB, " ")
				env = append(env, ddp.EnvBucketMB+"="+mb)
				if extra != "" {
					env = append(env, extra)
				}
				want = wantSmall
			}
			marker := newMarker(t)
			r := startProgram(t, marker, env, "-strategy", tc.strategy, "-devices", "2", "-log-stderr")
			if r.err != nil {
				t.Fatalf("%s: %v\n%s", tc.strategy, r.err, r.stderr)
			}
			got := parseResult(t, r.stdout)
			if got.SHA256 != want.SHA256 {
				t.Errorf("weights %s, in-process ranks over inproc give %s", got.SHA256, want.SHA256)
			}
			// Rank 0 says which backend auto chose (the ranks share this
			// host: shared memory), once; a backend named is not announced.
			said := strings.Count(r.stderr, "FULGUR_BACKEND=auto: shared memory between the 2 ranks")
			if tc.strategy == "ddp" && tc.backend == "auto" && said != 1 || tc.backend == "tcp" && said != 0 {
				t.Errorf("rank 0's output says %d times that auto chose shared memory:\n%s", said, r.stderr)
			}
			// ddp_spawn validates after Fit in one process: another summation order.
			if got.WorldSize != 2 || got.GlobalStep != want.GlobalStep || math.Abs(got.ValLoss-want.ValLoss) > 1e-6*math.Abs(want.ValLoss) {
				t.Errorf("result %+v, in-process %+v", got, want)
			}
			if left := survivors(t, marker); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
			t.Logf("%s over %s: %v", tc.strategy, tc.backend, r.took)
		})
	}
}

// A rank stopped (SIGSTOP) mid-training is named by rank 0 within
// FULGUR_TIMEOUT and does not outlive the job: a stopped process cannot
// run its own watch for the end of rank 0 (it outlived the job, stopped,
// before rank 0 killed it).
func TestDDPStoppedRankEnds(t *testing.T) {
	needLinux(t)
	marker := newMarker(t)
	r := startProgram(t, marker, []string{"FULGUR_TIMEOUT=3s"}, "-strategy", "ddp", "-devices", "2", "-stop-rank", "1", "-die-batch", "3")
	if r.err == nil {
		t.Fatalf("the run succeeded although rank 1 stopped:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "rank 1") {
		t.Errorf("the error does not name rank 1:\n%s", r.stderr)
	}
	left := survivors(t, marker)
	for _, p := range left {
		if pid, err := strconv.Atoi(p); err == nil {
			kill(pid)
		}
	}
	if len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
	t.Logf("stderr: %s", lastLines(r.stderr, 3))
}

func TestDDPKilledProcess(t *testing.T) {
	needLinux(t)
	for _, tc := range []struct {
		strategy string
		victim   string
	}{
		{"ddp", "1"},       // a child rank crashes: rank 0 must say which
		{"ddp", "0"},       // the parent crashes: its children must not survive it
		{"ddp_spawn", "1"}, // a worker crashes: the launching process must say which
	} {
		t.Run(tc.strategy+"/rank"+tc.victim, func(t *testing.T) {
			marker := newMarker(t)
			r := startProgram(t, marker, nil, "-strategy", tc.strategy, "-devices", "2", "-die-rank", tc.victim, "-die-batch", "3")
			if r.err == nil {
				t.Fatalf("the run succeeded although rank %s died:\n%s", tc.victim, r.stderr)
			}
			if r.took > 60*time.Second {
				t.Errorf("took %v to fail", r.took)
			}
			if tc.victim != "0" || tc.strategy == "ddp_spawn" {
				if !strings.Contains(r.stderr, "rank "+tc.victim) {
					t.Errorf("the error does not name rank %s:\n%s", tc.victim, r.stderr)
				}
			}
			if left := survivors(t, marker); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
			t.Logf("stderr: %s", lastLines(r.stderr, 3))
		})
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// TestDDPEvaluateAfterFitOnFreshValue fits with self-launched ddp, then
// predicts and validates on a module value built again: the ranks that
// trained evaluate the trained weights (no relaunch), and Predict returns
// every row in dataset order.
func TestDDPEvaluateAfterFitOnFreshValue(t *testing.T) {
	needLinux(t)
	want := inProcess(t, 2)
	for _, st := range []string{"ddp", "ddp_spawn"} {
		t.Run(st, func(t *testing.T) {
			marker := newMarker(t)
			root := t.TempDir()
			r := startProgram(t, marker, nil, "-strategy", st, "-devices", "2", "-fresh", "-root", root)
			if r.err != nil {
				t.Fatalf("%v\n%s", r.err, r.stderr)
			}
			got := parseResult(t, r.stdout)
			if got.SHA256 != want.SHA256 {
				t.Fatalf("trained weights %s, in-process %s", got.SHA256, want.SHA256)
			}
			// Validate logs into the Fit's run directory, once, also where
			// the Fit ran in other processes (ddp_spawn).
			csv, err := os.ReadFile(filepath.Join(root, "lightning_logs", "version_0", "metrics.csv"))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(csv), trainer.FormatValue(got.ValLoss)); n != 1 {
				t.Errorf("metrics.csv holds Validate's val_loss %v %d times, want once:\n%s", got.ValLoss, n, csv)
			}
			if math.Abs(got.ValLoss-want.ValLoss) > 1e-6*math.Abs(want.ValLoss) {
				t.Errorf("val_loss on a fresh module value %g, on the fitted value in-process %g", got.ValLoss, want.ValLoss)
			}
			ref := predictWith(t, got.Params)
			if len(got.Preds) != len(ref) {
				t.Fatalf("%d predicted values, want %d (90 rows × 2)", len(got.Preds), len(ref))
			}
			for i := range ref {
				if math.Abs(float64(got.Preds[i]-ref[i])) > 1e-5 {
					t.Fatalf("prediction value %d (row %d) is %g, one process with the trained weights gives %g", i, i/2, got.Preds[i], ref[i])
				}
			}
			if left := survivors(t, marker); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
		})
	}
}

// predictWith predicts the program's validation rows in one process with
// the given parameters and buffers.
func predictWith(t *testing.T, params []float32) []float32 {
	t.Helper()
	ds, err := strategytest.Regression(90, 6, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(trainer.Config{Out: io.Discard, EnableProgressBar: trainer.Bool(false), DefaultRootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	m := &strategytest.MLP{In: 6, Hidden: 16, Out: 2}
	if _, err := tr.Validate(context.Background(), m, l); err != nil {
		t.Fatal(err)
	}
	copy(tr.Store().Data32(), params)
	ys, err := tr.Predict(context.Background(), m, l)
	if err != nil {
		t.Fatal(err)
	}
	var out []float32
	for _, y := range ys {
		out = append(out, y.Float32s()...)
	}
	return out
}

// TestDDPPanicOnRankNamesItsLog: a step panicking on rank 1 of a
// self-launched job ends rank 0 with an error naming rank 1 and its
// rank_1.log, which holds the panic and the user's file:line. sharded and
// fsdp start their ranks through ddp; their rank 0 said only "rank 1's
// process is gone".
func TestDDPPanicOnRankNamesItsLog(t *testing.T) {
	needLinux(t)
	for _, strat := range []string{"ddp", "sharded", "fsdp"} {
		t.Run(strat, func(t *testing.T) {
			marker := newMarker(t)
			root := t.TempDir()
			r := startProgram(t, marker, nil, "-strategy", strat, "-devices", "2", "-panic-rank", "1", "-root", root)
			if r.err == nil {
				t.Fatalf("the run succeeded although rank 1 panicked:\n%s", r.stderr)
			}
			// The ranks' output goes into the run's directory (the trainer's
			// State.LogDir), beside its checkpoints and metrics.
			logPath := filepath.Join(root, "lightning_logs", "version_0", "rank_1.log")
			for _, s := range []string{"rank 1", logPath, "user step failed on rank 1"} {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("rank 0's error does not contain %q:\n%s", s, r.stderr)
				}
			}
			b, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), "user step failed on rank 1") || !strings.Contains(string(b), "main_test.go:") {
				t.Errorf("rank_1.log lacks the panic and the user's file:line:\n%s", b)
			}
			if left := survivors(t, marker); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
		})
	}
}

// TestRankReturningEarlyIsNamed: rank 1's program returns normally after
// Fit (it printed an error and returned, say) while rank 0 goes on to
// Validate. Rank 0's error said only "rank 1's process is gone"; it now
// names rank 1's normal exit, its rank_1.log and the log's last line.
func TestRankReturningEarlyIsNamed(t *testing.T) {
	needLinux(t)
	for _, strat := range []string{"ddp", "fsdp"} {
		t.Run(strat, func(t *testing.T) {
			marker := newMarker(t)
			root := t.TempDir()
			r := startProgram(t, marker, nil, "-strategy", strat, "-devices", "2", "-quit-rank", "1", "-root", root)
			if r.err == nil {
				t.Fatalf("the run succeeded although rank 1 returned before Validate:\n%s", r.stderr)
			}
			logPath := filepath.Join(root, "lightning_logs", "version_0", "rank_1.log")
			for _, s := range []string{"rank 1", "exited normally", logPath, "rank 1 gives up after Fit"} {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("rank 0's error does not contain %q:\n%s", s, r.stderr)
				}
			}
			if left := survivors(t, marker); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
		})
	}
}

// TestVersionDirIsRankZerosOnEveryRank: a program that names its run
// directory with trainer.VersionDir (for its loggers, a DeviceStatsMonitor
// or Plots) runs again in every self-launched rank, after rank 0 has made
// version_0 for the ranks' logs: rank 1 got version_1, and its files went
// apart from the run. Every rank now gets rank 0's.
func TestVersionDirIsRankZerosOnEveryRank(t *testing.T) {
	needLinux(t)
	marker := newMarker(t)
	root, out := t.TempDir(), filepath.Join(t.TempDir(), "versiondir")
	r := startProgram(t, marker, nil, "-strategy", "ddp", "-devices", "2", "-epochs", "1", "-root", root, "-versiondir", out)
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	want := filepath.Join(root, "lightning_logs", "version_0")
	for rank := range 2 {
		b, err := os.ReadFile(out + ".rank" + strconv.Itoa(rank))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Errorf("rank %d: VersionDir is %s, want rank 0's %s", rank, b, want)
		}
	}
}

// TestDDPRanksFinishAfterRank0Returns: rank 0's program ends (without
// Teardown) while rank 1 still works; rank 1 is not killed and finishes.
func TestDDPRanksFinishAfterRank0Returns(t *testing.T) {
	needLinux(t)
	marker := newMarker(t)
	done := filepath.Join(t.TempDir(), "rank1.done")
	r := startProgram(t, marker, nil, "-strategy", "ddp", "-devices", "2", "-after-rank0", done)
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	// Rank 1 writes the file only once rank 0's process is gone.
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(done)
		if err == nil && strings.HasSuffix(string(b), "returned\n") {
			break
		}
		if time.Now().After(deadline) || len(survivors(t, marker)) == 0 {
			if b, err := os.ReadFile(done); err == nil && strings.HasSuffix(string(b), "returned\n") {
				break
			}
			t.Fatalf("rank 1 did not finish after rank 0 returned (killed with it?)")
		}
		time.Sleep(20 * time.Millisecond) // polling another process's file
	}
	if left := survivors(t, marker); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
}

// ddp_spawn hands the callbacks' state back with the weights: in the
// process that called Fit, ModelCheckpoint knows the best checkpoint and
// EarlyStopping why it stopped, as after a single-process Fit.
func TestDDPSpawnReturnsCallbackState(t *testing.T) {
	needLinux(t)
	for _, strat := range []string{"single", "ddp_spawn"} {
		t.Run(strat, func(t *testing.T) {
			dir := t.TempDir()
			r := startProgram(t, newMarker(t), nil, "-strategy", strat, "-devices", map[string]string{"single": "1", "ddp_spawn": "2"}[strat], "-epochs", "3", "-ckpt-dir", dir)
			if r.err != nil {
				t.Fatalf("%v\n%s", r.err, r.stderr)
			}
			got := parseResult(t, r.stdout)
			if want := filepath.Join(dir, "epoch=0.ckpt"); got.BestModelPath != want {
				t.Errorf("BestModelPath %q, want %q", got.BestModelPath, want)
			}
			if _, err := os.Stat(got.BestModelPath); err != nil {
				t.Errorf("the best checkpoint: %v", err)
			}
			if !(got.BestModelScore > 0) || got.StoppedEpoch != 0 || !strings.Contains(got.StopReason, "train_loss_epoch") {
				t.Errorf("best score %v, stopped at epoch %d for %q; want a positive loss, epoch 0 and a reason naming train_loss_epoch", got.BestModelScore, got.StoppedEpoch, got.StopReason)
			}
		})
	}
}

// When a ddp_spawn worker dies, the launching process's Fit fails: its
// callbacks' OnException runs there, the only hook of the Fit it sees.
func TestDDPSpawnExceptionHookInLaunchingProcess(t *testing.T) {
	needLinux(t)
	log := filepath.Join(t.TempDir(), "hooks")
	marker := newMarker(t)
	r := startProgram(t, marker, nil, "-strategy", "ddp_spawn", "-devices", "2", "-die-rank", "1", "-die-batch", "3", "-hook-log", log)
	if r.err == nil {
		t.Fatalf("the run succeeded although rank 1 died:\n%s", r.stderr)
	}
	b, err := os.ReadFile(log + ".end")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(string(b), "\n"); !slices.Equal(got, []string{"OnException"}) {
		t.Errorf("the launching process's hooks %v, want OnException only", got)
	}
	if left := survivors(t, marker); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
}

// Under ddp_spawn each worker calls the training hooks, in Lightning's
// order, as one process does; the launching process, which trains nothing,
// calls none of them (as Lightning's main process under ddp_spawn), and
// then the hooks of the Validate it runs itself.
func TestDDPSpawnWorkersCallTheHooks(t *testing.T) {
	needLinux(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "hooks")
	r := startProgram(t, newMarker(t), nil, "-strategy", "ddp_spawn", "-devices", "2", "-epochs", "2", "-hook-log", log)
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	// 90 rows, 45 a rank, in batches of 4: 12 batches an epoch.
	want := []string{"OnFitStart", "OnTrainStart"}
	for range 2 {
		want = append(want, "OnTrainEpochStart")
		for range 12 {
			want = append(want, "OnTrainBatchStart", "OnBeforeBackward", "OnBeforeOptimizerStep", "OnAfterOptimizerStep", "OnTrainBatchEnd")
		}
		want = append(want, "OnTrainEpochEnd")
	}
	want = append(want, "OnTrainEnd", "OnFitEnd")
	for _, f := range []struct {
		suffix string
		want   []string
	}{
		{".rank0", want}, {".rank1", want},
		{".end", []string{"OnValidationEnd"}}, // the launching process
	} {
		b, err := os.ReadFile(log + f.suffix)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Split(string(b), "\n"); !slices.Equal(got, f.want) {
			t.Errorf("%s: hooks %v, want %v", f.suffix, got, f.want)
		}
	}
}
