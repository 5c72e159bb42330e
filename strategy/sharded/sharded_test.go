package sharded_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/device/fakedevice"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// shardedRanks makes n in-process ranks of stage 1 or 2 with units of at
// most bucketBytes (64: a few floats, many units).
func shardedRanks(t testing.TB, n, stage, bucketBytes int, gopts []inproc.Option, dopts ...fakedevice.Option) []strategy.Strategy {
	t.Helper()
	return strategytest.Ranks(t, n, gopts, dopts, func(g collective.Collective, d device.Device) (strategy.Strategy, error) {
		return sharded.New(sharded.Config{Group: g, Device: d, BucketBytes: bucketBytes, Stage: stage, Timeout: 20 * time.Second})
	})
}

func TestShardedConformance(t *testing.T) {
	for _, stage := range []int{1, 2} {
		for _, bucket := range []int{0, 64} { // one unit; many small ones
			t.Run(fmt.Sprintf("stage=%d/bucket=%d", stage, bucket), func(t *testing.T) {
				strategytest.RunAll(t, func(t testing.TB, n int) []strategy.Strategy { return shardedRanks(t, n, stage, bucket, nil) })
			})
		}
	}
}

// ZeRO updates each element as DDP does, from the same reduced gradient:
// without clipping (whose norm sums in another order) the ranks end
// bit-identical to DDP's. Stage 1 accumulates micro-batches locally and
// reduces the sum, as DDP does; stage 2 reduces every micro-batch (another
// summation order), so it is compared on single micro-batches.
func TestShardedMatchesDDPBitForBit(t *testing.T) {
	ctx := context.Background()
	m := &strategytest.MLP{In: 5, Hidden: 8, Out: 3, Optimizer: "adam", LR: 0.01}
	ds, _ := strategytest.Regression(72, 5, 3, 4)
	train := func(t *testing.T, ranks []strategy.Strategy, micro int) [][]float32 {
		if err := strategytest.SetupAll(ctx, ranks, m, ds.Fields(), 1); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 3; k++ {
			var bs []*data.Batch
			for i := 0; i < micro; i++ {
				lo := (k*micro + i) * 6
				b, _ := strategytest.Rows(ds, lo, lo+6)
				bs = append(bs, b)
			}
			if _, _, err := strategytest.Step(ctx, ranks, strategy.OptimizerOptions{}, bs...); err != nil {
				t.Fatal(err)
			}
		}
		var out [][]float32
		for _, s := range ranks {
			out = append(out, slices.Clone(strategytest.StoreOf(s).Data32()))
		}
		return out
	}
	for _, n := range []int{2, 3} {
		for _, tc := range []struct{ stage, micro int }{{1, 1}, {1, 3}, {2, 1}} {
			t.Run(fmt.Sprintf("ranks=%d/stage=%d/micro=%d", n, tc.stage, tc.micro), func(t *testing.T) {
				group, _ := inproc.NewGroup(n, inproc.Timeout(20*time.Second))
				ref := make([]strategy.Strategy, n)
				for r := range ref {
					ref[r], _ = ddp.NewDDP(ddp.DDPConfig{Group: group[r], BucketBytes: 64})
				}
				want := train(t, ref, tc.micro)
				got := train(t, shardedRanks(t, n, tc.stage, 64, nil), tc.micro)
				for r := range got {
					for i := range got[r] {
						if got[r][i] != want[r][i] {
							t.Fatalf("rank %d: weight %d is %v, ddp's %v", r, i, got[r][i], want[r][i])
						}
					}
				}
			})
		}
	}
}

func TestShardedKilledRankIsNamed(t *testing.T) {
	const n = 3
	for _, stage := range []int{1, 2} {
		t.Run(fmt.Sprintf("stage=%d", stage), func(t *testing.T) {
			ranks := shardedRanks(t, n, stage, 64, []inproc.Option{inproc.KillRank(2, 5)})
			ctx := context.Background()
			ds, _ := strategytest.Regression(60, 5, 3, 1)
			if err := strategytest.SetupAll(ctx, ranks, &strategytest.MLP{In: 5, Hidden: 8, Out: 3}, ds.Fields(), 1); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var err error
			for k := 0; k < 10 && err == nil; k++ {
				b, _ := strategytest.Rows(ds, k*6, k*6+6)
				_, _, err = strategytest.Step(ctx, ranks, strategy.OptimizerOptions{}, b)
			}
			if err == nil {
				t.Fatal("training went on although a rank died")
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("the survivors took %v to notice", d)
			}
			var joined interface{ Unwrap() []error }
			if !errors.As(err, &joined) {
				t.Fatalf("error %v is not one per rank", err)
			}
			seen := map[int]bool{}
			for _, e := range joined.Unwrap() {
				var rank int
				fmt.Sscanf(e.Error(), "rank %d:", &rank)
				seen[rank] = true
				if rank != 2 && !strings.Contains(e.Error(), "rank 2") {
					t.Errorf("rank %d's error does not name rank 2: %v", rank, e)
				}
			}
			for r := 0; r < n; r++ {
				if !seen[r] {
					t.Errorf("rank %d returned no error", r)
				}
			}
		})
	}
}

func TestShardedRegistered(t *testing.T) {
	for name, want := range map[string]string{"sharded": "sharded", "sharded_stage1": "sharded_stage1", "sharded_stage2": "sharded_stage2"} {
		s, err := strategy.New(name, strategy.Options{Devices: 1, Lookup: func(string) (string, bool) { return "", false }})
		if err != nil || s.Info().Name != want {
			t.Errorf("New(%q) = %v, %v", name, s, err)
			continue
		}
		if _, ok := s.(strategy.Launcher); !ok {
			t.Errorf("New(%q) is a %T, which cannot start the job's local ranks (strategy.Launcher)", name, s)
		}
	}
	_, err := strategy.New("sharded", strategy.Options{Devices: 2, NumNodes: 2, Lookup: func(string) (string, bool) { return "", false }})
	if err == nil || !strings.Contains(err.Error(), "not started by a launcher") {
		t.Errorf("sharded on 2 nodes without a launcher: %v", err)
	}
	lookup := func(k string) (string, bool) {
		if k == sharded.EnvBucketMB {
			return "lots", true
		}
		return "", false
	}
	if _, err := strategy.New("sharded_stage1", strategy.Options{Devices: 1, Lookup: lookup}); err == nil || !strings.Contains(err.Error(), sharded.EnvBucketMB) {
		t.Errorf("sharded_stage1 with %s=lots: %v, want an error naming the variable", sharded.EnvBucketMB, err)
	}
}

func TestShardedConfigErrors(t *testing.T) {
	group, _ := inproc.NewGroup(1)
	for _, tc := range []struct {
		cfg  sharded.Config
		want string
	}{
		{sharded.Config{}, "Group is nil"},
		{sharded.Config{Group: group[0], Stage: 3}, "Stage is 3"},
		{sharded.Config{Group: group[0], BucketBytes: -1}, "BucketBytes is -1"},
		{sharded.Config{Group: group[0], Timeout: -time.Second}, "Timeout is -1s"},
	} {
		if _, err := sharded.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
	// Without a group, the rest is reported too, not only the group.
	_, err := sharded.New(sharded.Config{Stage: 3, BucketBytes: -1, Timeout: -time.Second})
	for _, want := range []string{"Group is nil: pass this rank's collective", "Stage is 3", "BucketBytes is -1", "Timeout is -1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New without a group and with bad settings: %v, want it to say %q", err, want)
		}
	}
}

// Units hold whole tensors in store order, up to the cap, a larger tensor
// alone.
func TestUnits(t *testing.T) {
	ranks := shardedRanks(t, 1, 2, 40, nil) // 10 floats
	ctx := context.Background()
	ds, _ := strategytest.Regression(4, 5, 3, 1)
	// w1 5×8=40, b1 8, w2 8×3=24, b2 3: [0,40) alone, b1 alone (8+24 > 10), w2 alone, b2.
	if err := strategytest.SetupAll(ctx, ranks, &strategytest.MLP{In: 5, Hidden: 8, Out: 3}, ds.Fields(), 1); err != nil {
		t.Fatal(err)
	}
	got := ranks[0].(*sharded.Sharded).Units()
	var lens []int
	at := 0
	for _, u := range got {
		if u.Lo != at {
			t.Fatalf("units %v leave a gap at %d", got, at)
		}
		lens = append(lens, u.Hi-u.Lo)
		at = u.Hi
	}
	if want := []int{40, 8, 24, 3}; !slices.Equal(lens, want) {
		t.Errorf("unit lengths %v, want %v", lens, want)
	}
}

// A Setup that fails at the optimizer leaves Memory reporting nothing held,
// not a nil dereference.
func TestMemoryAfterAFailedSetupIsZero(t *testing.T) {
	group, err := inproc.NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sharded.New(sharded.Config{Group: group[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Teardown(t.Context())
	setup, err := strategytest.SetupFor(&strategytest.MLP{In: 2, Hidden: 3, Out: 1},
		[]data.Field{{Name: "x", Shape: []int{2}}, {Name: "y", Shape: []int{1}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	bad := errors.New("no optimizer today")
	setup.NewOptimizer = func() (optim.Optimizer, optim.Scheduler, error) { return nil, nil, bad }
	if err := s.Setup(t.Context(), setup); !errors.Is(err, bad) {
		t.Fatalf("Setup = %v, want the optimizer's error", err)
	}
	if mem := s.Memory(); mem != (strategy.Memory{}) {
		t.Errorf("Memory after a failed Setup = %+v, want zero", mem)
	}
}
