package cli_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
)

// Errors of the trainer and the strategies that a command line reaches
// name the flags that set what they are about, never the trainer.Config
// field a command-line user cannot see: a Validate error, a strategy's
// check of its devices, the launch of its ranks in Fit, lr-find's, and a
// checkpoint's precision when validate loads it.
func TestTrainerErrorsNameFlags(t *testing.T) {
	ckptRoot := t.TempDir()
	run(t, mlpApp(ckptRoot), "-no-progress-bar", "-max-steps", "1", "-limit-val-batches", "1", "-limit-test-batches", "1")
	for _, c := range []struct {
		root string
		args []string
		want []string
		not  []string // Go names that must not appear
	}{
		{"", []string{"-min-epochs", "5", "-max-epochs", "2"},
			[]string{"-min-epochs is 5 and -max-epochs 2: -max-epochs ends training first", "lower -min-epochs or raise -max-epochs"}, []string{"MinEpochs", "MaxEpochs"}},
		{"", []string{"-min-steps", "5", "-max-steps", "2"},
			[]string{"-min-steps is 5 and -max-steps 2"}, []string{"MinSteps", "MaxSteps"}},
		{"", []string{"-overfit-batches", "2", "-limit-train-batches", "3"},
			[]string{"-overfit-batches is 2 and -limit-train-batches is 3", "leave -limit-train-batches unset"}, []string{"OverfitBatches", "LimitTrainBatches"}},
		{"", []string{"-overfit-batches", "2", "-fast-dev-run", "1"},
			[]string{"-overfit-batches is 2 and -fast-dev-run is 1"}, []string{"OverfitBatches", "FastDevRun"}},
		{"", []string{"-strategy", "warp"}, []string{`-strategy is "warp": use one of`}, []string{"Strategy is"}},
		{"", []string{"-accelerator", "tpu"}, []string{`-accelerator is "tpu": use "cpu", "cuda" or "auto"`}, []string{"Accelerator is"}},
		{"", []string{"-accelerator", "cuda"}, []string{`-accelerator is "cuda" but this build has no CUDA support`}, []string{"Accelerator"}},
		{"", []string{"-strategy", "single", "-devices", "2"},
			[]string{`strategy "single" runs one device, but -devices is 2 and -num-nodes is 1`, "or -devices 1"}, []string{"Devices", "NumNodes"}},
		{"", []string{"-strategy", "dp", "-devices", "2", "-num-nodes", "2"},
			[]string{`strategy "dp" runs in one process on one machine, but -num-nodes is 2`}, []string{"NumNodes"}},
		{"", []string{"-strategy", "ddp", "-num-nodes", "2"},
			[]string{"-num-nodes is 2 but this process was not started by a launcher"}, []string{"NumNodes"}},
		{"", []string{"lr-find", "-strategy", "ddp", "-devices", "2"},
			[]string{`-strategy is "ddp" on 2 devices and 1 node: the search runs on one device`, "-devices 1 and -strategy auto or single"}, []string{"Strategy \"", "Devices 1", "Config", "StrategyImpl", "1 nodes"}},
		{ckptRoot, []string{"validate", "-ckpt-path", "last", "-precision", "64", "-limit-val-batches", "1"},
			[]string{`set -precision to "32" to match the checkpoint`}, []string{"Precision"}},
	} {
		root := c.root
		if root == "" {
			root = t.TempDir()
		}
		app := mlpApp(root)
		var out bytes.Buffer
		app.Stdout, app.Stderr = &out, &out
		err := app.Run(context.Background(), append([]string{"-no-progress-bar"}, c.args...))
		if err == nil {
			t.Errorf("%q: no error", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: err = %v\nwant %q", c.args, err, w)
			}
		}
		for _, n := range c.not {
			if strings.Contains(err.Error(), n) {
				t.Errorf("%q: err = %v\nnames the Go field %q", c.args, err, n)
			}
		}
	}
}

// A -root-dir where no run directory can be made says so, with the flag
// and the file system's reason, not trainer.VersionDir's name.
func TestRootDirUnderAFileNamesTheFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(file, "runs")
	app := mlpApp(root)
	var out bytes.Buffer
	app.Stdout, app.Stderr = &out, &out
	err := app.Run(context.Background(), []string{"-no-progress-bar", "-max-steps", "1"})
	if err == nil {
		t.Fatal("a root directory under a file was accepted")
	}
	for _, w := range []string{"-root-dir " + root, "cannot make the run directory", "not a directory", "give a directory"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err = %v\nwant %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "VersionDir") {
		t.Errorf("err = %v\nnames trainer.VersionDir", err)
	}
}

// The flag names replace the trainer's words, not the same letters in a
// path or a file name the error quotes: a corrupt checkpoint under a
// directory named Seed keeps its path.
func TestFlagNamesLeavePathsAlone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "Seed", "Devices")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, "Strategy.ckpt")
	if err := os.WriteFile(ckpt, []byte("not a checkpoint at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	app := mlpApp(t.TempDir())
	var out bytes.Buffer
	app.Stdout, app.Stderr = &out, &out
	err := app.Run(context.Background(), []string{"-no-progress-bar", "-max-steps", "1", "-ckpt-path", ckpt})
	if err == nil {
		t.Fatal("a corrupt checkpoint was accepted")
	}
	if !strings.Contains(err.Error(), ckpt) {
		t.Errorf("err = %v\nwant the checkpoint's path %s as given", err, ckpt)
	}
}

// A loss that becomes infinite stops training with an error that names
// the flag that lets it go on, -warn-on-nan, which the command line has;
// with it the same run ends without an error.
func TestNonFiniteLossNamesWarnOnNaN(t *testing.T) {
	args := []string{"-no-progress-bar", "-max-steps", "30", "-lr", "1e30", "-limit-val-batches", "1", "-limit-test-batches", "1", "-num-sanity-val-steps", "0"}
	app := mlpApp(t.TempDir())
	var out bytes.Buffer
	app.Stdout, app.Stderr = &out, &out
	err := app.Run(context.Background(), args)
	if err == nil {
		t.Fatal("a learning rate of 1e30 trained 30 steps without a non-finite loss: the test needs another way to make one")
	}
	if !strings.Contains(err.Error(), "the loss is") || !strings.Contains(err.Error(), "set -warn-on-nan to carry on") || strings.Contains(err.Error(), "WarnOnNaN") {
		t.Errorf("err = %v\nwant the non-finite loss error naming -warn-on-nan", err)
	}
	app = mlpApp(t.TempDir())
	out.Reset()
	app.Stdout, app.Stderr = &out, &out
	if err := app.Run(context.Background(), append(args, "-warn-on-nan")); err != nil {
		t.Errorf("with -warn-on-nan: %v", err)
	}
	if !strings.Contains(out.String(), "non-finite loss") {
		t.Errorf("with -warn-on-nan the log has no non-finite loss warning:\n%s", out.String())
	}
}

// stepFails is models.MLP whose TrainingStep fails with err.
type stepFails struct {
	models.MLP
	err error
}

func (m *stepFails) TrainingStep(*module.Step) (*G.Node, error) { return nil, m.err }

// A module's own error reaches the command-line user as the module wrote
// it: the flag names are the trainer's words, not a rewrite of every
// capitalised word that a Config field shares (the Seed and Strategy of
// this sentence became -seed and -strategy).
func TestModuleErrorsReachTheUserVerbatim(t *testing.T) {
	own := errors.New("my step: Seed and Strategy disagree (see Devices.md, MaxEpochs)")
	app := mlpApp(t.TempDir())
	app.Model = &stepFails{err: own}
	var out bytes.Buffer
	app.Stdout, app.Stderr = &out, &out
	err := app.Run(context.Background(), []string{"-no-progress-bar", "-max-steps", "1", "-num-sanity-val-steps", "0"})
	if !errors.Is(err, own) || !strings.Contains(err.Error(), own.Error()) {
		t.Errorf("err = %v\nwant the module's %q as it wrote it", err, own)
	}
}

// The trainer's log lines name the flags too: -fast-dev-run's overrides,
// -devices above the cores, -log-every-n-steps above an epoch's steps.
func TestTrainerLogLinesNameFlags(t *testing.T) {
	for _, c := range []struct {
		args, want, not []string
	}{
		{[]string{"-fast-dev-run", "1", "-max-epochs", "5"},
			[]string{"-fast-dev-run replaces these settings", `"-max-epochs=5"`}, []string{"FastDevRun", "MaxEpochs"}},
		{[]string{"-max-steps", "2", "-limit-train-batches", "2", "-limit-val-batches", "1", "-limit-test-batches", "1", "-loggers", "csv"},
			[]string{"-log-every-n-steps is above the epoch's optimizer steps"}, []string{"LogEveryNSteps"}},
		// -num-nodes 2 stops it before a rank starts, once Validate has
		// warned.
		{[]string{"-strategy", "ddp", "-num-nodes", "2", "-devices", strconv.Itoa(runtime.NumCPU() + 1)},
			[]string{"-devices is above the number of CPU cores", "use -devices <= cores"}, []string{"Devices", "NumNodes"}},
	} {
		app := mlpApp(t.TempDir())
		var out bytes.Buffer
		app.Stdout, app.Stderr = &out, &out
		err := app.Run(context.Background(), append([]string{"-no-progress-bar"}, c.args...))
		log := out.String()
		if err != nil {
			log += err.Error()
		}
		for _, w := range c.want {
			if !strings.Contains(log, w) {
				t.Errorf("%q: want %q in\n%s", c.args, w, log)
			}
		}
		for _, n := range c.not {
			if strings.Contains(log, n) {
				t.Errorf("%q: the Go name %q in\n%s", c.args, n, log)
			}
		}
	}
}
