package callbacks_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

// cancelAt cancels the Fit's context at the end of a global step, as a
// Ctrl-C would (the trainer saves interrupted.ckpt and returns an
// *InterruptedError).
type cancelAt struct {
	step   int
	cancel context.CancelFunc
}

func (c *cancelAt) Name() string { return "cancelAt" }
func (c *cancelAt) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.GlobalStep == c.step {
		c.cancel()
	}
	return nil
}

// A step checkpoint that a newer recovery point displaced is deleted when
// the run is interrupted, not left in the run directory: the interrupted run
// wrote it and meant to delete it at the callback's next call, which never
// came. A run resumed from interrupted.ckpt into a new version_N then finds
// in version_0 what the interrupted run kept, and leaves it alone.
func TestModelCheckpointInterruptedRunLeavesNoDisplacedRecoveryPoint(t *testing.T) {
	root := t.TempDir()
	cfg := callbacks.ModelCheckpointConfig{Monitor: "score", EveryNTrainSteps: 5}
	mc, err := callbacks.NewModelCheckpoint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// 16 steps an epoch, validation at its end: recovery points at steps 5
	// and 10 (10 displaces 5), the interrupt at step 13.
	tr, err := trainer.New(trainer.Config{MaxEpochs: 3, DefaultRootDir: root, Seed: 5, Out: io.Discard, EnableProgressBar: trainer.Bool(false),
		Callbacks: []trainer.Callback{&script{name: "score", values: []float64{0.5}}, mc, &cancelAt{step: 13, cancel: cancel}}})
	if err != nil {
		t.Fatal(err)
	}
	train, val := regression(t)
	err = tr.Fit(ctx, &linreg{}, train, val)
	var ie *trainer.InterruptedError
	if !errors.As(err, &ie) || ie.Checkpoint == "" {
		t.Fatalf("Fit = %v, want an *InterruptedError with a checkpoint", err)
	}
	dir := mc.Dir()
	want := []string{"epoch=0-step=10.ckpt", "interrupted.ckpt"}
	if got := files(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("after the interrupt %s holds %v, want %v (step 5's recovery point was displaced by step 10's)", dir, got, want)
	}

	// Resumed into version_1: version_0 is the interrupted run's, untouched.
	mc2, _ := callbacks.NewModelCheckpoint(cfg)
	if _, err := fit(t, trainer.Config{MaxEpochs: 2, DefaultRootDir: root, Callbacks: []trainer.Callback{&script{name: "score", values: []float64{0.5, 0.4}}, mc2}}, true, trainer.FromCheckpoint(ie.Checkpoint)); err != nil {
		t.Fatal(err)
	}
	if mc2.Dir() == dir {
		t.Fatalf("the resumed run wrote into %s too, want a new version_N", dir)
	}
	if got := files(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("after the resumed run %s holds %v, want %v", dir, got, want)
	}
	if got, want := files(t, mc2.Dir()), []string{"epoch=1-step=32.ckpt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("the resumed run's %s holds %v, want %v", mc2.Dir(), got, want)
	}
	if filepath.Dir(mc2.BestModelPath()) != mc2.Dir() {
		t.Errorf("best %s, want one in %s", mc2.BestModelPath(), mc2.Dir())
	}
}

// failAt fails the Fit at the end of a global step, as a crash would.
type failAt struct{ step int }

func (f failAt) Name() string { return "failAt" }
func (f failAt) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.GlobalStep == f.step {
		return errors.New("the machine went away")
	}
	return nil
}

// A run that failed (or was killed) between a recovery point and the
// callback's next call leaves the displaced one; a run resumed into a new
// version_N does not delete it (it is the old run's), but names it.
func TestModelCheckpointResumedAfterACrashNamesTheDisplacedFileLeft(t *testing.T) {
	root := t.TempDir()
	cfg := callbacks.ModelCheckpointConfig{Monitor: "score", EveryNTrainSteps: 5}
	mc, _ := callbacks.NewModelCheckpoint(cfg)
	_, err := fit(t, trainer.Config{MaxEpochs: 3, DefaultRootDir: root, Callbacks: []trainer.Callback{&script{name: "score", values: []float64{0.5}}, mc, failAt{step: 12}}}, true)
	if err == nil || !strings.Contains(err.Error(), "the machine went away") {
		t.Fatalf("Fit = %v, want the failure", err)
	}
	dir := mc.Dir()
	want := []string{"epoch=0-step=10.ckpt", "epoch=0-step=5.ckpt"}
	if got := files(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the failure %s holds %v, want %v (nothing deleted after a failure)", dir, got, want)
	}
	var log bytes.Buffer
	l := zerolog.New(&log)
	mc2, _ := callbacks.NewModelCheckpoint(cfg)
	tr, err := trainer.New(trainer.Config{MaxEpochs: 1, DefaultRootDir: root, Seed: 5, Out: io.Discard, Log: &l, EnableProgressBar: trainer.Bool(false),
		Callbacks: []trainer.Callback{&script{name: "score", values: []float64{0.5}}, mc2}})
	if err != nil {
		t.Fatal(err)
	}
	train, val := regression(t)
	if err := tr.Fit(context.Background(), &linreg{}, train, val, trainer.FromCheckpoint(filepath.Join(dir, "epoch=0-step=10.ckpt"))); err != nil {
		t.Fatal(err)
	}
	if got := files(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("after the resumed run %s holds %v, want %v", dir, got, want)
	}
	stale := filepath.Join(dir, "epoch=0-step=5.ckpt")
	if _, err := os.Stat(stale); err != nil || !strings.Contains(log.String(), "displaced "+stale) {
		t.Errorf("the resumed run's log does not name %s, displaced and left by the failed run:\n%s", stale, log.String())
	}
}
