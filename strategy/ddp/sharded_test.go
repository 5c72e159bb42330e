package ddp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/device/fakedevice"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

func shardedRanks(t testing.TB, n, stage int, gopts []inproc.Option, dopts ...fakedevice.Option) []strategy.Strategy {
	t.Helper()
	group, err := inproc.NewGroup(n, append([]inproc.Option{inproc.Timeout(20 * time.Second)}, gopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := fakedevice.New(n, dopts...)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]strategy.Strategy, n)
	for r := range out {
		s, err := ddp.NewSharded(ddp.ShardedConfig{DDPConfig: ddp.DDPConfig{Group: group[r], Device: devs[r], BucketBytes: 64}, Stage: stage})
		if err != nil {
			t.Fatal(err)
		}
		out[r] = s
	}
	return out
}

func TestShardedConformance(t *testing.T) {
	for _, stage := range []int{1, 2} {
		t.Run(fmt.Sprintf("stage=%d", stage), func(t *testing.T) {
			strategytest.RunAll(t, func(t testing.TB, n int) []strategy.Strategy { return shardedRanks(t, n, stage, nil) })
		})
	}
}

// TestShardedMemoryFallsAsOneOverN measures what each rank holds after a
// step of Adam: optimizer state (and, at stage 2, reduced gradients) per rank
// must be the whole model's divided by N (to one element, as shards of an
// uneven length differ by one), while DDP keeps all of it on every rank.
func TestShardedMemoryFallsAsOneOverN(t *testing.T) {
	ctx := context.Background()
	m := &strategytest.MLP{In: 20, Hidden: 31, Out: 3, Optimizer: "adam"} // 20·31+31+31·3+3 = 747 parameters
	const np, elem = 747, 4
	ds, _ := strategytest.Regression(8, 20, 3, 1)
	b, _ := strategytest.Rows(ds, 0, 8)
	for _, n := range []int{1, 2, 4} {
		for _, stage := range []int{0, 1, 2} { // 0: DDP, for comparison
			name := fmt.Sprintf("ddp/N=%d", n)
			var ranks []strategy.Strategy
			if stage == 0 {
				ranks = ddpRanks(t, n, 0, nil)
			} else {
				name = fmt.Sprintf("stage%d/N=%d", stage, n)
				ranks = shardedRanks(t, n, stage, nil)
			}
			if err := strategytest.SetupAll(ctx, ranks, m, ds.Fields(), 1); err != nil {
				t.Fatal(err)
			}
			if _, _, err := strategytest.Step(ctx, ranks, strategy.OptimizerOptions{}, b); err != nil {
				t.Fatal(err)
			}
			for r, s := range ranks {
				got := s.(strategy.MemoryReporter).Memory()
				share := np / n
				if r < np%n {
					share++
				}
				wantState, wantReduced := 2*share*elem, share*elem // Adam: exp_avg and exp_avg_sq
				if stage == 0 {
					wantState, wantReduced = 2*np*elem, np*elem
				}
				if stage == 1 {
					wantReduced = np * elem
				}
				if got.OptimizerState != wantState || got.ReducedGrads != wantReduced || got.LocalGrads != np*elem {
					t.Errorf("%s rank %d: memory %+v, want optimizer state %d B, reduced gradients %d B, local gradients %d B",
						name, r, got, wantState, wantReduced, np*elem)
				}
				t.Logf("%s rank %d: optimizer state %d B, reduced gradients %d B", name, r, got.OptimizerState, got.ReducedGrads)
			}
			strategytest.Each(ranks, func(_ int, s strategy.Strategy) error { return s.Teardown(ctx) })
		}
	}
}

func TestShardedKilledRankIsNamed(t *testing.T) {
	const n = 3
	for _, stage := range []int{1, 2} {
		t.Run(fmt.Sprintf("stage=%d", stage), func(t *testing.T) {
			ranks := shardedRanks(t, n, stage, []inproc.Option{inproc.KillRank(2, 5)})
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
			killed(t, err, n, 2, start)
		})
	}
}

func TestShardedRegistered(t *testing.T) {
	for name, want := range map[string]string{"sharded": "sharded", "sharded_stage1": "sharded_stage1", "sharded_stage2": "sharded_stage2"} {
		s, err := strategy.New(name, strategy.Options{Devices: 1, Lookup: func(string) (string, bool) { return "", false }})
		if err != nil || s.Info().Name != want {
			t.Errorf("New(%q) = %v, %v", name, s, err)
		}
	}
	_, err := strategy.New("sharded", strategy.Options{Devices: 2, NumNodes: 2, Lookup: func(string) (string, bool) { return "", false }})
	if err == nil || !strings.Contains(err.Error(), "not started by a launcher") {
		t.Errorf("sharded on 2 nodes without a launcher: %v", err)
	}
}
