package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
)

// The timed operations of a collective start only after the warm-up's
// operations and its time, on every rank alike (a rank that counted one
// more would hang its peers), so that a process's start-up is not measured.
func TestTimeCollectiveWarmsUpByCountAndTime(t *testing.T) {
	cs, err := inproc.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	const iters = 3
	type rank struct {
		times  []float64
		starts []time.Time // of every operation, warm-up included
		err    error
	}
	rs := make([]rank, 2)
	begin := time.Now()
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := collective.WithAsync(c)
			defer g.Close()
			buf := []float32{1}
			rs[r].times, rs[r].err = timeCollective(context.Background(), g, iters, func() error {
				rs[r].starts = append(rs[r].starts, time.Now())
				if r == 1 {
					// The slower rank decides: its time since the warm-up
					// began is the later one.
					time.Sleep(2 * time.Millisecond)
				}
				return g.AllReduce(context.Background(), buf, collective.Sum)
			})
		}()
	}
	wg.Wait()
	for r, x := range rs {
		if x.err != nil {
			t.Fatalf("rank %d: %v", r, x.err)
		}
		if len(x.times) != iters {
			t.Errorf("rank %d: %d timings, want %d", r, len(x.times), iters)
		}
		ops := len(x.starts)
		if ops < allreduceWarmup+iters {
			t.Errorf("rank %d ran %d operations: fewer than %d warm-up and %d timed", r, ops, allreduceWarmup, iters)
		}
		if ops != len(rs[0].starts) {
			t.Errorf("rank %d ran %d operations, rank 0 %d", r, ops, len(rs[0].starts))
		}
		if first := x.starts[ops-iters]; first.Sub(begin) < allreduceWarmTime {
			t.Errorf("rank %d: the first timed operation began %v after the start, inside the %v warm-up", r, first.Sub(begin), allreduceWarmTime)
		}
	}
}
