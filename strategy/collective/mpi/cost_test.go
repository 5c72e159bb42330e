//go:build mpi

package mpi

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// BenchmarkAllReduceCost splits what this backend's all-reduce costs over
// a plain MPI program's MPI_Allreduce. Each iteration runs, one after
// another and each from a barrier: the call on the calling goroutine
// (plain_us), after the header all-gather (header_us), on a goroutine of
// its own that the caller waits for (goroutine_us), and the backend's
// AllReduce, which does both (backend_us); the figures are this rank's
// medians in microseconds. Every rank must run the same iterations, so
// give a fixed count (--tag-output tells the ranks' lines apart):
//
//	go test -tags mpi -c -o mpi.test ./strategy/collective/mpi
//	mpirun --allow-run-as-root --oversubscribe --tag-output -np 4 --mca btl vader,self ./mpi.test -test.run '^$' -test.bench AllReduceCost -test.benchtime 300x
func BenchmarkAllReduceCost(b *testing.B) {
	g, err := New()
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	ctx := context.Background()
	for _, bytes := range []int{256 << 10, 4 << 20} {
		buf := make([]float32, bytes/4)
		var mine [4]int64
		all := make([]int64, 4*g.Size())
		res := make(chan error, 1)
		variants := []struct {
			name string
			op   func() error
		}{
			{"plain_us", func() error { return worldAllReduce(buf) }},
			{"header_us", func() error {
				if err := worldHeader(&mine, all); err != nil {
					return err
				}
				return worldAllReduce(buf)
			}},
			{"goroutine_us", func() error {
				go func() { res <- worldAllReduce(buf) }()
				return <-res
			}},
			{"backend_us", func() error { return g.AllReduce(ctx, buf, collective.Sum) }},
		}
		b.Run(fmt.Sprintf("ranks=%d/bytes=%d", g.Size(), bytes), func(b *testing.B) {
			times := make([][]float64, len(variants))
			for range b.N {
				for i, v := range variants {
					if err := worldBarrier(); err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					if err := v.op(); err != nil {
						b.Fatal(err)
					}
					times[i] = append(times[i], float64(time.Since(t0).Microseconds()))
				}
			}
			for i, v := range variants {
				slices.Sort(times[i])
				b.ReportMetric(times[i][len(times[i])/2], v.name)
			}
		})
	}
}
