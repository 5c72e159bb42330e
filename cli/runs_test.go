package cli_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/cli"
)

// runIn runs the mlp example in root with args and returns its summary and
// what it wrote to stderr.
func runIn(t *testing.T, root string, args ...string) (cli.Summary, string) {
	t.Helper()
	base := []string{"-no-progress-bar", "-seed", "3", "-deterministic", "-limit-test-batches", "2", "-limit-val-batches", "2"}
	return run(t, mlpApp(root), append(base, args...)...)
}

func list(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func TestRunWritesLogsCheckpointsAndResumes(t *testing.T) {
	root := t.TempDir()
	s, stderr := runIn(t, root, "-max-steps", "20", "-ckpt-every-n-steps", "10", "-loggers", "csv,tensorboard,jsonl", "-profiler", "simple")
	run := filepath.Join(root, "lightning_logs", "version_0")
	if s.RunDir != run || s.GlobalStep != 20 {
		t.Fatalf("summary %+v", s)
	}
	files := list(t, run)
	want := []string{"checkpoints", "hparams.json", "hparams.yaml", "metrics.csv", "metrics.jsonl", "plots", "report.md"}
	if len(files) != 8 || !strings.HasPrefix(files[1], "events.out.tfevents.") {
		t.Errorf("run dir holds %v, want %v and an event file", files, want)
	}
	if pngs, _ := filepath.Glob(filepath.Join(run, "plots", "loss*.png")); len(pngs) == 0 {
		t.Errorf("no loss chart in %s/plots", run)
	}
	if got := list(t, filepath.Join(run, "checkpoints")); strings.Join(got, " ") != "epoch=0-step=20.ckpt last.ckpt" {
		t.Errorf("checkpoints %v", got)
	}
	hp, _ := os.ReadFile(filepath.Join(run, "hparams.yaml"))
	if !strings.Contains(string(hp), "batch_size: 64\n") || !strings.Contains(string(hp), "seed: 3\n") {
		t.Errorf("hparams.yaml:\n%s", hp)
	}
	// The simple profiler's table covers the loop and the hooks.
	for _, w := range []string{"% OF FIT", "data fetch", "forward+backward", "optimizer step", "callbacks/ModelCheckpoint.OnTrainBatchEnd", "checkpoint save", " fit |"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if !strings.Contains(stderr, "Trainable params") {
		t.Errorf("no model summary in stderr")
	}

	// Resuming from the newest checkpoint ("last") to step 40 gives the
	// weights of an uninterrupted 40-step run.
	resumed, _ := runIn(t, root, "-max-steps", "40", "-ckpt-path", "last", "-no-model-summary")
	straight, _ := runIn(t, t.TempDir(), "-max-steps", "40", "-no-model-summary")
	if resumed.GlobalStep != 40 || resumed.WeightsSHA256 != straight.WeightsSHA256 {
		t.Errorf("resumed: step %d, %s; uninterrupted: %s", resumed.GlobalStep, resumed.WeightsSHA256, straight.WeightsSHA256)
	}
	if resumed.RunDir != filepath.Join(root, "lightning_logs", "version_1") {
		t.Errorf("resumed run dir %s, want version_1", resumed.RunDir)
	}
	// With no checkpoint under the root, "last" starts from scratch.
	fresh, _ := runIn(t, t.TempDir(), "-max-steps", "40", "-ckpt-path", "last", "-no-model-summary", "-loggers", "none", "-no-checkpoint")
	if fresh.WeightsSHA256 != straight.WeightsSHA256 || fresh.RunDir != "" {
		t.Errorf("fresh run with -ckpt-path last: %+v", fresh)
	}
}

// TestRunMonitorsBareMetricName: the mlp logs train_loss per step and per
// epoch (train_loss_step, train_loss_epoch); -ckpt-monitor train_loss
// ranks by the epoch value, as Lightning's monitor does. It was refused
// as "not logged".
func TestRunMonitorsBareMetricName(t *testing.T) {
	root := t.TempDir()
	s, stderr := runIn(t, root, "-max-epochs", "2", "-limit-train-batches", "3", "-ckpt-monitor", "train_loss", "-ckpt-top-k", "2", "-loggers", "csv")
	if s.GlobalStep != 6 {
		t.Fatalf("summary %+v\nstderr:\n%s", s, stderr)
	}
	got := list(t, filepath.Join(s.RunDir, "checkpoints"))
	if len(got) != 3 || !strings.Contains(strings.Join(got, " "), "epoch=0-step=3") || !strings.Contains(strings.Join(got, " "), "epoch=1-step=6") {
		t.Errorf("checkpoints %v: want both epochs' and last.ckpt", got)
	}
}

// With a checkpoint every step, -ckpt-monitor train_loss keeps the step
// whose logged loss (train_loss_step in metrics.csv) is the lowest, in
// either epoch: mid-epoch the bare name is the step's value, as in
// Lightning's callback_metrics. Before, every step of the second epoch was
// scored with the first epoch's mean, so the best checkpoint stayed in the
// first epoch while later steps had lower losses.
func TestRunMonitorsBareMetricNameEveryStep(t *testing.T) {
	root := t.TempDir()
	s, stderr := runIn(t, root, "-max-epochs", "2", "-limit-train-batches", "8", "-ckpt-every-n-steps", "1", "-ckpt-monitor", "train_loss",
		"-ckpt-top-k", "1", "-log-every-n-steps", "1", "-loggers", "csv", "-no-plots")
	if s.GlobalStep != 16 {
		t.Fatalf("summary %+v\nstderr:\n%s", s, stderr)
	}
	f, err := os.Open(filepath.Join(s.RunDir, "metrics.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	best, bestLoss := "", math.Inf(1)
	for _, r := range rows[1:] {
		if r[col["train_loss_step"]] == "" {
			continue
		}
		v, err := strconv.ParseFloat(r[col["train_loss_step"]], 64)
		if err != nil {
			t.Fatal(err)
		}
		if v < bestLoss {
			best, bestLoss = r[col["step"]], v
		}
	}
	got := list(t, filepath.Join(s.RunDir, "checkpoints"))
	if len(got) != 2 || !strings.HasSuffix(got[0], "-step="+best+".ckpt") {
		t.Errorf("checkpoints %v: want the one of step %s (train_loss_step %g, the lowest) and last.ckpt", got, best, bestLoss)
	}
}

func TestRunTimelineAndAdvancedProfilers(t *testing.T) {
	root := t.TempDir()
	_, stderr := runIn(t, root, "-max-steps", "5", "-profiler", "timeline", "-no-model-summary", "-loggers", "none", "-no-checkpoint")
	b, err := os.ReadFile(filepath.Join(root, "profiles", "timeline.json"))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var tr struct {
		TraceEvents []struct {
			Name string  `json:"name"`
			Ph   string  `json:"ph"`
			Pid  int     `json:"pid"`
			Dur  float64 `json:"dur"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("timeline.json does not parse: %v", err)
	}
	n := map[string]int{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" && e.Pid == 0 {
			n[e.Name]++
		}
	}
	if n["forward+backward"] != 5 || n["optimizer step"] != 5 || n["fit"] != 1 {
		t.Errorf("span counts %v", n)
	}
	if !strings.Contains(stderr, "timeline: ") {
		t.Errorf("no timeline report in stderr:\n%s", stderr)
	}
	root = t.TempDir()
	runIn(t, root, "-max-steps", "5", "-profiler", "advanced", "-no-model-summary", "-loggers", "none", "-no-checkpoint")
	for _, f := range []string{"cpu-fit.pprof", "heap-fit.pprof", "cpu-test.pprof"} {
		if _, err := os.Stat(filepath.Join(root, "profiles", f)); err != nil {
			t.Error(err)
		}
	}
}

func TestRunFlagErrors(t *testing.T) {
	j := mlpApp(t.TempDir())
	err := j.Run(context.Background(), []string{"-loggers", "csv,wandb", "-ckpt-mode", "avg", "-ckpt-top-k", "3", "-max-time", "-1s"})
	for _, w := range []string{`-loggers names "wandb"`, `-ckpt-mode is "avg"`, "-ckpt-top-k is 3 but -ckpt-monitor is empty", "-max-time is -1s: use a value >= 0"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("err = %v, want %q", err, w)
		}
	}
	root := t.TempDir()
	for ckpt, fix := range map[string]string{filepath.Join(t.TempDir(), "nope.ckpt"): `or "last" or "best"`, "best": "train first, or pass a checkpoint file"} {
		err = mlpApp(root).Run(context.Background(), []string{"-ckpt-path", ckpt})
		if err == nil || !strings.Contains(err.Error(), "-ckpt-path "+ckpt) || !strings.Contains(err.Error(), fix) {
			t.Errorf("-ckpt-path %s: err = %v, want the flag, the value and %q", ckpt, err, fix)
		}
	}
	// Refused before anything was built: no run directory.
	if _, err := os.Stat(filepath.Join(root, "lightning_logs")); !os.IsNotExist(err) {
		t.Errorf("a refused -ckpt-path left %s/lightning_logs: %v", root, err)
	}
}

// TestRunContinuesElasticRun: in a restarted elastic job (its first
// attempt recorded its run directory with the launcher) the run goes on in
// that directory, not in a new version_N.
func TestRunContinuesElasticRun(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	first := filepath.Join(root, "lightning_logs", "version_0")
	if err := os.MkdirAll(first, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "run_dir"), []byte(first), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FULGUR_ELASTIC_DIR", state)
	t.Setenv("FULGUR_RESTART_COUNT", "1")
	s, _ := runIn(t, root, "-max-steps", "4", "-loggers", "csv", "-no-model-summary")
	if s.RunDir != first {
		t.Errorf("run directory %q, want the first attempt's %q", s.RunDir, first)
	}
	if _, err := os.Stat(filepath.Join(first, "metrics.csv")); err != nil {
		t.Errorf("the restarted run logged elsewhere: %v", err)
	}
}

// TestElasticSelfLaunchKeepsOneRunDirectory: a ddp program run with
// FULGUR_MAX_RESTARTS supervises its ranks from the process the user
// started, which runs the program's code up to Fit; the job still makes
// one run directory, holding hparams.yaml, metrics.csv and the
// checkpoints (the supervisor wrote the hyperparameters into a version_0
// of its own, and the ranks trained in version_1).
func TestElasticSelfLaunchKeepsOneRunDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts training processes")
	}
	root := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"-devices", "2", "-strategy", "ddp", "-max-steps", "3", "-limit-val-batches", "1",
		"-limit-test-batches", "1", "-no-progress-bar", "-no-plots", "-loggers", "csv,tensorboard", "-root-dir", root}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), programEnv+"=1", "FULGUR_TIMEOUT=60s", "FULGUR_MAX_RESTARTS=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errb.String())
	}
	if !strings.Contains(errb.String(), "supervises") {
		t.Fatalf("the process did not supervise the job (FULGUR_MAX_RESTARTS ignored?):\n%s", errb.String())
	}
	runs, err := filepath.Glob(filepath.Join(root, "lightning_logs", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("run directories %v, want one", runs)
	}
	for _, f := range []string{"hparams.yaml", "metrics.csv", filepath.Join("checkpoints", "last.ckpt")} {
		if _, err := os.Stat(filepath.Join(runs[0], f)); err != nil {
			t.Errorf("the run directory lacks %s: %v", f, err)
		}
	}
}
