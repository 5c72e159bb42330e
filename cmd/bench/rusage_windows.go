package main

import (
	"runtime"
	"syscall"
	"time"
)

// readStepCounts: Windows has no getrusage; the counts are left out.
func readStepCounts(*runtime.MemStats) stepCounts { return stepCounts{} }

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	h, err := syscall.GetCurrentProcess()
	if err != nil {
		return 0
	}
	var c, e, k, u syscall.Filetime
	if err := syscall.GetProcessTimes(h, &c, &e, &k, &u); err != nil {
		return 0
	}
	ft := func(f syscall.Filetime) int64 { return int64(f.HighDateTime)<<32 | int64(f.LowDateTime) }
	return time.Duration((ft(k) + ft(u)) * 100)
}
