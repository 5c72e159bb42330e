package profiler_test

import (
	"fmt"
	"time"

	"github.com/fulgur-ml/fulgur/profiler"
)

// Simple's rows: each action's calls, mean, total and share of the fit span.
func ExampleSimple() {
	p := profiler.NewSimple()
	t0 := time.Unix(0, 0)
	p.Record("fit", t0, t0.Add(2*time.Second))
	for i := 0; i < 4; i++ {
		p.Record("optimizer step", t0, t0.Add(100*time.Millisecond))
	}
	for _, r := range p.Rows() {
		fmt.Printf("%-15s %d calls, mean %v, total %v, %.0f%% of fit\n", r.Action, r.Calls, r.Mean, r.Total, 100*r.Share)
	}
	// Output:
	// fit             1 calls, mean 2s, total 2s, 100% of fit
	// optimizer step  4 calls, mean 100ms, total 400ms, 20% of fit
}
