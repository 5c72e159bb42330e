package cli_test

import (
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
)

// trainStepOnly is a newcomer's first model: a TrainingStep and nothing else.
type trainStepOnly struct{ mlp models.MLP }

func (m *trainStepOnly) Configure(b *module.Builder) error { return m.mlp.Configure(b) }

func (m *trainStepOnly) TrainingStep(s *module.Step) (*G.Node, error) { return m.mlp.TrainingStep(s) }

// A model with a TrainingStep alone fits under the cli: the data's
// validation and test loaders are left out (the trainer refuses a
// validation loader for a module that cannot validate, and fit's test
// needs a TestStep), and the summary's test figures are null.
func TestFitModelWithoutValidationOrTest(t *testing.T) {
	app := cli.App{Name: "first", Model: &trainStepOnly{}, Data: &cli.FashionMNIST{}, Trainer: cli.Settings{MaxEpochs: 1, RootDir: t.TempDir()}}
	sum, _ := run(t, app, "-no-progress-bar", "-max-steps", "2")
	if sum.GlobalStep != 2 || sum.TestAcc != nil || sum.TestLoss != nil {
		t.Errorf("summary %+v: want 2 steps and no test figures", sum)
	}
}
