package strategy

import (
	"os"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// DuplicateSignalWindow is how long after the first SIGINT or SIGTERM a
// repeat counts as the same request (trainer.DuplicateSignalWindow): a
// shell or timeout(1) signalling the whole process group, a launcher
// forwarding it to its ranks, or go run to its child, makes one request
// arrive two or three times. A signal after the window exits at once.
const DuplicateSignalWindow = launch.DuplicateSignalWindow

// WatchStopSignals watches sigs, the signals that ask a run to stop, for
// the trainer's Fit and for launchers that forward them to their ranks
// (ddp_spawn), until the function it returns is called: see
// launch.WatchStopSignals, which it is (the elastic supervisor, below
// strategy, reads signals the same way).
func WatchStopSignals(sigs []os.Signal, request func(s os.Signal, first bool), atExit func(s os.Signal)) (stop func()) {
	return launch.WatchStopSignals(sigs, request, atExit)
}

// SignalName names a stop signal (SIGINT, SIGTERM, SIGUSR1): see
// launch.SignalName, which it is.
func SignalName(s os.Signal) string { return launch.SignalName(s) }

// BesideFirstRank says whether this process is a rank the elastic
// supervisor started after its machine's first rank, whose account of a
// stop that rank gives: see launch.BesideFirstRank, which it is.
func BesideFirstRank(lookup func(string) (string, bool)) bool {
	return launch.BesideFirstRank(lookup)
}
