//go:build !windows

package launch

import "syscall"

// sigUSR1 is SLURM's warning signal (sent ahead of a job's time limit).
var sigUSR1 = syscall.SIGUSR1
