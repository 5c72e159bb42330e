package collectivetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// NewGroup builds the n ranks of a fresh group (rank i at index i) and
// registers their cleanup with t.
type NewGroup func(t *testing.T, n int) []collective.Collective

// Options tunes RunAll for a backend.
type Options struct {
	// MaxRanks is the largest group tried (default 5).
	MaxRanks int
	// OpTimeout bounds each rank's call in the suite (default 60s): a backend
	// that hangs fails the test instead of stalling it.
	OpTimeout time.Duration
	// SkipKill skips the closed-peer test (for backends that cannot detect it).
	SkipKill bool
}

// RunAll runs the whole suite with default options.
func RunAll(t *testing.T, newGroup NewGroup) { RunAllWith(t, newGroup, Options{}) }

// RunAllWith runs the whole suite.
func RunAllWith(t *testing.T, newGroup NewGroup, o Options) {
	if o.MaxRanks == 0 {
		o.MaxRanks = 5
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = 60 * time.Second
	}
	s := suite{newGroup: newGroup, o: o}
	for n := 1; n <= o.MaxRanks; n++ {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			t.Run("AllReduce", func(t *testing.T) { s.allReduce(t, n) })
			t.Run("Broadcast", func(t *testing.T) { s.broadcast(t, n) })
			t.Run("AllGather", func(t *testing.T) { s.allGather(t, n) })
			t.Run("ReduceScatter", func(t *testing.T) { s.reduceScatter(t, n) })
			t.Run("Barrier", func(t *testing.T) { s.barrier(t, n) })
			t.Run("Async", func(t *testing.T) { s.async(t, n) })
			t.Run("BadBuffer", func(t *testing.T) { s.badBuffer(t, n) })
			if n >= 2 {
				t.Run("Mismatch", func(t *testing.T) { s.mismatch(t, n) })
				if !o.SkipKill {
					t.Run("ClosedPeer", func(t *testing.T) { s.closedPeer(t, n) })
				}
			}
		})
	}
	t.Run("100MB", func(t *testing.T) {
		if testing.Short() {
			t.Skip("100 MB all-reduce skipped with -short")
		}
		s.big(t, 2)
	})
}

type suite struct {
	newGroup NewGroup
	o        Options
}

// val is rank r's element i: multiples of 1/4 below 20 in magnitude, so sums
// of up to 5 ranks are exact in float32 and independent of summation order.
func val(r, i int) float64 { return float64((r*31+i*7)%19) - 9 + float64(r)*0.25 }

func lengths(n int) []int { return []int{0, 1, 7, 3*n + 1, 1000} }

var dtypes = []collective.DType{collective.Float32, collective.Float64}

var ops = []collective.Op{collective.Sum, collective.Mean, collective.Max, collective.Min}

func fill(dt collective.DType, n, r, off int) any {
	switch dt {
	case collective.Float64:
		b := make([]float64, n)
		for i := range b {
			b[i] = val(r, i+off)
		}
		return b
	default:
		b := make([]float32, n)
		for i := range b {
			b[i] = float32(val(r, i+off))
		}
		return b
	}
}

// expect is the reduction of element i over ranks, computed in dtype T.
func expect[T collective.Float](n, i int, op collective.Op) T {
	acc := T(val(0, i))
	for r := 1; r < n; r++ {
		v := T(val(r, i))
		switch op {
		case collective.Sum, collective.Mean:
			acc += v
		case collective.Max:
			acc = max(acc, v)
		case collective.Min:
			acc = min(acc, v)
		}
	}
	if op == collective.Mean {
		acc /= T(n)
	}
	return acc
}

func check(t *testing.T, what string, got any, want func(i int) float64) {
	t.Helper()
	bad := 0
	switch b := got.(type) {
	case []float32:
		for i, v := range b {
			if w := float32(want(i)); v != w {
				if bad < 3 {
					t.Errorf("%s: element %d = %v, want %v", what, i, v, w)
				}
				bad++
			}
		}
	case []float64:
		for i, v := range b {
			if w := want(i); v != w {
				if bad < 3 {
					t.Errorf("%s: element %d = %v, want %v", what, i, v, w)
				}
				bad++
			}
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d wrong elements in all", what, bad)
	}
}

func want(dt collective.DType, n, i int, op collective.Op) float64 {
	if dt == collective.Float32 {
		return float64(expect[float32](n, i, op))
	}
	return expect[float64](n, i, op)
}

// each runs f on every rank concurrently and returns the per-rank errors.
func (s suite) each(cs []collective.Collective, f func(ctx context.Context, c collective.Collective) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), s.o.OpTimeout)
			defer cancel()
			errs[r] = f(ctx, c)
		}()
	}
	wg.Wait()
	return errs
}

func (s suite) mustEach(t *testing.T, cs []collective.Collective, f func(ctx context.Context, c collective.Collective) error) {
	t.Helper()
	for r, err := range s.each(cs, f) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func (s suite) group(t *testing.T, n int) []collective.Collective {
	t.Helper()
	cs := s.newGroup(t, n)
	if len(cs) != n {
		t.Fatalf("newGroup(%d) returned %d ranks", n, len(cs))
	}
	for r, c := range cs {
		if c.Rank() != r || c.Size() != n {
			t.Fatalf("rank %d reports Rank()=%d Size()=%d, want %d, %d", r, c.Rank(), c.Size(), r, n)
		}
	}
	return cs
}

func (s suite) allReduce(t *testing.T, n int) {
	cs := s.group(t, n)
	for _, dt := range dtypes {
		for _, l := range lengths(n) {
			for _, op := range ops {
				bufs := make([]any, n)
				for r := range bufs {
					bufs[r] = fill(dt, l, r, 0)
				}
				s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
					return c.AllReduce(ctx, bufs[c.Rank()], op)
				})
				for r := range bufs {
					check(t, fmt.Sprintf("%s len %d %s rank %d", dt, l, op, r), bufs[r], func(i int) float64 { return want(dt, n, i, op) })
				}
			}
		}
	}
}

func (s suite) broadcast(t *testing.T, n int) {
	cs := s.group(t, n)
	for _, dt := range dtypes {
		for _, l := range lengths(n) {
			for root := 0; root < n; root++ {
				bufs := make([]any, n)
				for r := range bufs {
					bufs[r] = fill(dt, l, r, 0)
				}
				s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
					return c.Broadcast(ctx, bufs[c.Rank()], root)
				})
				for r := range bufs {
					check(t, fmt.Sprintf("%s len %d root %d rank %d", dt, l, root, r), bufs[r], func(i int) float64 { return rounded(dt, val(root, i)) })
				}
			}
		}
	}
}

func rounded(dt collective.DType, v float64) float64 {
	if dt == collective.Float32 {
		return float64(float32(v))
	}
	return v
}

func (s suite) allGather(t *testing.T, n int) {
	cs := s.group(t, n)
	for _, dt := range dtypes {
		for _, l := range append(lengths(n), 4*n) {
			sends, recvs := make([]any, n), make([]any, n)
			for r := range sends {
				// rank r contributes the elements of block r of val(r, ·).
				sends[r] = fill(dt, collective.BlockLen(l, n, r), r, collective.Offset(l, n, r))
				recvs[r] = collective.Alloc(dt, l)
			}
			s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
				return c.AllGather(ctx, sends[c.Rank()], recvs[c.Rank()])
			})
			owner := func(i int) int {
				for r := n - 1; r >= 0; r-- {
					if i >= collective.Offset(l, n, r) {
						return r
					}
				}
				return 0
			}
			for r := range recvs {
				check(t, fmt.Sprintf("%s len %d rank %d", dt, l, r), recvs[r], func(i int) float64 { return rounded(dt, val(owner(i), i)) })
			}
		}
	}
}

func (s suite) reduceScatter(t *testing.T, n int) {
	cs := s.group(t, n)
	for _, dt := range dtypes {
		for _, l := range append(lengths(n), 4*n) {
			for _, op := range ops {
				sends, recvs := make([]any, n), make([]any, n)
				for r := range sends {
					sends[r] = fill(dt, l, r, 0)
					recvs[r] = collective.Alloc(dt, collective.BlockLen(l, n, r))
				}
				s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
					return c.ReduceScatter(ctx, sends[c.Rank()], recvs[c.Rank()], op)
				})
				for r := range recvs {
					off := collective.Offset(l, n, r)
					check(t, fmt.Sprintf("%s len %d %s rank %d", dt, l, op, r), recvs[r], func(i int) float64 { return want(dt, n, off+i, op) })
				}
			}
		}
	}
}

func (s suite) barrier(t *testing.T, n int) {
	cs := s.group(t, n)
	// Every rank increments before the barrier and reads after it: each must
	// see all n increments.
	var mu sync.Mutex
	count := 0
	seen := make([]int, n)
	s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
		for range 3 {
			if err := c.Barrier(ctx); err != nil {
				return err
			}
		}
		mu.Lock()
		count++
		mu.Unlock()
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		mu.Lock()
		seen[c.Rank()] = count
		mu.Unlock()
		return nil
	})
	for r, v := range seen {
		if v != n {
			t.Errorf("rank %d saw %d arrivals after the barrier, want %d", r, v, n)
		}
	}
}

func (s suite) async(t *testing.T, n int) {
	cs := s.group(t, n)
	const k = 8
	bufs := make([][]any, n)
	for r := range bufs {
		bufs[r] = make([]any, k)
		for j := range k {
			dt := dtypes[j%2]
			bufs[r][j] = fill(dt, 100*j+j%3, r, 0)
		}
	}
	s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
		a, ok := c.(collective.Async)
		if !ok {
			return fmt.Errorf("%T does not implement collective.Async", c)
		}
		hs := make([]collective.Handle, k)
		for j := range k {
			hs[j] = a.AllReduceAsync(ctx, bufs[c.Rank()][j], ops[j%len(ops)])
		}
		// A synchronous call queued behind the async ones keeps its place.
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		for j := k - 1; j >= 0; j-- {
			if err := hs[j].Wait(); err != nil {
				return fmt.Errorf("async op %d: %w", j, err)
			}
		}
		return nil
	})
	for r := range bufs {
		for j, b := range bufs[r] {
			dt := dtypes[j%2]
			op := ops[j%len(ops)]
			check(t, fmt.Sprintf("async %d rank %d", j, r), b, func(i int) float64 { return want(dt, n, i, op) })
		}
	}
}

func (s suite) badBuffer(t *testing.T, n int) {
	cs := s.group(t, n)
	c := cs[0]
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
	}{
		{"int slice", func() error { return c.AllReduce(ctx, []int{1}, collective.Sum) }},
		{"nil", func() error { return c.Broadcast(ctx, nil, 0) }},
		{"bad op", func() error { return c.AllReduce(ctx, []float32{1}, collective.Op(9)) }},
		{"bad root", func() error { return c.Broadcast(ctx, []float32{1}, n) }},
		{"dtype pair", func() error { return c.AllGather(ctx, []float32{1}, make([]float64, n)) }},
		{"short recv", func() error { return c.ReduceScatter(ctx, make([]float32, 2*n), make([]float32, 1), collective.Sum) }},
		{"long send", func() error { return c.AllGather(ctx, make([]float32, 2), make([]float32, n)) }},
	}
	for _, tc := range cases {
		if err := tc.call(); !errors.Is(err, collective.ErrBadBuffer) {
			t.Errorf("%s: got %v, want an error wrapping ErrBadBuffer", tc.name, err)
		}
	}
	// A local argument error must not desynchronise the group.
	bufs := make([]any, n)
	for r := range bufs {
		bufs[r] = fill(collective.Float32, 5, r, 0)
	}
	s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
		return c.AllReduce(ctx, bufs[c.Rank()], collective.Sum)
	})
	check(t, "after bad calls", bufs[0], func(i int) float64 { return want(collective.Float32, n, i, collective.Sum) })
}

func (s suite) mismatch(t *testing.T, n int) {
	for _, tc := range []struct {
		name string
		buf  func(r int) any
	}{
		{"length", func(r int) any { return make([]float32, 10+min(r, 1)) }},
		{"dtype", func(r int) any {
			if r == n-1 {
				return make([]float64, 10)
			}
			return make([]float32, 10)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := s.group(t, n)
			errs := s.each(cs, func(ctx context.Context, c collective.Collective) error {
				return c.AllReduce(ctx, tc.buf(c.Rank()), collective.Sum)
			})
			for r, err := range errs {
				if !errors.Is(err, collective.ErrMismatch) {
					t.Errorf("rank %d: got %v, want an error wrapping ErrMismatch", r, err)
				}
			}
		})
	}
}

func (s suite) closedPeer(t *testing.T, n int) {
	cs := s.group(t, n)
	// One healthy operation first, so connections are warm.
	s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error { return c.Barrier(ctx) })
	dead := n - 1
	if err := cs[dead].Close(); err != nil {
		t.Fatalf("close rank %d: %v", dead, err)
	}
	alive := cs[:dead]
	start := time.Now()
	errs := s.each(alive, func(ctx context.Context, c collective.Collective) error {
		return c.AllReduce(ctx, fill(collective.Float32, 1<<16, c.Rank(), 0), collective.Sum)
	})
	for r, err := range errs {
		switch {
		case err == nil:
			t.Errorf("rank %d: all-reduce succeeded without rank %d", r, dead)
		case errors.Is(err, context.DeadlineExceeded):
			t.Errorf("rank %d: only the test's deadline stopped it: %v", r, err)
		default:
			if p, ok := collective.PeerOf(err); !ok || p != dead {
				t.Errorf("rank %d: error %q blames rank %d (%v), want rank %d", r, err, p, ok, dead)
			}
		}
	}
	t.Logf("ranks noticed the closed peer after %v", time.Since(start))
}

func (s suite) big(t *testing.T, n int) {
	const elems = 100 << 20 / 4
	cs := s.group(t, n)
	bufs := make([][]float32, n)
	for r := range bufs {
		bufs[r] = make([]float32, elems)
		for i := range bufs[r] {
			bufs[r][i] = float32(val(r, i))
		}
	}
	s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
		return c.AllReduce(ctx, bufs[c.Rank()], collective.Sum)
	})
	for r := range bufs {
		check(t, fmt.Sprintf("100MB rank %d", r), bufs[r], func(i int) float64 { return want(collective.Float32, n, i, collective.Sum) })
	}
}
