package sharded_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// Each sharded rank saves only its shard of the optimizer state, with its
// span; the shards of 2 ranks together load into 1 and into 3 ranks, which
// then hold, and save whole, exactly the 2-rank job's global tensors.
func TestShardedStateShardsLoadAtAnotherWorldSize(t *testing.T) {
	ctx := context.Background()
	m := &strategytest.MLP{In: 5, Hidden: 8, Out: 3, Optimizer: "adam", LR: 0.01}
	ds, _ := strategytest.Regression(12, 5, 3, 1)
	b, _ := strategytest.Rows(ds, 0, 12)
	save := func(ranks []strategy.Strategy, full bool) []*strategy.StateDict {
		out := make([]*strategy.StateDict, len(ranks))
		err := strategytest.Each(ranks, func(r int, s strategy.Strategy) (err error) {
			out[r], err = s.SaveState(ctx, strategy.SaveOptions{Full: full})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	two := shardedRanks(t, 2, 2, 64, nil)
	if err := strategytest.SetupAll(ctx, two, m, ds.Fields(), 1); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := strategytest.Step(ctx, two, strategy.OptimizerOptions{}, b); err != nil {
			t.Fatal(err)
		}
	}
	shards := save(two, false)
	merged := &strategy.StateDict{Blobs: shards[0].Blobs}
	for r, sd := range shards {
		for _, tn := range sd.Tensors {
			if tn.Name == "optimizer/exp_avg" && tn.Whole() {
				t.Errorf("rank %d saved all of %s without Full: it holds one shard", r, tn.Name)
			}
			if r == 0 || strings.HasPrefix(tn.Name, strategy.OptimizerPrefix) {
				merged.Tensors = append(merged.Tensors, tn)
			}
		}
	}
	want := save(two, true)[0]
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			ranks := shardedRanks(t, n, 2, 64, nil)
			if err := strategytest.SetupAll(ctx, ranks, m, ds.Fields(), 7); err != nil {
				t.Fatal(err)
			}
			if err := strategytest.Each(ranks, func(_ int, s strategy.Strategy) error { return s.LoadState(ctx, merged) }); err != nil {
				t.Fatal(err)
			}
			got := save(ranks, true)[0]
			if len(got.Tensors) != len(want.Tensors) {
				t.Fatalf("saved %d tensors, want %d", len(got.Tensors), len(want.Tensors))
			}
			for i, w := range want.Tensors {
				g := got.Tensors[i]
				if g.Name != w.Name || !g.Whole() || !slices.Equal(g.Data32, w.Data32) || !slices.Equal(g.Data64, w.Data64) {
					t.Errorf("tensor %d: got %s [%d, %d), want %s whole with the 2-rank job's values", i, g.Name, g.Lo, g.Hi, w.Name)
				}
			}
			if string(got.Blobs[strategy.BlobOptimizer]) != string(want.Blobs[strategy.BlobOptimizer]) {
				t.Errorf("optimizer blob %s, want %s", got.Blobs[strategy.BlobOptimizer], want.Blobs[strategy.BlobOptimizer])
			}
		})
	}
	// A shard missing: the error names the tensor and the span.
	partial := &strategy.StateDict{Blobs: shards[0].Blobs, Tensors: shards[0].Tensors}
	one := shardedRanks(t, 1, 2, 64, nil)
	if err := strategytest.SetupAll(ctx, one, m, ds.Fields(), 7); err != nil {
		t.Fatal(err)
	}
	if err := one[0].LoadState(ctx, partial); err == nil {
		t.Error("loaded rank 0's shard alone into a rank that holds every parameter")
	} else {
		t.Log(err)
	}
}

// A ddp rank's dict (the whole model and whole optimizer buffers) loads
// into sharded ranks of either stage at another world size: saved whole
// again, they hold exactly ddp's tensors, and training goes on from there
// as ddp's ranks do.
func TestShardedResumesDDPState(t *testing.T) {
	ctx := context.Background()
	m := &strategytest.MLP{In: 5, Hidden: 8, Out: 3, Optimizer: "adam", LR: 0.01}
	ds, _ := strategytest.Regression(36, 5, 3, 1)
	b, _ := strategytest.Rows(ds, 0, 12)
	group, _ := inproc.NewGroup(3, inproc.Timeout(20*time.Second))
	ref := make([]strategy.Strategy, 3)
	for r := range ref {
		ref[r], _ = ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
	}
	if err := strategytest.SetupAll(ctx, ref, m, ds.Fields(), 1); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := strategytest.Step(ctx, ref, strategy.OptimizerOptions{}, b); err != nil {
			t.Fatal(err)
		}
	}
	saved, err := ref[0].SaveState(ctx, strategy.SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saved = cloneState(saved)
	next, _ := strategytest.Rows(ds, 12, 24)
	if _, _, err := strategytest.Step(ctx, ref, strategy.OptimizerOptions{}, next); err != nil {
		t.Fatal(err)
	}
	for _, stage := range []int{1, 2} {
		t.Run(fmt.Sprintf("stage=%d", stage), func(t *testing.T) {
			ranks := shardedRanks(t, 2, stage, 64, nil)
			if err := strategytest.SetupAll(ctx, ranks, m, ds.Fields(), 7); err != nil {
				t.Fatal(err)
			}
			if err := strategytest.Each(ranks, func(_ int, s strategy.Strategy) error { return s.LoadState(ctx, saved) }); err != nil {
				t.Fatal(err)
			}
			got := make([]*strategy.StateDict, len(ranks))
			err := strategytest.Each(ranks, func(r int, s strategy.Strategy) (err error) {
				got[r], err = s.SaveState(ctx, strategy.SaveOptions{Full: true})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range saved.Tensors {
				g := got[1].Lookup(w.Name)
				if g == nil || !g.Whole() || !slices.Equal(g.Data32, w.Data32) || !slices.Equal(g.Data64, w.Data64) {
					t.Errorf("%s: after loading ddp's state and saving it whole, it differs from ddp's", w.Name)
				}
			}
			// The third step, from the loaded state, on 2 ranks of 6 rows
			// each: the global batch ddp's 3 ranks of 4 rows took.
			if _, _, err := strategytest.Step(ctx, ranks, strategy.OptimizerOptions{}, next); err != nil {
				t.Fatal(err)
			}
			want, have := strategytest.StoreOf(ref[0]).Data32(), strategytest.StoreOf(ranks[0]).Data32()
			for i := range want {
				if d := math.Abs(float64(want[i] - have[i])); d > 1e-6+1e-5*math.Abs(float64(want[i])) {
					t.Fatalf("weight %d after a step from ddp's state: %v, ddp's %v", i, have[i], want[i])
				}
			}
		})
	}
}

// cloneState copies sd's data (a replica's dict views its live store).
func cloneState(sd *strategy.StateDict) *strategy.StateDict {
	out := &strategy.StateDict{Blobs: sd.Blobs}
	for _, t := range sd.Tensors {
		t.Data32, t.Data64 = slices.Clone(t.Data32), slices.Clone(t.Data64)
		out.Tensors = append(out.Tensors, t)
	}
	return out
}
