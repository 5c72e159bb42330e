package launch_test

import (
	"os"
	"syscall"
)

// signalSelf ends this process as SIGKILL does, whatever sig: Windows
// sends a process no other signal (os.Process.Signal knows only Kill), so
// the tests of another signal's own handling
// (TestElasticStopsWhenSIGINTKillsARank) hold on unix only.
func signalSelf(sig syscall.Signal) {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Kill()
	}
}
