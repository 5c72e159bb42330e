package collectivetest

import (
	"context"
	"errors"
	"fmt"
	"math"
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
			for _, rc := range rankCases {
				t.Run(rc.name, func(t *testing.T) {
					s.mustEach(t, s.group(t, n), func(ctx context.Context, c collective.Collective) error { return rc.run(t, ctx, c) })
				})
			}
			t.Run("BarrierOrder", func(t *testing.T) { s.barrierOrder(t, n) })
			t.Run("BadBuffer", func(t *testing.T) { s.badBuffer(t, n) })
			if n >= 2 {
				t.Run("Mismatch", func(t *testing.T) { s.mismatch(t, n) })
				if !o.SkipKill {
					t.Run("ClosedPeer", func(t *testing.T) { s.closedPeer(t, n) })
				}
			}
		})
	}
	for n := 2; n <= min(4, o.MaxRanks); n++ {
		t.Run(fmt.Sprintf("ranks=%d/Sizes", n), func(t *testing.T) { s.sizes(t, n) })
	}
	t.Run("Split", s.splitCases)
	t.Run("100MB", func(t *testing.T) {
		if testing.Short() {
			t.Skip("100 MB all-reduce skipped with -short")
		}
		s.mustEach(t, s.group(t, 2), func(ctx context.Context, c collective.Collective) error { return bigRank(t, ctx, c) })
	})
}

// RunRank runs the rank cases of the suite on the one rank this process
// holds, for backends whose ranks are processes started by a launcher (mpi).
// Every rank of the group must call it at the same time; every process checks
// its own results. The closed-peer and in-process ordering checks need all
// ranks in one process and are left to RunAll.
func RunRank(t *testing.T, c collective.Collective) {
	for _, rc := range rankCases {
		t.Run(rc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if err := rc.run(t, ctx, c); err != nil {
				t.Fatalf("rank %d: %v", c.Rank(), err)
			}
		})
	}
	t.Run("100MB", func(t *testing.T) {
		if testing.Short() {
			t.Skip("100 MB all-reduce skipped with -short")
		}
		if err := bigRank(t, context.Background(), c); err != nil {
			t.Fatalf("rank %d: %v", c.Rank(), err)
		}
	})
	t.Run("Split", func(t *testing.T) { splitRank(t, c) })
	t.Run("Mismatch", func(t *testing.T) {
		if c.Size() < 2 {
			t.Skip("one rank cannot disagree with itself")
		}
		err := c.AllReduce(context.Background(), make([]float32, 10+min(c.Rank(), 1)), collective.Sum)
		if !errors.Is(err, collective.ErrMismatch) {
			t.Errorf("rank %d: got %v, want an error wrapping ErrMismatch", c.Rank(), err)
		}
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

// A rank case runs on one rank: it fills that rank's buffers, calls the
// operations and checks that rank's results. RunAll runs it on every rank of
// an in-process group at once; RunRank on the one rank a process holds.
type rankCase struct {
	name string
	run  func(t *testing.T, ctx context.Context, c collective.Collective) error
}

var rankCases = []rankCase{
	{"AllReduce", allReduceRank},
	{"Broadcast", broadcastRank},
	{"AllGather", allGatherRank},
	{"ReduceScatter", reduceScatterRank},
	{"Barrier", barrierRank},
	{"Async", asyncRank},
}

func allReduceRank(t *testing.T, ctx context.Context, c collective.Collective) error {
	n, r := c.Size(), c.Rank()
	for _, dt := range dtypes {
		for _, l := range lengths(n) {
			for _, op := range ops {
				buf := fill(dt, l, r, 0)
				if err := c.AllReduce(ctx, buf, op); err != nil {
					return err
				}
				check(t, fmt.Sprintf("%s len %d %s rank %d", dt, l, op, r), buf, func(i int) float64 { return want(dt, n, i, op) })
			}
		}
	}
	return nil
}

func broadcastRank(t *testing.T, ctx context.Context, c collective.Collective) error {
	n, r := c.Size(), c.Rank()
	for _, dt := range dtypes {
		for _, l := range lengths(n) {
			for root := 0; root < n; root++ {
				buf := fill(dt, l, r, 0)
				if err := c.Broadcast(ctx, buf, root); err != nil {
					return err
				}
				check(t, fmt.Sprintf("%s len %d root %d rank %d", dt, l, root, r), buf, func(i int) float64 { return rounded(dt, val(root, i)) })
			}
		}
	}
	return nil
}

func rounded(dt collective.DType, v float64) float64 {
	if dt == collective.Float32 {
		return float64(float32(v))
	}
	return v
}

func allGatherRank(t *testing.T, ctx context.Context, c collective.Collective) error {
	n, r := c.Size(), c.Rank()
	for _, dt := range dtypes {
		for _, l := range append(lengths(n), 4*n) {
			// rank r contributes the elements of block r of val(r, ·).
			send := fill(dt, collective.BlockLen(l, n, r), r, collective.Offset(l, n, r))
			recv := collective.Alloc(dt, l)
			if err := c.AllGather(ctx, send, recv); err != nil {
				return err
			}
			owner := func(i int) int {
				for q := n - 1; q >= 0; q-- {
					if i >= collective.Offset(l, n, q) {
						return q
					}
				}
				return 0
			}
			check(t, fmt.Sprintf("%s len %d rank %d", dt, l, r), recv, func(i int) float64 { return rounded(dt, val(owner(i), i)) })
		}
	}
	return nil
}

func reduceScatterRank(t *testing.T, ctx context.Context, c collective.Collective) error {
	n, r := c.Size(), c.Rank()
	for _, dt := range dtypes {
		for _, l := range append(lengths(n), 4*n) {
			for _, op := range ops {
				send := fill(dt, l, r, 0)
				recv := collective.Alloc(dt, collective.BlockLen(l, n, r))
				if err := c.ReduceScatter(ctx, send, recv, op); err != nil {
					return err
				}
				off := collective.Offset(l, n, r)
				check(t, fmt.Sprintf("%s len %d %s rank %d", dt, l, op, r), recv, func(i int) float64 { return want(dt, n, off+i, op) })
				check(t, fmt.Sprintf("%s len %d %s rank %d: send kept", dt, l, op, r), send, func(i int) float64 { return rounded(dt, val(r, i)) })
			}
		}
	}
	return nil
}

// barrierRank checks that barriers leave the group usable and in step; the
// ordering property itself is checked in process by barrierOrder.
func barrierRank(t *testing.T, ctx context.Context, c collective.Collective) error {
	n, r := c.Size(), c.Rank()
	for i := range 3 {
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		// A barrier must leave the group usable and in step.
		buf := []float64{float64(r + i)}
		if err := c.AllReduce(ctx, buf, collective.Sum); err != nil {
			return err
		}
		if want := float64(n*(n-1)/2 + n*i); buf[0] != want {
			t.Errorf("rank %d: all-reduce after barrier %d = %v, want %v", r, i, buf[0], want)
		}
	}
	return nil
}

func asyncRank(t *testing.T, ctx context.Context, c collective.Collective) error {
	n, r := c.Size(), c.Rank()
	const k = 8
	a, ok := c.(collective.Async)
	if !ok {
		return fmt.Errorf("%T does not implement collective.Async", c)
	}
	bufs := make([]any, k)
	hs := make([]collective.Handle, k)
	for j := range k {
		bufs[j] = fill(dtypes[j%2], 100*j+j%3, r, 0)
		hs[j] = a.AllReduceAsync(ctx, bufs[j], ops[j%len(ops)])
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
	for j, b := range bufs {
		dt, op := dtypes[j%2], ops[j%len(ops)]
		check(t, fmt.Sprintf("async %d rank %d", j, r), b, func(i int) float64 { return want(dt, n, i, op) })
	}
	return asyncShardRank(t, ctx, a, n, r)
}

// asyncShardRank interleaves async all-gathers and reduce-scatters (what
// a fully sharded strategy issues: the next block's parameters while this
// one's gradients are reduced), waits for them out of order and checks
// every result.
func asyncShardRank(t *testing.T, ctx context.Context, a collective.Async, n, r int) error {
	const k = 6
	type op struct {
		dt         collective.DType
		l          int
		send, recv any
		h          collective.Handle
	}
	var all []op
	for j := range k {
		dt, l := dtypes[j%2], 5*j+n+j%3
		if j%2 == 0 {
			o := op{dt: dt, l: l, send: fill(dt, collective.BlockLen(l, n, r), r, collective.Offset(l, n, r)), recv: collective.Alloc(dt, l)}
			o.h = a.AllGatherAsync(ctx, o.send, o.recv)
			all = append(all, o)
		} else {
			o := op{dt: dt, l: l, send: fill(dt, l, r, 0), recv: collective.Alloc(dt, collective.BlockLen(l, n, r))}
			o.h = a.ReduceScatterAsync(ctx, o.send, o.recv, collective.Sum)
			all = append(all, o)
		}
	}
	for j := len(all) - 1; j >= 0; j-- {
		if err := all[j].h.Wait(); err != nil {
			return fmt.Errorf("async all-gather/reduce-scatter %d: %w", j, err)
		}
	}
	for j, o := range all {
		if j%2 == 0 {
			owner := func(i int) int {
				for q := n - 1; q >= 0; q-- {
					if i >= collective.Offset(o.l, n, q) {
						return q
					}
				}
				return 0
			}
			check(t, fmt.Sprintf("async all-gather %d rank %d", j, r), o.recv, func(i int) float64 { return rounded(o.dt, val(owner(i), i)) })
		} else {
			off := collective.Offset(o.l, n, r)
			check(t, fmt.Sprintf("async reduce-scatter %d rank %d", j, r), o.recv, func(i int) float64 { return want(o.dt, n, off+i, collective.Sum) })
		}
	}
	return nil
}

// barrierOrder checks, in process, that no rank leaves a barrier before
// every rank has entered it.
func (s suite) barrierOrder(t *testing.T, n int) {
	cs := s.group(t, n)
	var mu sync.Mutex
	count := 0
	seen := make([]int, n)
	s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
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

// sizeLengths are all-reduce sizes around those where backends switch
// algorithms or rounds (128 KiB, 256 KiB, 512 KiB and 1 MiB), each less one
// element, exact and more one element; small ones come between large ones
// so that successive operations take different paths.
var sizeLengths = []struct{ bytes, plus int }{
	{256 << 10, 0}, {1 << 20, 1}, {256 << 10, -1}, {128 << 10, 0}, {512 << 10, 1}, {128 << 10, 1}, {256 << 10, 1},
	{512 << 10, -1}, {1 << 20, -1}, {64 << 10, 0}, {128 << 10, -1}, {512 << 10, 0},
}

// sizes checks all-reduces at sizeLengths with values whose sums round,
// so that the order of reduction shows: every rank must end with the same
// bits (whatever algorithm a backend picks for the size, all its ranks
// must agree), close to the exact result. A broadcast after each one mixes
// in another kind of operation.
func (s suite) sizes(t *testing.T, n int) {
	cs := s.group(t, n)
	for _, dt := range dtypes {
		for _, sl := range sizeLengths {
			l := sl.bytes/dt.Size() + sl.plus
			for _, op := range []collective.Op{collective.Sum, collective.Mean, collective.Max} {
				bufs := make([]any, n)
				for r := range bufs {
					bufs[r] = collective.Alloc(dt, l)
					fillRounding(bufs[r], r)
				}
				what := fmt.Sprintf("%s all-reduce of %d elements (%s)", dt, l, op)
				errs := s.each(cs, func(ctx context.Context, c collective.Collective) error {
					if err := c.AllReduce(ctx, bufs[c.Rank()], op); err != nil {
						return err
					}
					return c.Broadcast(ctx, collective.Sub(bufs[c.Rank()], 0, min(l, 100)), n-1)
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("%s: rank %d: %v", what, r, err)
					}
				}
				sameBits(t, what, bufs)
				closeTo(t, what, bufs[0], n, op)
			}
		}
	}
}

// fillRounding fills rank r's buffer with values whose float32 and float64
// sums round (thirds of varied magnitude), signs mixed.
func fillRounding(buf any, r int) {
	v := func(i int) float64 { return float64((i*7+r*13)%23-11) / 3 * (1 + float64(r%3)/7) }
	switch b := buf.(type) {
	case []float32:
		for i := range b {
			b[i] = float32(v(i))
		}
	case []float64:
		for i := range b {
			b[i] = v(i)
		}
	}
}

func sameBits(t *testing.T, what string, bufs []any) {
	t.Helper()
	ref := collective.Bytes(bufs[0])
	for r := 1; r < len(bufs); r++ {
		got := collective.Bytes(bufs[r])
		for i := range ref {
			if got[i] != ref[i] {
				t.Errorf("%s: rank %d differs from rank 0 at byte %d: ranks must end with the same bits", what, r, i)
				break
			}
		}
	}
}

func closeTo(t *testing.T, what string, got any, n int, op collective.Op) {
	t.Helper()
	exact := func(i int) float64 {
		acc := 0.0
		for r := 0; r < n; r++ {
			b := collective.Alloc(collective.Float64, i+1).([]float64)
			fillRounding(b, r)
			x := b[i]
			switch {
			case r == 0:
				acc = x
			case op == collective.Max:
				acc = max(acc, x)
			default:
				acc += x
			}
		}
		if op == collective.Mean {
			acc /= float64(n)
		}
		return acc
	}
	var l int
	at := func(i int) float64 { return 0 }
	switch b := got.(type) {
	case []float32:
		l, at = len(b), func(i int) float64 { return float64(b[i]) }
	case []float64:
		l, at = len(b), func(i int) float64 { return b[i] }
	}
	// Spot checks keep the reference cheap; the first and last elements of
	// a round are where an off-by-one would show.
	for _, i := range []int{0, 1, l / 3, l / 2, l - 2, l - 1} {
		if i < 0 || i >= l {
			continue
		}
		if w := exact(i); math.Abs(at(i)-w) > 1e-5*(1+math.Abs(w)) {
			t.Errorf("%s: element %d = %v, want %v", what, i, at(i), w)
		}
	}
}

func bigRank(t *testing.T, ctx context.Context, c collective.Collective) error {
	const elems = 100 << 20 / 4
	n, r := c.Size(), c.Rank()
	buf := make([]float32, elems)
	for i := range buf {
		buf[i] = float32(val(r, i))
	}
	if err := c.AllReduce(ctx, buf, collective.Sum); err != nil {
		return err
	}
	check(t, fmt.Sprintf("100MB rank %d", r), buf, func(i int) float64 { return want(collective.Float32, n, i, collective.Sum) })
	return nil
}

// Start builds the n ranks of a group at once, rank r by open(r) on a
// goroutine of its own (ranks meet each other while they start), fails the
// test naming the first rank that could not start, and closes every rank
// when the test ends. Backends' tests use it to make the groups RunAll runs
// on.
func Start(t testing.TB, n int, open func(r int) (collective.Collective, error)) []collective.Collective {
	t.Helper()
	out := make([]collective.Collective, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r], errs[r] = open(r)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range out {
			if c != nil {
				c.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}
