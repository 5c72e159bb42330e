package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/launch"
	"github.com/fulgur-ml/fulgur/trainer"
)

// failAt fails the training step after global step `step` with err, as a
// strategy does when the group loses a rank.
type failAt struct {
	step int
	err  error
}

func (f *failAt) Name() string { return "failAt" }

func (f *failAt) OnTrainBatchEnd(_ context.Context, s *trainer.State) error {
	if s.GlobalStep == f.step {
		return f.err
	}
	return nil
}

// A fit that fails because the group lost a rank or timed out names, on
// rank 0, the newest checkpoint of the run and the command that resumes
// from it, as the interrupted run's message does; another failure, which
// resuming would not cure, names none.
func TestPeerLossNamesTheCheckpointToResume(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		env    []string
		resume bool
	}{
		{"peer lost", fmt.Errorf("rank 0: allreduce #16: rank 1: %w", collective.ErrPeerLost), nil, true},
		{"timeout", fmt.Errorf("rank 0: allreduce #16: rank 1: %w", collective.ErrTimeout), nil, true},
		{"another failure", errors.New("the loss is NaN"), nil, false},
		// The elastic supervisor restarts the job from the checkpoint.
		{"peer lost, restarts left", fmt.Errorf("rank 1: %w", collective.ErrPeerLost), []string{launch.EnvRestartCount, "0", launch.EnvMaxRestarts, "2"}, false},
		{"peer lost, restarts used", fmt.Errorf("rank 1: %w", collective.ErrPeerLost), []string{launch.EnvRestartCount, "2", launch.EnvMaxRestarts, "2"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i+1 < len(tc.env); i += 2 {
				t.Setenv(tc.env[i], tc.env[i+1])
			}
			root := t.TempDir()
			app := mlpApp(root)
			var out, errb bytes.Buffer
			app.Stdout, app.Stderr = &out, &errb
			app.Callbacks = func(_ *cli.Settings, cfg *trainer.Config) error {
				cfg.Callbacks = append(cfg.Callbacks, &failAt{step: 7, err: tc.err})
				return nil
			}
			err := app.Run(context.Background(), []string{"fit", "-max-epochs", "2", "-limit-train-batches", "5", "-limit-val-batches", "1",
				"-no-progress-bar", "-no-model-summary", "-no-plots"})
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want one wrapping %v", err, tc.err)
			}
			ckpt := filepath.Join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
			said := strings.Contains(err.Error(), "-ckpt-path "+ckpt)
			if said != tc.resume {
				t.Errorf("the error names -ckpt-path %s: %v, want %v:\n%v", ckpt, said, tc.resume, err)
			}
		})
	}
}
