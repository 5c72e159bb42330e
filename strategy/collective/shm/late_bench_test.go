//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// latePeerEnv makes a worker run latePeer for that many rounds.
const latePeerEnv = "FULGUR_SHM_LATE_PEER"

// latePeer: rank 1 computes for 5 ms (past a barrier's spin), then joins an
// all-reduce carrying the time it arrived; rank 0 joins at once, waits,
// and takes how long after rank 1's arrival it came out. Rank 0 prints
// the median and mean of that lateness in µs.
func latePeer(ctx context.Context, g collective.Group, rounds int) int {
	var late []float64
	buf := make([]float64, 1)
	for i := 0; i < rounds; i++ {
		buf[0] = 0
		if g.Rank() == 1 {
			for t0 := monotonic(); monotonic()-t0 < 5e6; {
			}
			buf[0] = float64(monotonic())
		}
		if err := g.AllReduce(ctx, buf, collective.Sum); err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		late = append(late, float64(monotonic())-buf[0])
	}
	if g.Rank() == 0 {
		sort.Float64s(late)
		var sum float64
		for _, l := range late {
			sum += l
		}
		fmt.Printf("LATE %.1f %.1f\n", late[len(late)/2]/1e3, sum/float64(len(late))/1e3)
	}
	g.Close()
	return 0
}

// monotonic is CLOCK_MONOTONIC in ns, one clock for every process.
func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// BenchmarkBarrierLatePeerProcesses: two ranks as processes with one P
// each (GOMAXPROCS=1, as the pinned ranks of cmd/bench's scaling
// workload); rank 1 comes 5 ms late to each all-reduce, past rank 0's
// spin. Reported: how long after rank 1's arrival rank 0 came out, median
// and mean over b.N rounds (µs-late-median, µs-late-mean).
func BenchmarkBarrierLatePeerProcesses(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	procs := startRanks(ctx, b, 2, "BACKEND=shm", "GOMAXPROCS=1", latePeerEnv+"="+strconv.Itoa(max(b.N, 1)))
	l, err := procs[0].line("LATE")
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			b.Fatalf("%v\n%s", err, p.log.String())
		}
	}
	f := strings.Fields(l)
	med, _ := strconv.ParseFloat(f[1], 64)
	mean, _ := strconv.ParseFloat(f[2], 64)
	b.ReportMetric(med, "µs-late-median")
	b.ReportMetric(mean, "µs-late-mean")
	b.ReportMetric(0, "ns/op")
}
