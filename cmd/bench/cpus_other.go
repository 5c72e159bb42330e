//go:build !linux

package main

import "runtime"

// allowedCPUs are the CPUs ranks are pinned to, round robin (taskset, and
// so pinning, is Linux's).
func allowedCPUs() []int { return firstCPUs(runtime.NumCPU()) }
