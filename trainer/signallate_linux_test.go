package trainer_test

import (
	"context"
	"errors"
	"runtime"
	"syscall"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// signalAt sends sig to this process from OnTrainBatchEnd at step at, to
// the thread that runs the hook, on which Linux delivers it before the
// call returns: when the hook returns, the signal has reached the Go
// runtime, but maybe not yet the goroutines that pass it on (a signal
// sent to the process may reach it later, on another thread).
type signalAt struct {
	at  int
	sig syscall.Signal
	err error
}

func (s *signalAt) Name() string { return "signalAt" }
func (s *signalAt) OnTrainBatchEnd(ctx context.Context, st *trainer.State) error {
	if st.GlobalStep == s.at {
		runtime.LockOSThread()
		s.err = syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), s.sig)
		runtime.UnlockOSThread()
	}
	return nil
}

// A SIGTERM that reaches the process while Fit trains is answered by Fit,
// with the interrupt checkpoint and an *InterruptedError, even when it
// comes at the last step and the goroutines that carry a signal to the
// loop run late, as on a loaded machine (here the watcher never records
// it): the run used to end as if no signal had come, and the
// signal was dropped with Fit's handlers, a SIGTERM swallowed.
// TestSIGTERMSavesAndStops failed so, now and then, on a loaded machine.
func TestSIGTERMAtLastStepWithLateWatcher(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	last := job.cfg.MaxEpochs * 16 // 500 examples in batches of 32
	cb := &signalAt{at: last, sig: syscall.SIGTERM}
	trainer.SetSignalRecordHook(func(func()) {}) // the watcher never gets there
	t.Cleanup(func() { trainer.SetSignalRecordHook(nil) })
	cfg := quiet(job.cfg)
	cfg.DefaultRootDir = t.TempDir()
	cfg.Callbacks = []trainer.Callback{cb}
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), job.mod(), job.train, job.val)
	if cb.err != nil {
		t.Fatalf("sending SIGTERM: %v", cb.err)
	}
	var ie *trainer.InterruptedError
	if !errors.As(err, &ie) || ie.Signal != syscall.SIGTERM {
		t.Fatalf("Fit after a SIGTERM at its last step (%d): %v, want an *InterruptedError for SIGTERM", last, err)
	}
	if st := tr.Stats(); st.GlobalStep != last || !st.Interrupted {
		t.Errorf("stats %+v, want an interrupted run at step %d", st, last)
	}
	info, err := trainer.VerifyCheckpoint(ie.Checkpoint)
	if err != nil || info.GlobalStep != last {
		t.Fatalf("interrupt checkpoint %q: %+v, %v; want one at step %d", ie.Checkpoint, info, err, last)
	}
}
