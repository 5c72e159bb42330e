package cputime_test

import (
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/internal/cputime"
)

// TestNowCountsWork: a busy loop of 50 ms of wall time adds CPU time.
func TestNowCountsWork(t *testing.T) {
	c0 := cputime.Now()
	x := 1.0
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
		x = x*1.0000001 + 1e-9
	}
	if d := cputime.Now() - c0; d <= 0 {
		t.Fatalf("CPU time grew by %v over a 50 ms busy loop (x=%v)", d, x)
	}
}
