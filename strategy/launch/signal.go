package launch

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// DuplicateSignalWindow is how long after the first SIGINT or SIGTERM a
// repeat counts as the same request (trainer.DuplicateSignalWindow): a
// shell or timeout(1) signalling the whole process group, a launcher
// forwarding it to its ranks, or go run to its child, makes one request
// arrive two or three times. A signal after the window exits at once.
const DuplicateSignalWindow = 2 * time.Second

// WatchStopSignals watches sigs, the signals that ask a run to stop, for
// the trainer's Fit, for launchers that forward them to their ranks
// (ddp_spawn) and for the elastic supervisor (StopOnSignal), until the function it returns is called; that function
// waits for the watcher to end (after a first signal, repeats that arrive
// later within DuplicateSignalWindow are still dropped, not left to kill
// the process). The first signal, and every repeat within
// DuplicateSignalWindow of it, are one request: request gets each, with
// first true for the first. A signal after the window is the user asking
// to exit at once: atExit runs when set (a launcher kills its ranks), the
// handlers of sigs are reset and the signal is raised again on this
// process, which dies of it as it would have without handlers (should it
// survive, it exits with 128 plus the signal's number, as a shell reports
// a process the signal killed).
func WatchStopSignals(sigs []os.Signal, request func(s os.Signal, first bool), atExit func(s os.Signal)) (stop func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var first time.Time // the first signal's arrival; read by stop once the watcher ended
	wg.Go(func() {
		for {
			select {
			case s := <-ch:
				switch {
				case first.IsZero():
					first = time.Now()
					request(s, true)
				case time.Since(first) < DuplicateSignalWindow:
					request(s, false)
				default:
					if atExit != nil {
						atExit(s)
					}
					signal.Stop(ch)
					signal.Reset(sigs...)
					if p, err := os.FindProcess(os.Getpid()); err == nil && p.Signal(s) == nil {
						return
					}
					code := 1
					if n, ok := s.(syscall.Signal); ok {
						code = 128 + int(n)
					}
					os.Exit(code)
				}
			case <-done:
				return
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			// A repeat of the first signal may still be on its way: the
			// launcher's forward of a Ctrl-C that reached this process
			// too, late on a loaded machine. With the handlers gone it
			// would find the signal's default action and kill the process
			// (a ddp_spawn worker that had saved its checkpoint, before it
			// handed the result back), although it is the same request.
			// Repeats are dropped until the window closes.
			if !first.IsZero() {
				if rest := DuplicateSignalWindow - time.Since(first); rest > 0 {
					go func() {
						end := time.NewTimer(rest)
						defer end.Stop()
						for {
							select {
							case <-ch:
							case <-end.C:
								signal.Stop(ch)
								return
							}
						}
					}()
					return
				}
			}
			signal.Stop(ch)
		})
	}
}

// SignalName names the signals a run stops on as a shell does: SIGINT,
// SIGTERM, SIGUSR1 (SLURM's warning), any other by its own name.
func SignalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case sigUSR1:
		return "SIGUSR1"
	}
	return s.String()
}

// BesideFirstRank says whether this process is a rank started, after its
// machine's first rank, by a launcher that shows every rank's output on
// its own terminal: the elastic supervisor (fulgur run, or a program's
// own FULGUR_MAX_RESTARTS supervisor) and ddp_spawn, which also pass a
// stop signal on to every rank. What each rank would say of the stop
// (that it finishes its step; how the run stopped) is then said once per
// machine, by the first rank. Ranks started any other way (mpirun, srun,
// torchrun variables set by hand, ddp's own ranks, which write rank_N.log)
// each say theirs: their own output may be all a user sees of them.
// lookup is os.LookupEnv, or a stand-in.
func BesideFirstRank(lookup func(string) (string, bool)) bool {
	l, _ := lookup(EnvLauncher)
	r, _ := lookup(EnvLocalRank)
	return (l == "elastic" || l == "ddp_spawn") && r != "0"
}
