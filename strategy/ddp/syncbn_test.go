package ddp_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/device/fakedevice"
	"github.com/fulgur-ml/fulgur/strategy/dp"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// bnNet is Linear(6→8) → BatchNorm1d(8) with ReLU → Linear(8→2), mean
// squared error: a model whose gradients and buffers depend on the batch
// statistics. layerSync builds its BatchNorm with nn.BatchNormSync.
type bnNet struct {
	layerSync bool
	l1, l2    *nn.Linear
	bn        *nn.BatchNorm
}

func (m *bnNet) Configure(b *module.Builder) error {
	m.l1 = nn.NewLinear(b, "l1", 6, 8)
	var opts []nn.BatchNormOption
	if m.layerSync {
		opts = append(opts, nn.BatchNormSync())
	}
	m.bn = nn.NewBatchNorm1d(b, "bn", 8, opts...)
	m.l2 = nn.NewLinear(b, "l2", 8, 2)
	return nil
}

func (m *bnNet) TrainingStep(s *module.Step) (*G.Node, error) {
	return squaredError(s, m.l2.Forward(s, m.bn.ForwardReLU(s, m.l1.Forward(s, s.Input("x"))))), nil
}

// syncSetup sets every process up with its own bnNet, rank r with seed 1+r
// (DDP broadcasts rank 0's), and SyncBatchNorm as given.
func syncSetup(ctx context.Context, strats []strategy.Strategy, layerSync bool, fields []data.Field, syncAll bool) error {
	return strategytest.Each(strats, func(r int, s strategy.Strategy) error {
		su, err := strategytest.SetupFor(&bnNet{layerSync: layerSync}, fields, 1+uint64(r))
		if err != nil {
			return err
		}
		su.SyncBatchNorm = syncAll
		return s.Setup(ctx, su)
	})
}

// With SyncBatchNorm, N replicas with batch b each train like one device
// with batch N·b and a plain BatchNorm: parameters and the running mean and
// variance agree after K steps within float32 rounding (|diff| ≤ 1e-5 +
// 1e-4·|want|, the conformance suite's bound). Without it they do not (the
// running statistics are rank 0's local ones), so the test tells them apart.
func TestSyncBatchNormTrainsLikeOneDevice(t *testing.T) {
	const (
		steps          = 4
		absTol, relTol = 1e-5, 1e-4
	)
	ds, err := strategytest.Regression(steps*16, 6, 2, 9)
	if err != nil {
		t.Fatal(err)
	}
	ddp2 := func(t *testing.T) []strategy.Strategy { return ddpRanks(t, 2, 0, nil) }
	dp := func(n int) func(t *testing.T) []strategy.Strategy {
		return func(t *testing.T) []strategy.Strategy {
			devs, err := fakedevice.New(n)
			if err != nil {
				t.Fatal(err)
			}
			d, err := dp.NewDP(dp.DPConfig{Devices: devs})
			if err != nil {
				t.Fatal(err)
			}
			return []strategy.Strategy{d}
		}
	}
	sharded := func(t *testing.T) []strategy.Strategy { return shardedRanks(t, 2) }
	ctx := context.Background()
	// batches are the micro-batches of step k: accum global batches.
	batches := func(k, global, accum int) []*data.Batch {
		out := make([]*data.Batch, max(accum, 1))
		for i := range out {
			lo := (k*len(out) + i) * global
			out[i], _ = strategytest.Rows(ds, lo, lo+global)
		}
		return out
	}
	// oneDevice is the store of one device with a plain BatchNorm after
	// training on global batches of the given size.
	type refKey struct{ global, accum int }
	oneDevice := map[refKey]*module.Store{}
	reference := func(t *testing.T, global, accum int) *module.Store {
		if st, ok := oneDevice[refKey{global, accum}]; ok {
			return st
		}
		ref := []strategy.Strategy{single.NewSingle()}
		if err := syncSetup(ctx, ref, false, ds.Fields(), false); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < steps; k++ {
			if _, _, err := strategytest.Step(ctx, ref, strategy.OptimizerOptions{}, batches(k, global, accum)...); err != nil {
				t.Fatal(err)
			}
		}
		oneDevice[refKey{global, accum}] = strategytest.StoreOf(ref[0])
		return strategytest.StoreOf(ref[0])
	}

	for _, tc := range []struct {
		name      string
		strats    func(t *testing.T) []strategy.Strategy
		global    int  // rows per micro-batch, all replicas together
		accum     int  // micro-batches per step (0: 1)
		syncAll   bool // Setup.SyncBatchNorm
		layer     bool // nn.BatchNormSync on the layer
		sameAsOne bool
	}{
		{"ddp/global", ddp2, 8, 0, true, false, true},
		{"ddp/layer", ddp2, 8, 0, false, true, true},
		{"ddp/off", ddp2, 8, 0, false, false, false},
		{"dp/global", dp(2), 8, 0, true, false, true},
		{"dp/off", dp(2), 8, 0, false, false, false},
		// 4 and 3 rows: the replicas' gradients weigh 4/7 and 3/7.
		{"dp/uneven", dp(2), 7, 0, true, false, true},
		// 2 rows on 3 replicas: one row each on two, the third idle.
		{"dp/idle-replica", dp(3), 2, 0, true, false, true},
		{"sharded2/global", sharded, 8, 0, true, false, true},
		// Micro-batches that do not communicate gradients still sync
		// their statistics.
		{"ddp/accumulate", ddp2, 8, 2, true, false, true},
		{"dp/accumulate", dp(2), 8, 2, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refStore := reference(t, tc.global, tc.accum)
			want := refStore.Data32()
			wantMean, wantVar := bufferOf(t, refStore, "bn.running_mean"), bufferOf(t, refStore, "bn.running_var")
			strats := tc.strats(t)
			if err := syncSetup(ctx, strats, tc.layer, ds.Fields(), tc.syncAll); err != nil {
				t.Fatal(err)
			}
			defer strategytest.Each(strats, func(_ int, s strategy.Strategy) error { return s.Teardown(ctx) })
			for k := 0; k < steps; k++ {
				if _, _, err := strategytest.Step(ctx, strats, strategy.OptimizerOptions{}, batches(k, tc.global, tc.accum)...); err != nil {
					t.Fatalf("step %d: %v", k, err)
				}
			}
			got := strategytest.StoreOf(strats[0]).Data32()
			worst, at, maxAbs := 0.0, -1, 0.0
			for i := range want {
				maxAbs = math.Max(maxAbs, math.Abs(float64(got[i]-want[i])))
				if d := math.Abs(float64(got[i]-want[i])) - relTol*math.Abs(float64(want[i])); d > worst {
					worst, at = d, i
				}
			}
			t.Logf("largest difference from one device with batch %d after %d steps: %.3g", tc.global, steps, maxAbs)
			mean, vr := bufferOf(t, strategytest.StoreOf(strats[0]), "bn.running_mean"), bufferOf(t, strategytest.StoreOf(strats[0]), "bn.running_var")
			if !tc.sameAsOne {
				if worst <= absTol {
					t.Fatalf("without SyncBatchNorm the store is within %g of one device's: the test cannot tell sync apart", worst)
				}
				return
			}
			if worst > absTol {
				t.Errorf("after %d steps store value %d is %g, one device with batch %d gives %g", steps, at, got[at], tc.global, want[at])
			}
			for i := range wantMean {
				if math.Abs(mean[i]-wantMean[i]) > absTol+relTol*math.Abs(wantMean[i]) || math.Abs(vr[i]-wantVar[i]) > absTol+relTol*math.Abs(wantVar[i]) {
					t.Errorf("channel %d: running mean %g var %g, one device gives %g %g", i, mean[i], vr[i], wantMean[i], wantVar[i])
				}
			}
			if h := strategytest.Hashes(strats); len(slices.Compact(slices.Clone(h))) != 1 {
				t.Errorf("ranks are not bit-identical: %v", h)
			}
			if rs, ok := strats[0].(interface{ ReplicaStores() []*module.Store }); ok {
				for i, s := range rs.ReplicaStores() {
					if s.SHA256() != strategytest.StoreOf(strats[0]).SHA256() {
						t.Errorf("replica %d differs from replica 0", i)
					}
				}
			}
		})
	}
}

func bufferOf(t *testing.T, s *module.Store, name string) []float64 {
	t.Helper()
	e, ok := s.Lookup(name)
	if !ok {
		t.Fatalf("no buffer %q", name)
	}
	out := make([]float64, e.Len)
	for i, v := range s.Data32()[e.Offset : e.Offset+e.Len] {
		out[i] = float64(v)
	}
	return out
}

// recorder logs the operations a rank's group runs, in the order they run.
type recorder struct {
	collective.Collective
	mu  sync.Mutex
	ops []string
}

func (r *recorder) log(kind string, buf any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	dt, n, _ := collective.Describe(buf)
	r.ops = append(r.ops, fmt.Sprintf("%s %v[%d]", kind, dt, n))
}

func (r *recorder) AllReduce(ctx context.Context, buf any, op collective.Op) error {
	r.log("all-reduce", buf)
	return r.Collective.AllReduce(ctx, buf, op)
}

func (r *recorder) Broadcast(ctx context.Context, buf any, root int) error {
	r.log("broadcast", buf)
	return r.Collective.Broadcast(ctx, buf, root)
}

// recordedRanks makes n DDP ranks over inproc, each from cfg with its
// Group (a recorder of the rank's member) and a 20 s Timeout, and returns
// them with the recorders.
func recordedRanks(t *testing.T, n int, cfg ddp.DDPConfig) ([]strategy.Strategy, []*recorder) {
	t.Helper()
	group, err := inproc.NewGroup(n, inproc.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*recorder, n)
	strats := make([]strategy.Strategy, n)
	for r := range strats {
		recs[r] = &recorder{Collective: group[r]}
		cfg.Group, cfg.Timeout = recs[r], 20*time.Second
		if strats[r], err = ddp.NewDDP(cfg); err != nil {
			t.Fatal(err)
		}
	}
	return strats, recs
}

// SyncBatchNorm's reductions run inside the graph, on the same ordered
// communication goroutine as the gradient buckets: on every rank and at
// every step they come after the buffer broadcast (forward statistics, then
// backward sums), never mixed with a bucket still in flight from the step
// before. Without overlap every bucket follows the backward sums; with it,
// the buckets of the layer after the BatchNorm (l2's bias, then its weight)
// and of the BatchNorm's own scale and shift (local sums, reduced as
// gradients like any other) are queued during the backward pass, before the
// sums its input gradient needs, at the same point on every rank.
func TestSyncBatchNormOrdersWithBuckets(t *testing.T) {
	const (
		fwd = "all-reduce float64[25]" // count, then n·mean, n·mean², M2 of 8 channels
		bwd = "all-reduce float64[16]" // Σdy', Σdy'·x̂ of 8 channels
	)
	for _, tc := range []struct {
		name      string
		noOverlap bool
		// early is how many buckets are queued before the backward sums.
		early int
	}{
		{"overlap", false, 3},
		{"no-overlap", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 2
			// 64-byte buckets: several reductions per step, started before
			// the last one is queued.
			strats, recs := recordedRanks(t, n, ddp.DDPConfig{BucketBytes: 64, NoOverlap: tc.noOverlap})
			ctx := context.Background()
			ds, _ := strategytest.Regression(24, 6, 2, 9)
			if err := syncSetup(ctx, strats, false, ds.Fields(), true); err != nil {
				t.Fatal(err)
			}
			buckets := strats[0].(*ddp.DDP).Buckets()
			if len(buckets) < 3 {
				t.Fatalf("%d buckets: the test needs several", len(buckets))
			}
			for k := 0; k < 3; k++ {
				b, _ := strategytest.Rows(ds, k*8, k*8+8)
				if _, _, err := strategytest.Step(ctx, strats, strategy.OptimizerOptions{}, b); err != nil {
					t.Fatal(err)
				}
			}
			if err := strategytest.Each(strats, func(_ int, s strategy.Strategy) error { return s.Teardown(ctx) }); err != nil {
				t.Fatal(err)
			}
			st := strategytest.StoreOf(strats[0])
			step := []string{fwd}
			for i, bk := range buckets {
				if i == tc.early {
					step = append(step, bwd)
				}
				n := bk.Hi - bk.Lo
				if i == len(buckets)-1 {
					// Rank 0's buffers ride with the last bucket: no
					// broadcast of their own after the update.
					n += st.Len() - st.NumParams()
				}
				step = append(step, fmt.Sprintf("all-reduce float32[%d]", n))
			}
			var want []string
			want = append(want, fmt.Sprintf("broadcast float32[%d]", st.Len())) // Setup
			for k := 0; k < 3; k++ {
				want = append(want, step...)
			}
			for r, rec := range recs {
				got := rec.ops
				if len(got) < len(want) {
					t.Fatalf("rank %d ran %v", r, got)
				}
				if !slices.Equal(got[:len(want)], want) {
					t.Errorf("rank %d ran\n%v\nwant\n%v", r, got[:len(want)], want)
				}
			}
		})
	}
}

// A DP replica that fails while the others wait in a SyncBatchNorm
// reduction frees them: the step returns the failure, naming the replica,
// instead of hanging.
func TestSyncBatchNormDPReplicaFailure(t *testing.T) {
	devs, err := fakedevice.New(3, fakedevice.FailAfter(2, 2)) // a step is two units: train, then copy the update
	if err != nil {
		t.Fatal(err)
	}
	dp, err := dp.NewDP(dp.DPConfig{Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ds, _ := strategytest.Regression(12, 6, 2, 1)
	strats := []strategy.Strategy{dp}
	if err := syncSetup(ctx, strats, false, ds.Fields(), true); err != nil {
		t.Fatal(err)
	}
	b, _ := strategytest.Rows(ds, 0, 6)
	if _, _, err := strategytest.Step(ctx, strats, strategy.OptimizerOptions{}, b); err != nil {
		t.Fatalf("first step: %v", err)
	}
	_, _, err = strategytest.Step(ctx, strats, strategy.OptimizerOptions{}, b)
	// The failure itself, not its echo in the replicas it freed.
	if err == nil || !strings.Contains(err.Error(), "replica 2 on fake:2: device") || strings.Contains(err.Error(), "SyncBatchNorm") {
		t.Fatalf("second step error = %v, want the failure of replica 2 on fake:2", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the step returned only when the context expired")
	}
	// The next step starts afresh: the failure does not stick to the
	// reduction (the fake device fails every time from now on, so the
	// error is the device's again, not a stale one).
	_, _, err = strategytest.Step(ctx, strats, strategy.OptimizerOptions{}, b)
	if err == nil || !strings.Contains(err.Error(), "replica 2 on fake:2") {
		t.Fatalf("third step error = %v", err)
	}
}

// BenchmarkSyncBatchNorm measures a training step of a small ResNet (widths
// 8, 16, 32: seven BatchNorm layers) on Fashion-MNIST-shaped random data at
// global batch 32, DP on 2 replicas and 2 in-process DDP ranks, without and
// with SyncBatchNorm: the cost of two small reductions per BatchNorm layer.
//
//	go test -run '^$' -bench SyncBatchNorm -benchtime 30x ./strategy/ddp
func BenchmarkSyncBatchNorm(b *testing.B) {
	const batch = 32
	r := rand.New(rand.NewPCG(1, 2))
	x, y := make([]float32, batch*784), make([]float32, batch)
	for i := range x {
		x[i] = float32(r.Float64())
	}
	for i := range y {
		y[i] = float32(r.IntN(10))
	}
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{1, 28, 28}}, {Name: "y"}}, [][]float32{x, y})
	if err != nil {
		b.Fatal(err)
	}
	whole, _ := strategytest.Rows(ds, 0, batch)
	for _, tc := range []struct {
		name string
		mk   func() []strategy.Strategy
	}{
		{"dp2", func() []strategy.Strategy {
			d, _ := dp.NewDP(dp.DPConfig{Devices: cpus(2)})
			return []strategy.Strategy{d}
		}},
		{"ddp2", func() []strategy.Strategy { return ddpRanks(b, 2, 0, nil) }},
	} {
		for _, synced := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/sync=%v", tc.name, synced), func(b *testing.B) {
				ranks := tc.mk()
				ctx := context.Background()
				err := strategytest.Each(ranks, func(rank int, s strategy.Strategy) error {
					m := &models.ResNet{Config: nn.ResNetConfig{BlocksPerStage: 1, Widths: []int{8, 16, 32}}}
					su, err := strategytest.SetupFor(m, ds.Fields(), 1)
					if err != nil {
						return err
					}
					su.SyncBatchNorm = synced
					return s.Setup(ctx, su)
				})
				if err != nil {
					b.Fatal(err)
				}
				defer strategytest.Each(ranks, func(_ int, s strategy.Strategy) error { return s.Teardown(ctx) })
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, _, err := strategytest.Step(ctx, ranks, strategy.OptimizerOptions{}, whole); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "samples/s")
			})
		}
	}
}

// shardedRanks makes n in-process ranks of sharded (ZeRO stage 2), for the
// tables that compare strategies.
func shardedRanks(t testing.TB, n int) []strategy.Strategy {
	t.Helper()
	group, err := inproc.NewGroup(n, inproc.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]strategy.Strategy, n)
	for r := range out {
		s, err := sharded.New(sharded.Config{Group: group[r], Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		out[r] = s
	}
	return out
}
