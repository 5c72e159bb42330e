//go:build !windows

package main

import (
	"runtime"
	"syscall"
	"time"
)

func readStepCounts(ms *runtime.MemStats) stepCounts {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return stepCounts{}
	}
	return stepCounts{GC: ms.NumGC, MinFlt: ru.Minflt, MajFlt: ru.Majflt, VolCSw: ru.Nvcsw, InvolCSw: ru.Nivcsw, valid: true}
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
