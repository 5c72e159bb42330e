package main

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// allowedCPUs are the CPUs this process may run on (its affinity mask),
// in order: the ones ranks are pinned to, round robin, as mpirun binds
// its ranks to the cores it may use.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return firstCPUs(runtime.NumCPU())
	}
	var out []int
	for cpu := 0; cpu < len(set)*64; cpu++ {
		if set.IsSet(cpu) {
			out = append(out, cpu)
		}
	}
	if len(out) == 0 {
		return firstCPUs(runtime.NumCPU())
	}
	return out
}
