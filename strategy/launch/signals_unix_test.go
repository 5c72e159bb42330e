//go:build !windows

package launch_test

import (
	"os"
	"syscall"
)

// signalSelf sends sig to this process, as an outside hand would: a rank
// that dies of SIGKILL, or of SIGINT before it handles signals.
func signalSelf(sig syscall.Signal) { syscall.Kill(os.Getpid(), sig) }
