//go:build linux

package hier_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/collectivetest"
	"github.com/fulgur-ml/fulgur/strategy/collective/hier"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/shm"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
	"github.com/rs/zerolog"
)

// build starts len(nodes) ranks in this process, rank r on node nodes[r]:
// a tcp ring over all of them, shared memory inside each node (every "node"
// is this machine, so shared memory works for any grouping), tcp across.
func build(t testing.TB, nodes []string) []collective.Collective {
	t.Helper()
	return buildWith(t, nodes, func(ctx context.Context, sub *rendezvous.Rendezvous) (collective.Collective, error) {
		return shm.Auto(ctx, sub, tcp.NewGroup)
	})
}

// buildWith is build with newSub making each level's groups over their
// rendezvous.
func buildWith(t testing.TB, nodes []string, newSub func(ctx context.Context, sub *rendezvous.Rendezvous) (collective.Collective, error)) []collective.Collective {
	t.Helper()
	n := len(nodes)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nop := zerolog.Nop()
	shape := hier.ShapeOf(nodes)
	return collectivetest.Start(t, n, func(r int) (collective.Collective, error) {
		cfg := rendezvous.Config{Rank: r, Size: n, MasterAddr: "127.0.0.1", MasterPort: ln.Addr().(*net.TCPAddr).Port,
			Token: "t", BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop}
		if r == 0 {
			cfg.Listener = ln
		}
		ctx := context.Background()
		rv, err := rendezvous.Meet(ctx, cfg)
		if err != nil {
			return nil, err
		}
		flat, err := tcp.NewRing(ctx, rv)
		if err != nil {
			rv.Close()
			return nil, err
		}
		g, err := hier.New(ctx, flat, shape, func(ctx context.Context, color, key int) (collective.Collective, error) {
			return rendezvous.SplitGroup(ctx, rv, flat, color, key, newSub)
		})
		if err != nil {
			flat.Close()
			return nil, err
		}
		return g, nil
	})
}

// shapes gives each group size of the conformance suite a layout: both
// levels at work for 4 ranks (2 nodes x 2), one of them a group of one for
// the others.
var shapes = map[int][]string{
	1: {"a"},
	2: {"a", "a"},
	3: {"a", "b", "c"},
	4: {"a", "a", "b", "b"},
	5: {"a", "a", "a", "a", "a"},
}

func TestConformance(t *testing.T) {
	collectivetest.RunAll(t, func(t *testing.T, n int) []collective.Collective { return build(t, shapes[n]) })
}

// TestLayouts checks all-reduce (every op, both dtypes, lengths that do not
// divide by the node's ranks), reduce-scatter, all-gather (on two levels
// where the blocks line up, flat where they do not: the interleaved layout
// at lengths that do not divide by 4) and broadcast from every root on layouts with
// more than two ranks a node and more than two nodes, including ranks of a
// node that are not neighbours.
func TestLayouts(t *testing.T) {
	for _, nodes := range [][]string{
		{"a", "a", "a", "b", "b", "b"},
		{"a", "a", "b", "b", "c", "c"},
		{"a", "b", "a", "b"}, // a node's ranks interleaved
	} {
		t.Run(fmt.Sprint(nodes), func(t *testing.T) {
			shape := hier.ShapeOf(nodes)
			if ok, why := shape.Qualifies(); !ok {
				t.Fatalf("%v does not qualify: %s", nodes, why)
			}
			cs := build(t, nodes)
			n := len(cs)
			for _, length := range []int{0, 1, 5, 1001, 70000} {
				for _, op := range []collective.Op{collective.Sum, collective.Mean, collective.Max, collective.Min} {
					got := make([][]float64, n)
					each(t, cs, func(ctx context.Context, c collective.Collective) error {
						buf := make([]float64, length)
						for i := range buf {
							buf[i] = value(c.Rank(), i)
						}
						got[c.Rank()] = buf
						return c.AllReduce(ctx, buf, op)
					})
					for i := range length {
						want := reduced(op, n, i)
						for r := range n {
							if got[r][i] != want {
								t.Fatalf("all-reduce %v of %d: rank %d element %d = %v, want %v", op, length, r, i, got[r][i], want)
							}
						}
					}
				}
				scatterGather(t, cs, length)
				for root := range n {
					each(t, cs, func(ctx context.Context, c collective.Collective) error {
						buf := make([]float32, length)
						if c.Rank() == root {
							for i := range buf {
								buf[i] = float32(value(root, i))
							}
						}
						if err := c.Broadcast(ctx, buf, root); err != nil {
							return err
						}
						for i, v := range buf {
							if v != float32(value(root, i)) {
								return fmt.Errorf("broadcast from %d of %d: element %d = %v", root, length, i, v)
							}
						}
						return nil
					})
				}
			}
		})
	}
}

// scatterGather checks reduce-scatter (every op, float64) and all-gather
// (float32) of a buffer of length elements: each rank's block of the
// reduction, and every rank's block in rank order.
func scatterGather(t *testing.T, cs []collective.Collective, length int) {
	t.Helper()
	n := len(cs)
	for _, op := range []collective.Op{collective.Sum, collective.Mean, collective.Max, collective.Min} {
		each(t, cs, func(ctx context.Context, c collective.Collective) error {
			r := c.Rank()
			send := make([]float64, length)
			for i := range send {
				send[i] = value(r, i)
			}
			lo := collective.Offset(length, n, r)
			recv := make([]float64, collective.BlockLen(length, n, r))
			if err := c.ReduceScatter(ctx, send, recv, op); err != nil {
				return err
			}
			for j, got := range recv {
				i := lo + j
				if want := reduced(op, n, i); got != want {
					return fmt.Errorf("reduce-scatter %v of %d: rank %d element %d = %v, want %v", op, length, r, i, got, want)
				}
			}
			return nil
		})
	}
	each(t, cs, func(ctx context.Context, c collective.Collective) error {
		r := c.Rank()
		lo := collective.Offset(length, n, r)
		send := make([]float32, collective.BlockLen(length, n, r))
		for j := range send {
			send[j] = float32(value(r, lo+j))
		}
		recv := make([]float32, length)
		if err := c.AllGather(ctx, send, recv); err != nil {
			return err
		}
		for q := range n {
			lo := collective.Offset(length, n, q)
			for j := range collective.BlockLen(length, n, q) {
				if v := recv[lo+j]; v != float32(value(q, lo+j)) {
					return fmt.Errorf("all-gather of %d on rank %d: element %d (rank %d's block) = %v, want %v", length, r, lo+j, q, v, value(q, lo+j))
				}
			}
		}
		return nil
	})
}

// TestReduceScatterNodeByNode: on 2 nodes x 2 ranks, a float32
// reduce-scatter sums inside each node, then across them: ranks 0 and 1
// give 1e8 and -1e8 (node a: 0), ranks 2 and 3 give 1 (node b: 2), so
// every element is 0 + 2 = 2. A flat ring sums every block in a chain
// starting at another rank, where a 1 added to ±1e8 is lost in rounding
// (blocks of 0 or 1): that it is 2 everywhere shows the two levels ran.
func TestReduceScatterNodeByNode(t *testing.T) {
	cs := build(t, []string{"a", "a", "b", "b"})
	give := []float32{1e8, -1e8, 1, 1}
	for _, length := range []int{8, 1001} {
		each(t, cs, func(ctx context.Context, c collective.Collective) error {
			r := c.Rank()
			send := make([]float32, length)
			for i := range send {
				send[i] = give[r]
			}
			recv := make([]float32, collective.BlockLen(length, len(cs), r))
			if err := c.ReduceScatter(ctx, send, recv, collective.Sum); err != nil {
				return err
			}
			for j, v := range recv {
				if v != 2 {
					return fmt.Errorf("length %d: rank %d element %d = %v, want 2 (node a's 0 plus node b's 2)", length, r, collective.Offset(length, len(cs), r)+j, v)
				}
			}
			return nil
		})
	}
}

// reduced is element i of n ranks' values reduced by op.
func reduced(op collective.Op, n, i int) float64 {
	want := value(0, i)
	for r := 1; r < n; r++ {
		switch op {
		case collective.Sum, collective.Mean:
			want += value(r, i)
		case collective.Max:
			want = max(want, value(r, i))
		case collective.Min:
			want = min(want, value(r, i))
		}
	}
	if op == collective.Mean {
		want /= float64(n)
	}
	return want
}

// value is exact in float32 and in every sum of up to 6 of them.
func value(r, i int) float64 { return float64((r*37+i*11)%23) - 11 + 0.5*float64(r) }

func each(t *testing.T, cs []collective.Collective, f func(ctx context.Context, c collective.Collective) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(ctx, c)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestShapeOf(t *testing.T) {
	for _, tc := range []struct {
		nodes []string
		want  string
		ok    bool
	}{
		{[]string{"a", "a", "b", "b"}, "2 nodes x 2 ranks", true},
		{[]string{"a", "b", "a", "b"}, "2 nodes x 2 ranks", true},
		{[]string{"a", "a", "a", "b"}, "4 ranks on 2 nodes, unevenly", false},
		{[]string{"a", "b"}, "2 nodes x 1 rank", false},
		{[]string{"a", "a"}, "1 node x 2 ranks", false},
	} {
		s := hier.ShapeOf(tc.nodes)
		ok, why := s.Qualifies()
		if s.String() != tc.want || ok != tc.ok || (ok == (why != "")) {
			t.Errorf("ShapeOf(%v) = %v, qualifies %v (%q); want %s, %v", tc.nodes, s, ok, why, tc.want, tc.ok)
		}
	}
	s := hier.ShapeOf([]string{"x", "y", "x", "y"})
	if fmt.Sprint(s.Node, s.Local) != "[0 1 0 1] [0 0 1 1]" {
		t.Errorf("ShapeOf(x y x y): nodes %v, local ranks %v; want [0 1 0 1] [0 0 1 1]", s.Node, s.Local)
	}
}

// TestMixedOperationsFail: a rank that runs another operation than the
// others (all-gather against reduce-scatter or all-reduce, on two levels
// each) makes every rank fail at once, naming a mismatch, rather than wait
// for the timeout in a level its peers never enter.
func TestMixedOperationsFail(t *testing.T) {
	for _, others := range []string{"reduce-scatter", "all-reduce", "broadcast", "barrier"} {
		t.Run(others, func(t *testing.T) {
			cs := build(t, []string{"a", "a", "b", "b"})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			errs := make([]error, len(cs))
			var wg sync.WaitGroup
			for r, c := range cs {
				wg.Go(func() {
					if r == 0 {
						errs[r] = c.AllGather(ctx, make([]float32, 4), make([]float32, 16))
						return
					}
					switch others {
					case "reduce-scatter":
						errs[r] = c.ReduceScatter(ctx, make([]float32, 16), make([]float32, 4), collective.Sum)
					case "all-reduce":
						errs[r] = c.AllReduce(ctx, make([]float32, 16), collective.Sum)
					case "broadcast":
						errs[r] = c.Broadcast(ctx, make([]float32, 16), 0)
					case "barrier":
						errs[r] = c.Barrier(ctx)
					}
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err == nil || errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, collective.ErrMismatch) {
					t.Errorf("rank %d: %v, want an error wrapping ErrMismatch", r, err)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("the ranks took %v to fail", d)
			}
		})
	}
}

// TestClosedPeerDuringScatterGather: with rank 3 closed, the others'
// two-level reduce-scatter and all-gather fail blaming it.
func TestClosedPeerDuringScatterGather(t *testing.T) {
	for _, op := range []string{"reduce-scatter", "all-gather"} {
		t.Run(op, func(t *testing.T) {
			cs := build(t, []string{"a", "a", "b", "b"})
			each(t, cs, func(ctx context.Context, c collective.Collective) error { return c.Barrier(ctx) })
			if err := cs[3].Close(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for r, c := range cs[:3] {
				wg.Go(func() {
					if op == "reduce-scatter" {
						errs[r] = c.ReduceScatter(ctx, make([]float32, 1<<12), make([]float32, 1<<10), collective.Sum)
					} else {
						errs[r] = c.AllGather(ctx, make([]float32, 1<<10), make([]float32, 1<<12))
					}
				})
			}
			wg.Wait()
			for r, err := range errs {
				if p, ok := collective.PeerOf(err); err == nil || errors.Is(err, context.DeadlineExceeded) || !ok || p != 3 {
					t.Errorf("rank %d: %v, want an error blaming rank 3", r, err)
				}
			}
		})
	}
}

// A flat group that cannot break every rank out of a failure (any but a
// *tcp.Ring: inproc's, or tcp.New's wrapped one) is refused with the
// group to use instead.
func TestNewNamesTheFlatGroupItNeeds(t *testing.T) {
	flat, err := inproc.NewGroup(4)
	if err != nil {
		t.Fatal(err)
	}
	shape := hier.ShapeOf([]string{"a", "a", "b", "b"})
	_, err = hier.New(t.Context(), flat[0], shape, func(ctx context.Context, color, key int) (collective.Collective, error) {
		return nil, errors.New("not reached")
	})
	if err == nil || !strings.Contains(err.Error(), "hier.Breaker") || !strings.Contains(err.Error(), "tcp.NewRing") {
		t.Errorf("New over an inproc group = %v, want an error naming hier.Breaker and tcp.NewRing", err)
	}
}

// agreeRecorder is a level of a hier group that counts StopAgreed calls.
type agreeRecorder struct {
	collective.Collective
	agreed *atomic.Int64
}

func (a agreeRecorder) StopAgreed() { a.agreed.Add(1) }

// collective.StopAgreed on a hier group reaches every level it built
// (the groups inside a node and across the nodes), so that none of them
// warns of a peer ending after the stop the ranks agreed on.
func TestStopAgreedReachesEveryLevel(t *testing.T) {
	var built, agreed atomic.Int64
	gs := buildWith(t, []string{"a", "a", "b", "b"}, func(ctx context.Context, sub *rendezvous.Rendezvous) (collective.Collective, error) {
		c, err := tcp.NewGroup(ctx, sub)
		if err != nil {
			return nil, err
		}
		built.Add(1)
		return agreeRecorder{c, &agreed}, nil
	})
	for _, g := range gs {
		collective.StopAgreed(g)
	}
	if built.Load() == 0 || agreed.Load() != built.Load() {
		t.Errorf("StopAgreed reached %d of the %d groups the hier groups built", agreed.Load(), built.Load())
	}
}
