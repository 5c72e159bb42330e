package cli

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/fulgur-ml/fulgur/internal/models"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// programEnv makes the test binary act as a small resnet program instead of
// running tests: multi-process tests start it, and DDP re-executes it for
// its other ranks as it would the example.
const programEnv = "FULGUR_CLI_TEST_PROGRAM"

func TestMain(m *testing.M) {
	if os.Getenv(programEnv) != "" {
		if err := smallResNetJob(os.Stdout).Run(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "program:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// smallResNetJob is examples/resnet with a narrow network (widths 4, 8, 16),
// so a run of a few steps takes a second.
func smallResNetJob(stdout *os.File) ImageJob {
	return ImageJob{
		Program: "resnet",
		NewModule: func(f *Flags) module.Module {
			return &models.ResNet{LR: f.LR, Config: nn.ResNetConfig{BlocksPerStage: 1, Widths: []int{4, 8, 16}}}
		},
		Defaults: Flags{MaxEpochs: 1, BatchSize: 16, LR: 1e-3},
		Stdout:   stdout,
	}
}
