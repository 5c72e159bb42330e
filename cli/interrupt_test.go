package cli_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
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

// The messages of an interrupted command-line run keep what the trainer's
// error says (the signal, a SLURM requeue) and replace only its hint, which
// names the Go API, with the command (rank 0) or a pointer to rank 0's
// (the other ranks). Before, rank 0's message dropped the signal and the
// requeue.
func TestInterruptedMessagesKeepTheSignal(t *testing.T) {
	ie := &trainer.InterruptedError{Signal: syscall.SIGTERM, GlobalStep: 7, Checkpoint: "ck/interrupted.ckpt", Requeued: true}
	for _, tc := range []struct {
		resume, tail string
	}{
		{"./train fit -ckpt-path ck/interrupted.ckpt", "; resume with:\n  ./train fit -ckpt-path ck/interrupted.ckpt"},
		{"", "; rank 0 prints the command that resumes the run"},
	} {
		got := (&cli.Interrupted{Err: ie, Resume: tc.resume}).Error()
		want := "training interrupted (SIGTERM) at global step 7; checkpoint saved to ck/interrupted.ckpt; the SLURM job was requeued" + tc.tail
		if got != want {
			t.Errorf("Resume %q: message\n%q\nwant\n%q", tc.resume, got, want)
		}
	}
	if got, want := ie.Error(), ie.Summary()+`; resume with trainer.FromCheckpoint("ck/interrupted.ckpt")`; got != want {
		t.Errorf("trainer's message %q, want %q", got, want)
	}
	// A rank on another host than rank 0's names the host where the
	// path is (rank 0's); rank 0 and its host's ranks say the path alone.
	elsewhere := &trainer.InterruptedError{Signal: os.Interrupt, GlobalStep: 7, Checkpoint: "ck/interrupted.ckpt", SavedOn: "node0"}
	if got, want := (&cli.Interrupted{Err: elsewhere}).Error(), "training interrupted (SIGINT) at global step 7; checkpoint saved to ck/interrupted.ckpt on rank 0's host node0; rank 0 prints the command that resumes the run"; got != want {
		t.Errorf("a rank on another host: %q, want %q", got, want)
	}
	early := &trainer.InterruptedError{Signal: os.Interrupt}
	if got, want := (&cli.Interrupted{Err: early}).Error(), "training interrupted (SIGINT) before it began; nothing was saved; start the run again"; got != want {
		t.Errorf("nothing saved: %q, want %q", got, want)
	}
}
