package cputime

import "time"

// Now is the CPU time this process has used so far, user and system; 0
// where the platform does not report it.
func Now() time.Duration { return now() }
