//go:build !unix

package ops

import "time"

// cpuTime is unknown here: benchmarks report no per-CPU-second rate.
func cpuTime() time.Duration { return 0 }
