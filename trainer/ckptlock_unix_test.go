//go:build !windows

package trainer_test

import (
	"os"
	"syscall"
)

// holdAsWriter holds f as a save in progress does (trainer's lockTemp): an
// exclusive flock, which the next Fit's cleanup of interrupted saves
// respects.
func holdAsWriter(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }

// sigUSR1 is SLURM's warning signal.
var sigUSR1 os.Signal = syscall.SIGUSR1
