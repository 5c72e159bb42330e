package collective_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

func TestCountsOffsets(t *testing.T) {
	for _, tc := range []struct {
		n, size int
		want    []int
	}{
		{0, 3, []int{0, 0, 0}},
		{1, 3, []int{1, 0, 0}},
		{7, 3, []int{3, 2, 2}},
		{9, 3, []int{3, 3, 3}},
		{5, 1, []int{5}},
	} {
		got := collective.Counts(tc.n, tc.size)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Counts(%d, %d) = %v, want %v", tc.n, tc.size, got, tc.want)
		}
		off := 0
		for r, c := range got {
			if o := collective.Offset(tc.n, tc.size, r); o != off {
				t.Errorf("Offset(%d, %d, %d) = %d, want %d", tc.n, tc.size, r, o, off)
			}
			off += c
		}
	}
}

func TestPrepare(t *testing.T) {
	for _, tc := range []struct {
		name       string
		kind       collective.Kind
		send, recv any
		root       int
		wantLen    int
		wantErr    bool
	}{
		{"allreduce", collective.KindAllReduce, make([]float32, 5), nil, 0, 5, false},
		{"reducescatter uneven rank 1", collective.KindReduceScatter, make([]float64, 7), make([]float64, 2), 0, 7, false},
		{"reducescatter wrong recv", collective.KindReduceScatter, make([]float64, 7), make([]float64, 3), 0, 0, true},
		{"allgather uneven", collective.KindAllGather, make([]float32, 2), make([]float32, 7), 0, 7, false},
		{"allgather dtype", collective.KindAllGather, make([]float32, 2), make([]float64, 7), 0, 0, true},
		{"broadcast root", collective.KindBroadcast, make([]float32, 2), nil, 3, 0, true},
		{"string", collective.KindAllReduce, "x", nil, 0, 0, true},
	} {
		h, err := collective.Prepare(tc.kind, 1, 3, tc.send, tc.recv, collective.Sum, tc.root)
		if tc.wantErr {
			if !errors.Is(err, collective.ErrBadBuffer) {
				t.Errorf("%s: got %v, want ErrBadBuffer", tc.name, err)
			}
			continue
		}
		if err != nil || h.Len != tc.wantLen {
			t.Errorf("%s: got %+v, %v; want Len %d", tc.name, h, err, tc.wantLen)
		}
	}
}

func TestHeaderMismatch(t *testing.T) {
	a := collective.Header{Kind: collective.KindAllReduce, DType: collective.Float32, Len: 10, Seq: 4}
	b := a
	b.DType = collective.Float64
	err := a.Mismatch(0, 2, b)
	if !errors.Is(err, collective.ErrMismatch) {
		t.Fatalf("got %v", err)
	}
	want := "ranks disagree on the operation: rank 0 called allreduce #4 of 10 float32 (sum), rank 2 called allreduce #4 of 10 float64 (sum)"
	if err.Error() != want {
		t.Errorf("got %q\nwant %q", err, want)
	}
	if a.Mismatch(0, 1, a) != nil {
		t.Error("equal headers reported as mismatch")
	}
}

// A rank waiting in a barrier where another reduces has usually gone past
// a call the other made (a program's last barrier, with rank 0's Test
// skipped on rank 1): the error says so, and prints the barrier without
// the element type and count it has none of ("barrier #4 of 0 DType(0)").
func TestHeaderMismatchWithABarrier(t *testing.T) {
	a := collective.Header{Kind: collective.KindAllReduce, DType: collective.Float64, Len: 6, Seq: 4}
	b := collective.Header{Kind: collective.KindBarrier, Seq: 4}
	for _, c := range []struct {
		err         error
		barrierRank int
	}{{a.Mismatch(0, 1, b), 1}, {b.Mismatch(1, 0, a), 1}} {
		msg := c.err.Error()
		if !errors.Is(c.err, collective.ErrMismatch) || strings.Contains(msg, "DType") || !strings.Contains(msg, "called barrier #4") {
			t.Errorf("got %q: want ErrMismatch and \"barrier #4\" without a dtype", msg)
		}
		if want := fmt.Sprintf("rank %d is in a barrier", c.barrierRank); !strings.Contains(msg, want) {
			t.Errorf("got %q: want %q", msg, want)
		}
	}
}

func TestReduceInto(t *testing.T) {
	for _, tc := range []struct {
		op   collective.Op
		want []float64
	}{
		{collective.Sum, []float64{3, 1, 0, 12, 2, 2, 2, 2, 2, 9}},
		{collective.Max, []float64{2, 1, 2, 7, 1, 1, 1, 1, 1, 5}},
		{collective.Min, []float64{1, 0, -2, 5, 1, 1, 1, 1, 1, 4}},
	} {
		dst := []float64{1, 0, -2, 5, 1, 1, 1, 1, 1, 4}
		src := []float64{2, 1, 2, 7, 1, 1, 1, 1, 1, 5}
		collective.ReduceInto(dst, src, tc.op)
		if fmt.Sprint(dst) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.op, dst, tc.want)
		}
	}
}

// ReduceTo(dst, a, b) keeps a on ties, signed zeros and NaNs included
// (backends reduce in rank order and promise every rank the same bits), in
// place or not, on both sides of its 8-wide unrolled loop.
func TestReduceToOperandOrder(t *testing.T) {
	nan := math.NaN()
	negz := math.Copysign(0, -1)
	a := []float64{1, 0, -2, 5, 0, negz, nan, 1, 3, 1, 1, 4, 2.5}
	b := []float64{2, 1, 2, 7, negz, 0, 1, nan, 3, 1, 1, 5, -1}
	ref := func(op collective.Op, x, y float64) float64 {
		switch op {
		case collective.Max:
			if y > x {
				return y
			}
			return x
		case collective.Min:
			if y < x {
				return y
			}
			return x
		}
		return x + y
	}
	for _, op := range []collective.Op{collective.Sum, collective.Mean, collective.Max, collective.Min} {
		got := make([]float64, len(a))
		collective.ReduceTo(got, a, b, op)
		inPlace := append([]float64(nil), b...)
		collective.ReduceTo(inPlace, a, inPlace, op)
		into := append([]float64(nil), a...)
		collective.ReduceInto(into, b, op)
		for i := range a {
			want := math.Float64bits(ref(op, a[i], b[i]))
			if math.Float64bits(got[i]) != want || math.Float64bits(inPlace[i]) != want || math.Float64bits(into[i]) != want {
				t.Errorf("%s element %d (%v, %v): ReduceTo gave %v (in place %v), ReduceInto %v, want %v", op, i, a[i], b[i], got[i], inPlace[i], into[i], ref(op, a[i], b[i]))
			}
		}
	}
}

// rec is a Collective that records the order in which operations run.
type rec struct {
	order []string
}

func (r *rec) Rank() int { return 0 }
func (r *rec) Size() int { return 1 }
func (r *rec) AllReduce(_ context.Context, buf any, _ collective.Op) error {
	r.order = append(r.order, fmt.Sprint("allreduce ", len(buf.([]float32))))
	return nil
}
func (r *rec) Broadcast(context.Context, any, int) error {
	r.order = append(r.order, "broadcast")
	return nil
}
func (r *rec) AllGather(context.Context, any, any) error { return nil }
func (r *rec) ReduceScatter(context.Context, any, any, collective.Op) error {
	return nil
}
func (r *rec) Barrier(context.Context) error { r.order = append(r.order, "barrier"); return nil }
func (r *rec) Close() error                  { return nil }

func ExampleWithAsync() {
	r := &rec{}
	g := collective.WithAsync(r)
	ctx := context.Background()
	h1 := g.AllReduceAsync(ctx, make([]float32, 1), collective.Sum)
	h2 := g.AllReduceAsync(ctx, make([]float32, 2), collective.Sum)
	_ = g.Barrier(ctx) // queued behind both all-reduces
	fmt.Println(h1.Wait(), h2.Wait())
	g.Close()
	fmt.Println(r.order)
	fmt.Println(g.Barrier(ctx))
	// Output:
	// <nil> <nil>
	// [allreduce 1 allreduce 2 barrier]
	// collective: rank 0: group closed
}

// gated is a Collective whose all-reduces wait for a gate and which fails
// the test if two operations ever overlap.
type gated struct {
	rec
	gate    chan struct{}
	running atomic.Int32
	overlap atomic.Bool
}

func (g *gated) enter() {
	if g.running.Add(1) > 1 {
		g.overlap.Store(true)
	}
}

func (g *gated) AllReduce(ctx context.Context, buf any, op collective.Op) error {
	g.enter()
	defer g.running.Add(-1)
	<-g.gate
	return g.rec.AllReduce(ctx, buf, op)
}

func (g *gated) Barrier(ctx context.Context) error {
	g.enter()
	defer g.running.Add(-1)
	return g.rec.Barrier(ctx)
}

// A synchronous call made while an asynchronous one is still running waits
// for it (it runs after it, never beside it), and synchronous calls from
// several goroutines never overlap either.
func TestWithAsyncOrdersSynchronousCalls(t *testing.T) {
	c := &gated{gate: make(chan struct{})}
	g := collective.WithAsync(c)
	ctx := context.Background()
	h := g.AllReduceAsync(ctx, make([]float32, 3), collective.Sum)
	done := make(chan error, 4)
	for range 4 {
		go func() { done <- g.Barrier(ctx) }()
	}
	close(c.gate)
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := g.AllReduce(ctx, make([]float32, 5), collective.Sum); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if want := "[allreduce 3 barrier barrier barrier barrier allreduce 5]"; fmt.Sprint(c.order) != want {
		t.Errorf("operations ran in the order %v, want %s", c.order, want)
	}
	if c.overlap.Load() {
		t.Error("two operations ran at once")
	}
}

// More operations queued than the communication goroutine's queue holds
// (DDP with many small buckets, fsdp with many units): the submitter
// waits for room, the goroutine drains the queue, and all complete. The
// goroutine used to take the lock that a submitter blocked on a full
// queue held, and both waited forever.
func TestWithAsyncQueuesMoreThanItsBuffer(t *testing.T) {
	c := &gated{gate: make(chan struct{})}
	g := collective.WithAsync(c)
	ctx := context.Background()
	const n = 500
	handles := make(chan collective.Handle, n)
	go func() {
		for range n {
			handles <- g.AllReduceAsync(ctx, make([]float32, 1), collective.Sum)
		}
		close(handles)
	}()
	close(c.gate)
	done := make(chan error, 1)
	go func() {
		var err error
		for h := range handles {
			err = errors.Join(err, h.Wait())
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%d queued operations did not complete within 20 s: the submitter and the communication goroutine wait for each other", n)
	}
	g.Close()
	if len(c.order) != n {
		t.Errorf("%d operations ran, want %d", len(c.order), n)
	}
}
