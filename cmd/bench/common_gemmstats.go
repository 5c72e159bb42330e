package main

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/fulgur-ml/fulgur/blas"
)

// gemmStats wraps the chosen matrix multiply and records, per shape, how
// many calls ran and how long they took (FULGUR_BENCH_GEMMSTATS=1): which
// multiplies a step makes and how fast the library runs each.
type gemmStats struct {
	blas.Impl
	mu    sync.Mutex
	calls map[gemmShape]*gemmTotal
}

type gemmShape struct {
	f64     bool
	tA, tB  bool
	m, n, k int
}

type gemmTotal struct {
	n int
	d time.Duration
}

func newGemmStats(impl blas.Impl) *gemmStats {
	return &gemmStats{Impl: impl, calls: map[gemmShape]*gemmTotal{}}
}

func (g *gemmStats) add(s gemmShape, d time.Duration) {
	g.mu.Lock()
	t := g.calls[s]
	if t == nil {
		t = &gemmTotal{}
		g.calls[s] = t
	}
	t.n++
	t.d += d
	g.mu.Unlock()
}

func (g *gemmStats) Sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	t0 := time.Now()
	g.Impl.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	g.add(gemmShape{false, tA, tB, m, n, k}, time.Since(t0))
}

func (g *gemmStats) Dgemm(tA, tB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	t0 := time.Now()
	g.Impl.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	g.add(gemmShape{true, tA, tB, m, n, k}, time.Since(t0))
}

// Threads passes the wrapped library's thread count on (blas.Threads).
func (g *gemmStats) Threads() int {
	if t, ok := g.Impl.(interface{ Threads() int }); ok {
		return t.Threads()
	}
	return 0
}

// report writes the shapes by total time, largest first.
func (g *gemmStats) report(w io.Writer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	type row struct {
		s gemmShape
		t gemmTotal
	}
	var rows []row
	var total time.Duration
	for s, t := range g.calls {
		rows = append(rows, row{s, *t})
		total += t.d
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].t.d > rows[j].t.d })
	fmt.Fprintf(w, "gemm calls by total time (%s, %v in all):\n", g.Impl.Name(), total.Round(time.Millisecond))
	fmt.Fprintf(w, "%6s %5s %5s %6s %6s %6s %9s %10s %8s\n", "dtype", "tA", "tB", "m", "n", "k", "calls", "time", "GFLOP/s")
	for _, r := range rows {
		dt := "f32"
		if r.s.f64 {
			dt = "f64"
		}
		flops := 2 * float64(r.s.m*r.s.n*r.s.k) * float64(r.t.n)
		fmt.Fprintf(w, "%6s %5v %5v %6d %6d %6d %9d %10v %8.1f\n", dt, r.s.tA, r.s.tB, r.s.m, r.s.n, r.s.k, r.t.n,
			r.t.d.Round(time.Microsecond), flops/r.t.d.Seconds()/1e9)
	}
}
