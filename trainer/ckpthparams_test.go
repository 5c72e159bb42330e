package trainer_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

type sizedMLP struct {
	hidden int
	fc1    *nn.Linear
	fc2    *nn.Linear
}

func (m *sizedMLP) Configure(b *module.Builder) error {
	m.fc1 = nn.NewLinear(b, "fc1", 3, m.hidden, nn.LinearReLU())
	m.fc2 = nn.NewLinear(b, "fc2", m.hidden, 1)
	return nil
}

func (m *sizedMLP) TrainingStep(s *module.Step) (*G.Node, error) {
	out := m.fc2.Forward(s, m.fc1.Forward(s, s.Input("x")))
	return nn.MSELoss(out, s.Input("y")), nil
}

type sizedMLPWithHParams struct{ sizedMLP }

func (m *sizedMLPWithHParams) HParams() map[string]any {
	return map[string]any{"hidden": m.hidden, "act": "relu"}
}

// The module's hyperparameters travel with its checkpoint, so a program that
// only has the file can build the module again to load it (Lightning's
// checkpoint["hyper_parameters"]).
func TestCheckpointInfoHasTheModulesHParams(t *testing.T) {
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{3}}, {Name: "y", Shape: []int{1}}},
		[][]float32{{1, 2, 3, 4, 5, 6}, {1, 0}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		m    module.Module
		want map[string]any
	}{
		{"with", &sizedMLPWithHParams{sizedMLP{hidden: 5}}, map[string]any{"hidden": 5.0, "act": "relu"}},
		{"without", &sizedMLP{hidden: 5}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			tr, err := trainer.New(trainer.Config{MaxSteps: 1, LogDir: dir, EnableProgressBar: new(false), DisableLogger: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Fit(context.Background(), c.m, l, nil); err != nil {
				t.Fatal(err)
			}
			info, err := trainer.ReadCheckpointInfo(filepath.Join(dir, "checkpoints", "last.ckpt"))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(info.HParams, c.want) {
				t.Fatalf("HParams = %#v, want %#v", info.HParams, c.want)
			}
			if c.want == nil {
				return
			}
			// Edited since it was written: the hyperparameters a program
			// would build the module from are refused, not read back.
			b, err := os.ReadFile(filepath.Join(dir, "checkpoints", "last.ckpt"))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Count(b, []byte("relu")) != 1 {
				t.Fatalf("the checkpoint holds %q %d times, want once (in its hparams)", "relu", bytes.Count(b, []byte("relu")))
			}
			edited := filepath.Join(t.TempDir(), "edited.ckpt")
			if err := os.WriteFile(edited, bytes.Replace(b, []byte("relu"), []byte("tanh"), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			if info, err := trainer.ReadCheckpointInfo(edited); !errors.Is(err, trainer.ErrCorruptCheckpoint) {
				t.Errorf("hparams edited in the file: HParams %v, error %v; want an error matching ErrCorruptCheckpoint", info.HParams, err)
			}
		})
	}
}
