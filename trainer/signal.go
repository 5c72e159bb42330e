package trainer

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/module"
)

// signalWatch records the first SIGINT or SIGTERM received during Fit; the
// loop polls it at each optimizer-step boundary (one atomic load). A second
// signal restores the default handling and re-raises, so a person pressing
// Ctrl-C twice gets the usual immediate exit.
type signalWatch struct {
	ch   chan os.Signal
	got  atomic.Pointer[os.Signal]
	done chan struct{}
}

// InterruptCheckpointName is the file, under DefaultRootDir, that a run
// stopped by SIGINT or SIGTERM saves.
const InterruptCheckpointName = "checkpoints/interrupted.ckpt"

func watchSignals(log *zerolog.Logger) *signalWatch {
	w := &signalWatch{ch: make(chan os.Signal, 2), done: make(chan struct{})}
	signal.Notify(w.ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		for {
			select {
			case s := <-w.ch:
				if w.got.CompareAndSwap(nil, &s) {
					log.Warn().Str("signal", signalName(s)).Msg("finishing the current step, then saving a checkpoint and stopping; send the signal again to exit at once")
					continue
				}
				signal.Stop(w.ch)
				signal.Reset(os.Interrupt, syscall.SIGTERM)
				if p, err := os.FindProcess(os.Getpid()); err == nil && p.Signal(s) == nil {
					return
				}
				os.Exit(130)
			case <-w.done:
				return
			}
		}
	}()
	return w
}

// received is the first signal, or nil.
func (w *signalWatch) received() os.Signal {
	if w == nil {
		return nil
	}
	if p := w.got.Load(); p != nil {
		return *p
	}
	return nil
}

func (w *signalWatch) stop() {
	signal.Stop(w.ch)
	close(w.done)
}

// agreeStop makes every rank take the same decision after a batch: stop
// when a hook on any rank asked to, and, at an optimizer-step boundary,
// save a checkpoint and stop when any rank received SIGINT or SIGTERM. With
// one process it costs an atomic load; with several, one small all-reduce.
func (t *Trainer) agreeStop(ctx context.Context, stop error, boundary bool) (error, error) {
	var sig os.Signal
	if boundary {
		sig = t.signals.received()
	}
	if t.strat.WorldSize() > 1 {
		flags := []float64{0, 0}
		if stop != nil {
			flags[0] = 1
		}
		if sig != nil {
			flags[1] = 1
		}
		if err := t.strat.Reduce(ctx, flags, []float64{1, 1}, []module.Reduce{module.Max, module.Max}); err != nil {
			return nil, fmt.Errorf("agree on stopping across ranks: %w", err)
		}
		if flags[0] > 0 && stop == nil {
			stop = Stop("another rank stopped training")
		}
		if flags[1] > 0 && sig == nil {
			sig = syscall.SIGTERM
		}
	}
	if sig == nil {
		return stop, nil
	}
	name := signalName(sig)
	path := filepath.Join(t.cfg.DefaultRootDir, filepath.FromSlash(InterruptCheckpointName))
	if err := t.saveCheckpoint(ctx, path); err != nil {
		return nil, fmt.Errorf("stopping on %s: %w", name, err)
	}
	if t.strat.WorldSize() > 1 {
		if err := t.strat.Barrier(ctx); err != nil {
			return nil, fmt.Errorf("stopping on %s: wait for rank 0 to save the checkpoint: %w", name, err)
		}
	}
	t.stats.Interrupted = true
	t.stats.InterruptCheckpoint = path
	return Stop("%s at global step %d; checkpoint saved to %s", name, t.state.GlobalStep, path), nil
}

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}
