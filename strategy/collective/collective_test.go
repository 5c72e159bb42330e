package collective_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

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

// ReduceTo(dst, a, b) must give the bits ReduceInto(a, b) gives, signed
// zeros and NaNs included: backends mix the two and promise every rank the
// same bits.
func TestReduceToMatchesReduceInto(t *testing.T) {
	nan := math.NaN()
	negz := math.Copysign(0, -1)
	a := []float64{1, 0, -2, 5, 0, negz, nan, 1, 3, 1, 1, 4, 2.5}
	b := []float64{2, 1, 2, 7, negz, 0, 1, nan, 3, 1, 1, 5, -1}
	for _, op := range []collective.Op{collective.Sum, collective.Mean, collective.Max, collective.Min} {
		want := append([]float64(nil), a...)
		collective.ReduceInto(want, b, op)
		got := make([]float64, len(a))
		collective.ReduceTo(got, a, b, op)
		inPlace := append([]float64(nil), b...)
		collective.ReduceTo(inPlace, a, inPlace, op)
		for i := range want {
			if math.Float64bits(got[i]) != math.Float64bits(want[i]) || math.Float64bits(inPlace[i]) != math.Float64bits(want[i]) {
				t.Errorf("%s element %d (%v, %v): ReduceTo gave %v (in place %v), ReduceInto %v", op, i, a[i], b[i], got[i], inPlace[i], want[i])
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
