package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
	"github.com/rs/zerolog"
)

// endHookEnv makes the test binary the program of TestSignalInEndHooks:
// its value names the hook that signals ("OnFitEnd" or "Teardown").
const endHookEnv = "FULGUR_TRAINER_END_HOOK_SIGNAL"

// endHookWork sends SIGTERM to its own thread in the hook named at (on
// which Linux delivers it before the call returns), then does the hook's
// work: a file written, as a callback's final save or a logger's flush.
type endHookWork struct {
	at, dir string
}

func (*endHookWork) Name() string { return "endHookWork" }
func (w *endHookWork) work(hook string) error {
	if hook == w.at {
		runtime.LockOSThread()
		err := syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), syscall.SIGTERM)
		runtime.UnlockOSThread()
		if err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(w.dir, hook+".done"), nil, 0o644)
}
func (w *endHookWork) OnFitEnd(context.Context, *trainer.State) error { return w.work("OnFitEnd") }
func (w *endHookWork) Teardown(_ context.Context, _ *trainer.State, stage string) error {
	return w.work("Teardown")
}

// TestEndHookSignalProgram is the program TestSignalInEndHooks starts:
// Fit with endHookWork, its error written to DIR/result.
func TestEndHookSignalProgram(t *testing.T) {
	at := os.Getenv(endHookEnv)
	if at == "" {
		t.Skip("run by TestSignalInEndHooks")
	}
	dir := os.Getenv(endHookEnv + "_DIR")
	job := newResumeJob(t, 1, 0)
	cfg := quiet(job.cfg)
	cfg.MaxEpochs, cfg.DefaultRootDir = 1, dir
	log := zerolog.New(os.Stderr).Level(zerolog.WarnLevel) // the signal line, for the parent to read
	cfg.Log = &log
	cfg.Callbacks = []trainer.Callback{&endHookWork{at: at, dir: dir}}
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), job.mod(), job.train, job.val)
	code := 0
	var ie *trainer.InterruptedError
	if errors.As(err, &ie) {
		code = ie.ExitCode()
	} else if err != nil {
		code = 1
	}
	if werr := os.WriteFile(filepath.Join(dir, "result"), fmt.Appendf(nil, "%v", err), 0o644); werr != nil {
		t.Fatal(werr)
	}
	os.Exit(code)
}

// A SIGTERM while Fit runs its end hooks (OnFitEnd, Teardown) is Fit's to
// answer, as one while it trains: the hooks finish their work, and Fit
// returns an *InterruptedError for it, so the program stops (exit status
// 143) rather than going on to its test. Before, Fit's handler was gone
// once training ended: the signal took its default action and the process
// died in the hook, the hook's work (here a file; a checkpoint callback's
// cleanup, the Plots charts, a profiler's trace) never done.
func TestSignalInEndHooks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, at := range []string{"OnFitEnd", "Teardown"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run", "^TestEndHookSignalProgram$")
			cmd.Env = append(os.Environ(), endHookEnv+"="+at, endHookEnv+"_DIR="+dir)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 143 {
				t.Errorf("the program ended with %v (%v), want exit status 143 from an *InterruptedError\n%s", err, ee.ProcessState, out)
			}
			for _, hook := range []string{"OnFitEnd", "Teardown"} {
				if _, err := os.Stat(filepath.Join(dir, hook+".done")); err != nil {
					t.Errorf("%s's work was not done: %v", hook, err)
				}
			}
			res, err := os.ReadFile(filepath.Join(dir, "result"))
			if err != nil {
				t.Fatalf("Fit did not return: %v\n%s", err, out)
			}
			if !strings.Contains(string(res), "SIGTERM") {
				t.Errorf("Fit returned %q, want an interrupt by SIGTERM", res)
			}
			// The signal line says what is being finished: no step is
			// left once the end hooks run.
			if !strings.Contains(string(out), "training is over: finishing Fit's end hooks (OnFitEnd, Teardown)") || strings.Contains(string(out), "current step") {
				t.Errorf("the signal line does not say that the end hooks are being finished:\n%s", out)
			}
		})
	}
}
