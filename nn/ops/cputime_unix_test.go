//go:build unix

package ops

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time this process has used, user and system: on a
// shared machine, a benchmark's rate per CPU second moves far less with the
// other load than its rate per wall second.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
