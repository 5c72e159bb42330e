package cli_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

// preFitEnv makes the program train a one-device trainer for a few steps
// before its App runs, as a program checking its model first would.
const preFitEnv = "FULGUR_CLI_TEST_PREFIT"

type tinyReg struct{ fc *nn.Linear }

func (m *tinyReg) Configure(b *module.Builder) error { m.fc = nn.NewLinear(b, "fc", 2, 1); return nil }
func (m *tinyReg) TrainingStep(s *module.Step) (*G.Node, error) {
	pred := G.Must(G.Reshape(m.fc.Forward(s, s.Input("x")), []int{s.BatchSize()}))
	return nn.MSELoss(pred, s.Input("y")), nil
}

// preFit trains tinyReg for 3 steps on one device (Strategy left to auto).
func preFit() error {
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{2}}, {Name: "y"}}, [][]float32{make([]float32, 2*12), make([]float32, 12)})
	if err != nil {
		return err
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 4})
	if err != nil {
		return err
	}
	tr, err := trainer.New(trainer.Config{MaxSteps: 3, Out: io.Discard, EnableProgressBar: trainer.Bool(false), DisableLogger: true, DisableCheckpointing: true})
	if err != nil {
		return err
	}
	return tr.Fit(context.Background(), &tinyReg{}, l, nil)
}

// A program that trains a one-device trainer before its ddp or ddp_spawn
// one: the ranks that run the program again train that trainer on their
// own, as the launching process did, and meet the job at its Fit. Before,
// they joined the job with it: ddp failed with the ranks disagreeing on
// the operation, ddp_spawn hung.
func TestOneDeviceTrainerBeforeSelfLaunchedFit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts training processes")
	}
	for _, s := range []string{"ddp", "ddp_spawn"} {
		t.Run(s, func(t *testing.T) {
			root := t.TempDir()
			cmd := exec.Command(os.Args[0], "-devices", "2", "-strategy", s, "-max-steps", "3", "-limit-val-batches", "1", "-limit-test-batches", "1",
				"-no-progress-bar", "-no-plots", "-no-model-summary", "-root-dir", root)
			cmd.Env = append(os.Environ(), programEnv+"=1", preFitEnv+"=1", "FULGUR_TIMEOUT=20s", "FULGUR_MAX_RESTARTS=")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\n%s", err, errb.String())
			}
			if s := summaryOf(t, out.String()); s.GlobalStep != 3 || s.WorldSize != 2 {
				t.Errorf("summary %+v, want 3 steps on 2 ranks", s)
			}
		})
	}
}
