package cli_test

import (
	"testing"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/models"
)

// -max-epochs -1 (no epoch limit), -min-epochs and -min-steps reach the
// trainer as Lightning's max_epochs=-1, min_epochs and min_steps.
func TestEpochAndStepLimitFlags(t *testing.T) {
	app := cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}
	doc := printed(t, app, "-max-epochs", "-1", "-min-epochs", "2", "-min-steps", "30")
	if tr := doc["trainer"]; tr["max_epochs"] != -1.0 || tr["min_epochs"] != 2.0 || tr["min_steps"] != 30.0 {
		t.Errorf("printed %v", tr)
	}
	s := cli.Settings{MaxEpochs: -1, MinEpochs: 2, MinSteps: 30}
	cfg, err := s.TrainerConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxEpochs != -1 || cfg.MinEpochs != 2 || cfg.MinSteps != 30 {
		t.Errorf("trainer.Config MaxEpochs %d, MinEpochs %d, MinSteps %d; want -1, 2, 30", cfg.MaxEpochs, cfg.MinEpochs, cfg.MinSteps)
	}
}
