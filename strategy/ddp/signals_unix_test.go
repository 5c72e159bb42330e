//go:build !windows

package ddp_test

import (
	"os"
	"syscall"
)

// stopSelf stops this process with SIGSTOP: a rank that hangs.
func stopSelf() { syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
