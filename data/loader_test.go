package data

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
)

// collect walks an epoch and returns the batches' indices, sizes and pads,
// checking each row's data against the index it claims.
func collect(t *testing.T, l *Loader, epoch int) (idx [][]int, pads [][]bool) {
	t.Helper()
	it := l.Iter(context.Background(), epoch)
	defer it.Close()
	for {
		b, ok := it.Next()
		if !ok {
			break
		}
		x, okx := b.Field("x")
		y, oky := b.Field("y")
		if !okx || !oky {
			t.Fatalf("batch lacks x or y: %v", b.Fields)
		}
		if len(x) != 2*b.Size || len(y) != b.Size || len(b.Indices) != b.Size || len(b.Pad) != b.Size {
			t.Fatalf("batch of size %d has len(x)=%d len(y)=%d indices=%d pad=%d", b.Size, len(x), len(y), len(b.Indices), len(b.Pad))
		}
		for r, i := range b.Indices {
			if x[2*r] != float32(i) || x[2*r+1] != -float32(i) || y[r] != float32(i%10) {
				t.Fatalf("row %d claims index %d but holds x=(%v,%v) y=%v", r, i, x[2*r], x[2*r+1], y[r])
			}
		}
		idx = append(idx, slices.Clone(b.Indices))
		pads = append(pads, slices.Clone(b.Pad))
	}
	if err := it.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	return idx, pads
}

func TestLoaderBatching(t *testing.T) {
	cases := []struct {
		n, bs    int
		dropLast bool
		want     [][]int
	}{
		{10, 4, false, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}},
		{10, 4, true, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}},
		{10, 5, true, [][]int{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}}},
		{3, 1, false, [][]int{{0}, {1}, {2}}},
		{3, 8, false, [][]int{{0, 1, 2}}},
	}
	for _, c := range cases {
		for _, prefetch := range []int{-1, 0, 1, 3} {
			name := fmt.Sprintf("n%d_bs%d_drop%v_prefetch%d", c.n, c.bs, c.dropLast, prefetch)
			t.Run(name, func(t *testing.T) {
				l, err := NewLoader(newSeq(c.n), LoaderConfig{BatchSize: c.bs, DropLast: c.dropLast, Prefetch: prefetch})
				if err != nil {
					t.Fatal(err)
				}
				if got := l.NumBatches(0); got != len(c.want) {
					t.Errorf("NumBatches = %d, want %d", got, len(c.want))
				}
				// Two epochs from the same loader: buffers recycled between them.
				for epoch := range 2 {
					got, _ := collect(t, l, epoch)
					if !slices.EqualFunc(got, c.want, slices.Equal) {
						t.Errorf("epoch %d: batches %v, want %v", epoch, got, c.want)
					}
				}
			})
		}
	}
}

func TestLoaderShuffle(t *testing.T) {
	const n = 50
	for _, prefetch := range []int{-1, 2} {
		l, err := NewLoader(newSeq(n), LoaderConfig{BatchSize: 8, Shuffle: true, Seed: 3, Prefetch: prefetch})
		if err != nil {
			t.Fatal(err)
		}
		e0, _ := collect(t, l, 0)
		e0again, _ := collect(t, l, 0)
		e1, _ := collect(t, l, 1)
		flat0, flat1 := slices.Concat(e0...), slices.Concat(e1...)
		if !slices.Equal(flat0, Permutation(3, 0, n)) {
			t.Errorf("epoch 0 order %v is not Permutation(3, 0, %d)", flat0, n)
		}
		if !slices.EqualFunc(e0, e0again, slices.Equal) {
			t.Errorf("epoch 0 walked twice gave different orders")
		}
		if slices.Equal(flat0, flat1) {
			t.Errorf("epochs 0 and 1 have the same order")
		}
		if !isPermutation(flat1, n) {
			t.Errorf("epoch 1 does not visit each example once: %v", flat1)
		}
		// A new loader with the same seed repeats the order: nothing else
		// (time, previous epochs) enters.
		l2, _ := NewLoader(newSeq(n), LoaderConfig{BatchSize: 8, Shuffle: true, Seed: 3, Prefetch: prefetch})
		if e1b, _ := collect(t, l2, 1); !slices.EqualFunc(e1, e1b, slices.Equal) {
			t.Errorf("a fresh loader with the same seed gave a different epoch 1")
		}
	}
}

func TestNewLoaderReportsEveryProblem(t *testing.T) {
	cases := []struct {
		name string
		ds   Dataset
		cfg  LoaderConfig
		want []string
	}{
		{"nil dataset and batch", nil, LoaderConfig{}, []string{"dataset is nil", "BatchSize is 0"}},
		{"prefetch and sampler", newSeq(5), LoaderConfig{BatchSize: 2, Prefetch: -3, Sampler: DistributedSampler{Rank: 2, World: 2}},
			[]string{"Prefetch is -3", "Sampler", "Rank is 2"}},
		{"empty dataset", newSeq(0), LoaderConfig{BatchSize: 1}, []string{"dataset has 0 examples"}},
		{"drop everything", newSeq(5), LoaderConfig{BatchSize: 8, DropLast: true}, []string{"BatchSize 8 exceeds the dataset's 5 examples"}},
		{"bad fields", badFields{}, LoaderConfig{BatchSize: 1}, []string{"field 1 has an empty name", `field "x" has shape [0 3]`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewLoader(c.ds, c.cfg)
			if err == nil {
				t.Fatalf("no error, want %q", c.want)
			}
			for _, w := range c.want {
				if !contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

type badFields struct{}

func (badFields) Len() int                    { return 3 }
func (badFields) Fields() []Field             { return []Field{{"x", []int{0, 3}}, {"", nil}} }
func (badFields) Read(int, [][]float32) error { return nil }

func TestLoaderConfigDefaults(t *testing.T) {
	l, err := NewLoader(newSeq(4), LoaderConfig{BatchSize: 2, Shuffle: true, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	cfg := l.Config()
	if cfg.Prefetch != DefaultPrefetch {
		t.Errorf("Prefetch default %d, want %d", cfg.Prefetch, DefaultPrefetch)
	}
	if cfg.Sampler != (RandomSampler{Seed: 9}) {
		t.Errorf("Sampler default %#v, want RandomSampler{9}", cfg.Sampler)
	}
	l, _ = NewLoader(newSeq(4), LoaderConfig{BatchSize: 2})
	if l.Config().Sampler != (SequentialSampler{}) {
		t.Errorf("Sampler default %#v, want SequentialSampler", l.Config().Sampler)
	}
}

func TestLoaderWithDistributedSampler(t *testing.T) {
	const n, world = 11, 3
	base, err := NewLoader(newSeq(n), LoaderConfig{BatchSize: 2, Shuffle: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var real []int
	for rank := range world {
		l := base.WithSampler(DistributedSampler{Rank: rank, World: world, Shuffle: true, Seed: 1})
		if l.Dataset() != base.Dataset() {
			t.Errorf("WithSampler changed the dataset")
		}
		idx, pads := collect(t, l, 4)
		// 11 over 3 ranks pads to 12: 4 rows each, 2 batches of 2.
		if len(idx) != 2 || l.NumBatches(4) != 2 {
			t.Errorf("rank %d: %d batches (NumBatches %d), want 2", rank, len(idx), l.NumBatches(4))
		}
		for b := range idx {
			for r, i := range idx[b] {
				if !pads[b][r] {
					real = append(real, i)
				}
			}
		}
	}
	slices.Sort(real)
	if !slices.Equal(real, iota(n)) {
		t.Errorf("ranks' non-padding rows %v, want each of 0..%d once", real, n-1)
	}
	// The base loader is unchanged.
	if base.Config().Sampler != (RandomSampler{Seed: 1}) {
		t.Errorf("WithSampler modified the original loader: %#v", base.Config().Sampler)
	}
	// An invalid sampler surfaces as Err, not as an empty epoch.
	it := base.WithSampler(DistributedSampler{Rank: 5, World: 2}).Iter(context.Background(), 0)
	defer it.Close()
	if _, ok := it.Next(); ok || it.Err() == nil || !contains(it.Err().Error(), "Rank is 5") {
		t.Errorf("invalid sampler: ok=%v err=%v, want an error naming Rank", ok, it.Err())
	}
}

type badSampler struct{}

func (badSampler) Order(epoch, n int) ([]int, []bool) { return []int{0, n}, nil }

func TestIterRejectsOutOfRangeSampler(t *testing.T) {
	l, _ := NewLoader(newSeq(4), LoaderConfig{BatchSize: 2, Sampler: badSampler{}})
	it := l.Iter(context.Background(), 0)
	defer it.Close()
	if _, ok := it.Next(); ok || it.Err() == nil || !contains(it.Err().Error(), "index 4 at position 1") {
		t.Errorf("ok=%v err=%v, want an error naming index 4", ok, it.Err())
	}
}

func TestIterReadErrors(t *testing.T) {
	for _, prefetch := range []int{-1, 2} {
		for _, doPanic := range []bool{false, true} {
			t.Run(fmt.Sprintf("prefetch%d_panic%v", prefetch, doPanic), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ds := newSeq(20)
					ds.failAt, ds.panic = 9, doPanic
					l, _ := NewLoader(ds, LoaderConfig{BatchSize: 4, Prefetch: prefetch})
					it := l.Iter(context.Background(), 0)
					defer it.Close()
					got := 0
					for _, ok := it.Next(); ok; _, ok = it.Next() {
						got++
					}
					// Example 9 is in batch 2: batches 0 and 1 arrive, then the error.
					if got != 2 {
						t.Errorf("got %d batches before the error, want 2", got)
					}
					want := "read example 9 (batch 2, row 1): disk on fire"
					if doPanic {
						want = "Read(9) panicked: boom"
					}
					if it.Err() == nil || !contains(it.Err().Error(), want) {
						t.Errorf("Err() = %v, want it to contain %q", it.Err(), want)
					}
					if _, ok := it.Next(); ok {
						t.Errorf("Next after an error returned a batch")
					}
				})
			})
		}
	}
}

// The worker prepares exactly Prefetch batches ahead and then waits.
func TestPrefetchIsBounded(t *testing.T) {
	for _, prefetch := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(prefetch), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const bs = 4
				ds := newSeq(100)
				l, _ := NewLoader(ds, LoaderConfig{BatchSize: bs, Prefetch: prefetch})
				it := l.Iter(context.Background(), 0)
				defer it.Close()
				synctest.Wait()
				if got, want := ds.reads.Load(), int64(prefetch*bs); got != want {
					t.Errorf("before Next: %d reads, want %d (Prefetch %d batches of %d)", got, want, prefetch, bs)
				}
				for k := 1; k <= 3; k++ {
					if _, ok := it.Next(); !ok {
						t.Fatal(it.Err())
					}
					synctest.Wait()
					if got, want := ds.reads.Load(), int64((prefetch+k)*bs); got != want {
						t.Errorf("after %d Next: %d reads, want %d", k, got, want)
					}
				}
			})
		})
	}
}

// Cancelling the context ends the epoch with ctx.Err(), and the worker exits
// (synctest.Test fails if a goroutine of the bubble is left blocked).
func TestIterCancel(t *testing.T) {
	for _, prefetch := range []int{-1, 1, 3} {
		t.Run(fmt.Sprint(prefetch), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				l, _ := NewLoader(newSeq(100), LoaderConfig{BatchSize: 4, Prefetch: prefetch})
				it := l.Iter(ctx, 0)
				for range 2 {
					if _, ok := it.Next(); !ok {
						t.Fatal(it.Err())
					}
				}
				synctest.Wait() // the worker is blocked on a full queue
				cancel()
				if b, ok := it.Next(); ok {
					t.Errorf("Next after cancel returned a batch %v", b.Indices)
				}
				if !errors.Is(it.Err(), context.Canceled) {
					t.Errorf("Err() = %v, want context.Canceled", it.Err())
				}
				// Not calling Close: cancellation alone must stop the worker.
			})
		})
	}
}

// Cancelling while the worker is blocked, without calling Next again, also
// lets it exit.
func TestIterCancelWithoutNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		l, _ := NewLoader(newSeq(100), LoaderConfig{BatchSize: 4})
		it := l.Iter(ctx, 0)
		synctest.Wait()
		cancel()
		<-it.p.exited
		if !errors.Is(it.p.err, context.Canceled) {
			t.Errorf("worker error %v, want context.Canceled", it.p.err)
		}
	})
}

func TestIterCloseStopsWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := NewLoader(newSeq(100), LoaderConfig{BatchSize: 4, Prefetch: 3})
		it := l.Iter(context.Background(), 0)
		if _, ok := it.Next(); !ok {
			t.Fatal(it.Err())
		}
		synctest.Wait()
		it.Close()
		it.Close() // twice is fine
		if _, ok := it.Next(); ok {
			t.Errorf("Next after Close returned a batch")
		}
		if it.Err() != nil {
			t.Errorf("Close set Err = %v", it.Err())
		}
		// Every buffer came back to the pool: Prefetch+1 of them.
		if got := len(l.pool.bufs); got != 4 {
			t.Errorf("pool holds %d buffers after Close, want 4", got)
		}
		// The next epoch reuses them instead of allocating.
		it2 := l.Iter(context.Background(), 1)
		defer it2.Close()
		synctest.Wait()
		if got := len(l.pool.bufs); got != 0 {
			t.Errorf("pool holds %d buffers while an epoch runs, want 0", got)
		}
	})
}

func TestNextSteadyStateAllocatesNothing(t *testing.T) {
	for _, prefetch := range []int{-1, 2} {
		ds := newSeq(1 << 20)
		l, _ := NewLoader(ds, LoaderConfig{BatchSize: 16, Prefetch: prefetch})
		it := l.Iter(context.Background(), 0)
		it.Next()
		allocs := testing.AllocsPerRun(1000, func() {
			if _, ok := it.Next(); !ok {
				t.Fatal("epoch ended early", it.Err())
			}
		})
		it.Close()
		if allocs != 0 {
			t.Errorf("Prefetch %d: %.2f allocations per Next, want 0", prefetch, allocs)
		}
	}
}

func TestInMemoryAndSubset(t *testing.T) {
	fields := []Field{{"x", []int{2}}, {"y", nil}}
	ds, err := NewInMemory(fields, [][]float32{{0, 1, 2, 3, 4, 5}, {7, 8, 9}})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := NewSubset(ds, []int{2, 0})
	if err != nil {
		t.Fatal(err)
	}
	dst := [][]float32{make([]float32, 2), make([]float32, 1)}
	if err := sub.Read(0, dst); err != nil || !slices.Equal(dst[0], []float32{4, 5}) || dst[1][0] != 9 {
		t.Errorf("Subset.Read(0) = %v err %v, want [[4 5] [9]]", dst, err)
	}
	if err := sub.Read(2, dst); err == nil {
		t.Errorf("Subset.Read(2) of a 2-example subset gave no error")
	}
	if _, err := NewSubset(ds, []int{3}); err == nil || !contains(err.Error(), "idx[0] = 3") {
		t.Errorf("NewSubset out of range: %v", err)
	}
	_, err = NewInMemory(fields, [][]float32{{0, 1, 2}, {7, 8}})
	for _, w := range []string{`field "x": 3 values is not a multiple of the example size 2`} {
		if err == nil || !contains(err.Error(), w) {
			t.Errorf("NewInMemory bad sizes: %v, want %q", err, w)
		}
	}
	_, err = NewInMemory(fields, [][]float32{{0, 1, 2, 3}, {7, 8, 9}})
	if err == nil || !contains(err.Error(), `field "y" holds 3 examples but field "x" holds 2`) {
		t.Errorf("NewInMemory count mismatch: %v", err)
	}
}

func BenchmarkLoaderFashionMNIST(b *testing.B) {
	train, _, err := EmbeddedFashionMNIST()
	if err != nil {
		b.Fatal(err)
	}
	for _, prefetch := range []int{-1, 2} {
		b.Run(fmt.Sprintf("bs64_prefetch%d", prefetch), func(b *testing.B) {
			l, _ := NewLoader(train, LoaderConfig{BatchSize: 64, Shuffle: true, Prefetch: prefetch})
			b.ReportAllocs()
			rows, epoch := 0, 0
			it := l.Iter(context.Background(), epoch)
			for b.Loop() {
				bt, ok := it.Next()
				if !ok {
					epoch++
					it = l.Iter(context.Background(), epoch)
					bt, _ = it.Next()
				}
				rows += bt.Size
			}
			it.Close()
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// An Iter dropped without Close or cancellation does not leave its worker
// blocked: once the Iter is collected, a cleanup stops it.
func TestDroppedIterStopsWorker(t *testing.T) {
	l, _ := NewLoader(newSeq(1000), LoaderConfig{BatchSize: 4, Prefetch: 2})
	exited := func() <-chan struct{} {
		it := l.Iter(context.Background(), 0)
		it.Next()
		return it.p.exited
	}()
	for range 1000 {
		runtime.GC()
		select {
		case <-exited:
			return
		default:
			runtime.Gosched()
		}
	}
	t.Fatal("the worker of an unreachable Iter is still running after 1000 collections")
}
