package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// statSyncProbe is the small ResNet, recording what each training graph's
// layers were given to sync BatchNorm with.
type statSyncProbe struct {
	*models.ResNet
	mu   sync.Mutex
	seen []string
}

func (p *statSyncProbe) TrainingStep(s *module.Step) (*G.Node, error) {
	if s.Summarizing() {
		return p.ResNet.TrainingStep(s) // the model summary's shapes graph never runs
	}
	p.mu.Lock()
	if ss := s.StatSync(); ss == nil {
		p.seen = append(p.seen, "none")
	} else {
		p.seen = append(p.seen, fmt.Sprintf("all=%v size=%d", ss.All(), ss.Size()))
	}
	p.mu.Unlock()
	return p.ResNet.TrainingStep(s)
}

// -sync-batchnorm reaches every replica's training graph through the
// trainer, the strategy and the engine; without it layers can still opt in
// (all=false), and one device has nothing to sync with.
func TestSyncBatchNormFlagReachesLayers(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-devices", "2", "-strategy", "dp", "-sync-batchnorm"}, "all=true size=2,all=true size=2"},
		{[]string{"-devices", "2", "-strategy", "dp"}, "all=false size=2,all=false size=2"},
		{[]string{"-devices", "1", "-sync-batchnorm"}, "none"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			probe := &statSyncProbe{ResNet: &models.ResNet{Config: nn.ResNetConfig{BlocksPerStage: 1, Widths: []int{4, 8, 16}}}}
			app := cli.App{Name: "resnet", Model: probe, Data: &cli.FashionMNIST{BatchSize: 16},
				Trainer: cli.Settings{MaxEpochs: 1, RootDir: t.TempDir()}}
			args := append([]string{"-no-progress-bar", "-max-steps", "2", "-limit-val-batches", "1", "-limit-test-batches", "1"}, tc.args...)
			s, _ := run(t, app, args...)
			if got := strings.Join(probe.seen, ","); got != tc.want {
				t.Fatalf("training graphs saw %q, want %q", got, tc.want)
			}
			if s.GlobalStep != 2 {
				t.Fatalf("summary %+v", s)
			}
		})
	}
}

// A two-process DDP run of the resnet program with -sync-batchnorm trains
// and prints its summary; its weights differ from the same run without the
// flag, so the flag reached both processes' layers (had only one rank
// synced, the ranks' collectives would not have matched and the run would
// have failed).
func TestSyncBatchNormDDPProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts training processes")
	}
	synced := runTwoProcesses(t, t.TempDir(), "ddp", "-sync-batchnorm")
	local := runTwoProcesses(t, t.TempDir(), "ddp")
	if synced.WeightsSHA256 == local.WeightsSHA256 {
		t.Fatal("-sync-batchnorm changed nothing: the weights are the same as without it")
	}
}

// runTwoProcesses runs the resnet program for 3 steps on 2 processes under
// strategy (seed 3) in root and returns its summary, after checking its
// figures.
func runTwoProcesses(t *testing.T, root, strategy string, extra ...string) cli.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"-devices", "2", "-strategy", strategy, "-max-steps", "3", "-limit-val-batches", "1",
		"-limit-test-batches", "1", "-no-progress-bar", "-seed", "3", "-root-dir", root}, extra...)
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), programEnv+"=1", "FULGUR_TIMEOUT=60s")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errb.String())
	}
	s := summaryOf(t, out.String())
	if s.WorldSize != 2 || s.GlobalStep != 3 || s.Strategy != strategy || len(s.WeightsSHA256) != 64 {
		t.Fatalf("%v: summary %+v", args, s)
	}
	return s
}

// Two fsdp processes (ranks holding shards of the weights) finish with a
// summary, as two ddp processes do, and its weights_sha256 is ddp's: the
// two train the same weights bit for bit. Before, the fsdp run trained,
// tested and then died in a nil pointer panic while writing the summary.
func TestFSDPProcessesSummary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts training processes")
	}
	if f, d := runTwoProcesses(t, t.TempDir(), "fsdp"), runTwoProcesses(t, t.TempDir(), "ddp"); f.WeightsSHA256 != d.WeightsSHA256 {
		t.Fatalf("fsdp's weights_sha256 %s, ddp's %s: the same training should give the same weights", f.WeightsSHA256, d.WeightsSHA256)
	}
}

// -sharded-checkpoint: 2 fsdp processes each write their shard of
// last.ckpt beside its index, and one process tests that checkpoint with
// the weights the run ended with. The cli had no way to ask for sharded
// checkpoints: every save gathered the whole model onto rank 0.
func TestShardedCheckpointFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("starts training processes")
	}
	root := t.TempDir()
	fit := runTwoProcesses(t, root, "fsdp", "-sharded-checkpoint")
	got := list(t, filepath.Join(fit.RunDir, "checkpoints"))
	for _, want := range []string{"last.ckpt", "last.ckpt.rank0-of-2", "last.ckpt.rank1-of-2"} {
		if !slices.Contains(got, want) {
			t.Fatalf("checkpoints %v: no %s", got, want)
		}
	}
	app := smallResNet()
	app.Trainer.RootDir = root
	test, stderr := run(t, app, "test", "-ckpt-path", "last", "-limit-test-batches", "1", "-no-progress-bar")
	if test.WeightsSHA256 != fit.WeightsSHA256 || test.GlobalStep != 3 {
		t.Fatalf("test of the sharded last.ckpt: %+v, want the weights of the fit %s\n%s", test, fit.WeightsSHA256, stderr)
	}
}
