package cli_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/strategy/launch"
	"github.com/fulgur-ml/fulgur/trainer"
)

// cancelAt cancels the run's context after a training step, as a SIGINT
// would stop it.
type cancelAt struct {
	step   int
	cancel context.CancelFunc
}

func (c *cancelAt) Name() string { return "cancelAt" }

func (c *cancelAt) OnTrainBatchEnd(_ context.Context, s *trainer.State) error {
	if s.GlobalStep == c.step {
		c.cancel()
	}
	return nil
}

// A run stopped midway prints an interrupted summary and returns the
// command that resumes it, starting with the command that started this
// program (before, the App's name: "mlp" for a program run as ./train);
// running that command finishes with the weights of an uninterrupted run.
func TestInterruptedRunResumes(t *testing.T) {
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	args := []string{"fit", "-max-steps", "12", "-seed", "2", "-deterministic", "-no-progress-bar", "-no-model-summary", "-limit-val-batches", "1", "-limit-test-batches", "1"}
	app := mlpApp(root)
	var out, errb bytes.Buffer
	app.Stdout, app.Stderr = &out, &errb
	app.Callbacks = func(_ *cli.Settings, cfg *trainer.Config) error {
		cfg.Callbacks = append(cfg.Callbacks, &cancelAt{step: 5, cancel: cancel})
		return nil
	}
	err := app.Run(ctx, args)
	var ie *cli.Interrupted
	if !errors.As(err, &ie) || ie.Err.Checkpoint == "" || !strings.Contains(ie.Resume, "-ckpt-path") {
		t.Fatalf("err = %v, want *cli.Interrupted with a resume command\n%s", err, errb.String())
	}
	s := summaryOf(t, out.String())
	if !s.Interrupted || s.Checkpoint != ie.Err.Checkpoint || s.TestAcc != nil || s.GlobalStep < 5 || s.GlobalStep >= 12 {
		t.Fatalf("summary %+v", s)
	}
	words := strings.Fields(ie.Resume)
	if words[0] != os.Args[0] || strings.Join(words[1:len(words)-2], " ") != strings.Join(args, " ") || words[len(words)-1] != ie.Err.Checkpoint {
		t.Fatalf("resume command %q for args %q", ie.Resume, args)
	}
	// Under fulgur run, the command starts the launcher: the whole job.
	t.Setenv(launch.EnvLaunchCommand, "fulgur run -nproc 2")
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	app = mlpApp(t.TempDir())
	app.Stdout, app.Stderr = io.Discard, io.Discard
	app.Callbacks = func(_ *cli.Settings, cfg *trainer.Config) error {
		cfg.Callbacks = append(cfg.Callbacks, &cancelAt{step: 5, cancel: cancel})
		return nil
	}
	var ie2 *cli.Interrupted
	if err := app.Run(ctx, args); !errors.As(err, &ie2) || !strings.HasPrefix(ie2.Resume, "fulgur run -nproc 2 "+os.Args[0]+" fit ") {
		t.Errorf("under a launcher, the resume command is %v, want fulgur run -nproc 2 %s fit ...", err, os.Args[0])
	}
	os.Unsetenv(launch.EnvLaunchCommand)
	resumed, _ := run(t, mlpApp(root), words[1:]...)
	straight, _ := run(t, mlpApp(t.TempDir()), args...)
	if resumed.GlobalStep != 12 || resumed.WeightsSHA256 != straight.WeightsSHA256 {
		t.Errorf("resumed %+v\nstraight %+v", resumed, straight)
	}
}
