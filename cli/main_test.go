package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

// programEnv makes the test binary act as a small resnet program instead of
// running tests: multi-process tests start it, and DDP re-executes it for
// its other ranks as it would the example.
const programEnv = "FULGUR_CLI_TEST_PROGRAM"

// mlpProgramEnv makes the program examples/mlp instead (its -sizes
// change the model).
const mlpProgramEnv = "FULGUR_CLI_TEST_MLP"

// cancelAtEnv makes the program cancel its run's context after the
// training step it gives.
const cancelAtEnv = "FULGUR_CLI_TEST_CANCEL_AT"

// slowWorkerEnv makes the program's ddp_spawn workers wait, before they
// run anything, for a signal that kills them: workers still starting.
const slowWorkerEnv = "FULGUR_CLI_TEST_SLOW_WORKERS"

func TestMain(m *testing.M) {
	if os.Getenv(programEnv) != "" {
		if os.Getenv(slowWorkerEnv) != "" && os.Getenv("FULGUR_LAUNCHER") == "ddp_spawn" {
			select {} // no signal handler yet: SIGINT kills the process
		}
		if os.Getenv(preFitEnv) != "" {
			if err := preFit(); err != nil {
				fmt.Fprintln(os.Stderr, "program: the one-device Fit first:", err)
				os.Exit(1)
			}
		}
		app := smallResNet()
		if os.Getenv(mlpProgramEnv) != "" {
			app = mlpApp("")
		}
		if at := os.Getenv(cancelAtEnv); at != "" {
			// The run's context is cancelled after that step, as Ctrl-C
			// to this rank would stop it.
			step, _ := strconv.Atoi(at)
			ctx, cancel := context.WithCancel(context.Background())
			app.Callbacks = func(_ *cli.Settings, cfg *trainer.Config) error {
				cfg.Callbacks = append(cfg.Callbacks, &cancelAt{step: step, cancel: cancel})
				return nil
			}
			if err := app.Run(ctx, os.Args[1:]); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", app.Name, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
		app.Main() // exits with Main's status when the run fails
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// smallResNet is examples/resnet with a narrow network (widths 4, 8, 16),
// so a run of a few steps takes a second.
func smallResNet() cli.App {
	return cli.App{
		Name:    "resnet",
		Model:   &models.ResNet{Config: nn.ResNetConfig{BlocksPerStage: 1, Widths: []int{4, 8, 16}}},
		Data:    &cli.FashionMNIST{BatchSize: 16},
		Trainer: cli.Settings{MaxEpochs: 1},
	}
}

// mlpApp is examples/mlp writing into root.
func mlpApp(root string) cli.App {
	return cli.App{
		Name:    "mlp",
		Model:   &models.MLP{},
		Data:    &cli.FashionMNIST{},
		Trainer: cli.Settings{MaxEpochs: 1, RootDir: root},
	}
}

// run runs app with args and returns its summary and stderr.
func run(t *testing.T, app cli.App, args ...string) (cli.Summary, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	app.Stdout, app.Stderr = &out, &errOut
	if err := app.Run(context.Background(), args); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errOut.String())
	}
	return summaryOf(t, out.String()), errOut.String()
}

func summaryOf(t *testing.T, out string) cli.Summary {
	t.Helper()
	var s cli.Summary
	if err := json.Unmarshal([]byte(lastLine(out)), &s); err != nil {
		t.Fatalf("last line %q is not the JSON summary: %v", lastLine(out), err)
	}
	return s
}

// num is *p, or NaN for nil (a figure the summary leaves null), which no
// comparison of figures accepts.
func num(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// runMLP runs the mlp quietly in a temporary root.
func runMLP(t *testing.T, args ...string) cli.Summary {
	t.Helper()
	s, _ := run(t, mlpApp(t.TempDir()), append([]string{"-no-progress-bar"}, args...)...)
	return s
}
