package strategytest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/single"
)

// Factory returns the strategies of a fresh job over devices devices: one
// value per process (a single value for in-process strategies such as DP,
// one per rank for DDP over an in-process collective). It registers cleanup
// with t, and calls t.Skip when the strategy cannot use that many devices.
type Factory func(t testing.TB, devices int) []strategy.Strategy

// ReplicaStores is implemented by strategies that keep several replicas in
// one process (DP); the suite checks that they stay bit-identical.
type ReplicaStores interface {
	ReplicaStores() []*module.Store
}

// Tolerances of the equivalence checks: |got - want| <= Abs + Rel·|want| for
// every parameter after Steps steps, against one device with the global
// batch. The difference comes only from summing the batch in another order
// (per-replica means averaged, instead of one mean).
const (
	Steps  = 4
	PerDev = 3 // rows per device per step
	AbsTol = 2e-6
	RelTol = 2e-5
)

const (
	in, hidden, out = 5, 8, 3
	seed            = 42
)

// RunAll runs the suite for 1, 2 and 3 devices, with float32 parameters
// and, for the training checks, float64 ones too.
func RunAll(t *testing.T, f Factory) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("devices=%d", n), func(t *testing.T) {
			t.Run("Identity", func(t *testing.T) { identity(t, f, n) })
			for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
				for _, opt := range []string{"sgd", "adam"} {
					t.Run(fmt.Sprintf("Equivalence/%s/%v", opt, dt), func(t *testing.T) { equivalence(t, f, n, dt, opt, strategy.OptimizerOptions{}, 1) })
				}
				t.Run(fmt.Sprintf("Accumulation/%v", dt), func(t *testing.T) { equivalence(t, f, n, dt, "sgd", strategy.OptimizerOptions{}, 2) })
				t.Run(fmt.Sprintf("ClipNorm/%v", dt), func(t *testing.T) { equivalence(t, f, n, dt, "adam", strategy.OptimizerOptions{ClipNorm: 0.05}, 1) })
				t.Run(fmt.Sprintf("ClipValue/%v", dt), func(t *testing.T) { equivalence(t, f, n, dt, "sgd", strategy.OptimizerOptions{ClipValue: 0.01}, 1) })
			}
			t.Run("Eval", func(t *testing.T) { eval(t, f, n) })
			t.Run("BeforeBackward", func(t *testing.T) { BeforeBackward(t, f, n) })
			t.Run("Ride", func(t *testing.T) { ride(t, f, n, strategy.OptimizerOptions{}) })
			t.Run("Ride/ClipNorm", func(t *testing.T) { ride(t, f, n, strategy.OptimizerOptions{ClipNorm: 0.05}) })
			t.Run("Reduce", func(t *testing.T) { reduce(t, f, n) })
			t.Run("State", func(t *testing.T) { state(t, f, n) })
			t.Run("Sampler", func(t *testing.T) { sampler(t, f, n) })
		})
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustSetup(t *testing.T, ctx context.Context, strats []strategy.Strategy, m module.Module, ds data.Dataset) {
	t.Helper()
	mustSetupDtype(t, ctx, strats, m, ds, tensor.Float32)
}

func mustSetupDtype(t *testing.T, ctx context.Context, strats []strategy.Strategy, m module.Module, ds data.Dataset, dtype tensor.Dtype) {
	t.Helper()
	if err := setupAll(ctx, strats, m, ds.Fields(), seed, dtype); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		if err := Each(strats, func(_ int, s strategy.Strategy) error { return s.Teardown(context.Background()) }); err != nil {
			t.Errorf("Teardown: %v", err)
		}
	})
}

func identity(t *testing.T, f Factory, n int) {
	strats := f(t, n)
	ctx := testCtx(t)
	ds, err := Regression(8, in, out, 1)
	if err != nil {
		t.Fatal(err)
	}
	mustSetup(t, ctx, strats, &MLP{In: in, Hidden: hidden, Out: out}, ds)
	P := len(strats)
	if P != 1 && P != n {
		t.Fatalf("the factory returned %d processes for %d devices: want 1 (in-process replicas) or %d (one per device)", P, n, n)
	}
	for r, s := range strats {
		i := s.Info()
		if i.Name == "" {
			t.Errorf("rank %d: Name is empty", r)
		}
		if i.Rank != r || i.WorldSize != P || i.GlobalZero != (r == 0) {
			t.Errorf("process %d says rank %d of %d, global zero %v: want rank %d of %d, global zero %v",
				r, i.Rank, i.WorldSize, i.GlobalZero, r, P, r == 0)
		}
		if StoreOf(s) == nil {
			t.Errorf("rank %d: the strategy is not a strategy.Replica, or its Store is nil after Setup", r)
		}
	}
	if err := Each(strats, func(_ int, s strategy.Strategy) error { return strategy.Barrier(ctx, s) }); err != nil {
		t.Errorf("Barrier: %v", err)
	}
	// Rank r was set up with seed+r: after Setup every rank must hold rank
	// 0's parameters and buffers.
	ref := refStore(t, ds)
	for r, h := range Hashes(strats) {
		if h != ref.SHA256() {
			t.Errorf("rank %d's initial parameters differ from rank 0's seed: Setup must broadcast rank 0's parameters and buffers", r)
		}
	}
	for i := 0; i < 2; i++ {
		if err := Each(strats, func(_ int, s strategy.Strategy) error { return s.Teardown(ctx) }); err != nil {
			t.Errorf("Teardown #%d: %v (Teardown must be safe to call twice)", i+1, err)
		}
	}
}

func refStore(t *testing.T, ds data.Dataset) *module.Store {
	s := single.NewSingle()
	su, err := SetupFor(&MLP{In: in, Hidden: hidden, Out: out}, ds.Fields(), seed)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Setup(context.Background(), su); err != nil {
		t.Fatal(err)
	}
	return s.Store()
}

// Float64 tolerances of the equivalence checks against the reference: the
// only differences are summation orders in float64.
const (
	AbsTol64 = 1e-12
	RelTol64 = 1e-10
)

// equivalence trains Steps steps of accum micro-batches on n devices and
// compares the parameters with reference, plain float64 loops over the
// global batch of each step (independent of the engine, the optimizers and
// every strategy, single included).
func equivalence(t *testing.T, f Factory, n int, dtype tensor.Dtype, opt string, so strategy.OptimizerOptions, accum int) {
	strats := f(t, n)
	ctx := testCtx(t)
	B := n * PerDev
	ds, err := Regression(Steps*B*accum, in, out, 3)
	if err != nil {
		t.Fatal(err)
	}
	m := &MLP{In: in, Hidden: hidden, Out: out, Optimizer: opt, LR: 0.02}
	mustSetupDtype(t, ctx, strats, m, ds, dtype)
	init := storeFloats(StoreOf(strats[0]))
	var wholes []*data.Batch
	for k := 0; k < Steps; k++ {
		micro := make([]*data.Batch, accum)
		for i := range micro {
			lo := (k*accum + i) * B
			if micro[i], err = Rows(ds, lo, lo+B); err != nil {
				t.Fatal(err)
			}
		}
		whole, err := Rows(ds, k*accum*B, (k+1)*accum*B)
		if err != nil {
			t.Fatal(err)
		}
		wholes = append(wholes, whole)
		if _, _, err := Step(ctx, strats, so, micro...); err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
	}
	want, err := reference(StoreOf(strats[0]), init, m, so, wholes)
	if err != nil {
		t.Fatal(err)
	}
	absTol, relTol := AbsTol, RelTol
	if dtype == tensor.Float64 {
		absTol, relTol = AbsTol64, RelTol64
	}
	got := storeFloats(StoreOf(strats[0]))
	worst, at, maxAbs := 0.0, -1, 0.0
	for i := range want {
		a := math.Abs(got[i] - want[i])
		maxAbs = math.Max(maxAbs, a)
		if d := a - relTol*math.Abs(want[i]); d > worst || math.IsNaN(a) {
			worst, at = d, i
		}
	}
	t.Logf("largest difference from the float64 reference after %d steps: %.3g", Steps, maxAbs)
	if at >= 0 && !(worst <= absTol) {
		t.Errorf("after %d steps parameter %d is %g, the reference with batch %d gives %g (beyond %g + %g·|want|)", Steps, at, got[at], B*accum, want[at], absTol, relTol)
	}
	if h := Hashes(strats); len(slices.Compact(slices.Clone(h))) != 1 {
		t.Errorf("processes are not bit-identical after training: %v", h)
	}
	if rs, ok := strats[0].(ReplicaStores); ok {
		stores := rs.ReplicaStores()
		if len(stores) != n {
			t.Errorf("ReplicaStores returned %d stores for %d devices", len(stores), n)
		}
		for i, s := range stores {
			if s.SHA256() != StoreOf(strats[0]).SHA256() {
				t.Errorf("replica %d is not bit-identical to replica 0 after training", i)
			}
		}
	}
}

func near(a, b float64) bool {
	return math.Abs(a-b) <= AbsTol+RelTol*math.Abs(b)
}

// eval checks that validation metrics, reduced across processes the way the
// trainer does, equal one device's over the whole set.
func eval(t *testing.T, f Factory, n int) {
	strats := f(t, n)
	ctx := testCtx(t)
	B := n * PerDev
	ds, err := Regression(B, in, out, 5)
	if err != nil {
		t.Fatal(err)
	}
	mustSetup(t, ctx, strats, &MLP{In: in, Hidden: hidden, Out: out}, ds)
	ref := []strategy.Strategy{single.NewSingle()}
	mustSetup(t, ctx, ref, &MLP{In: in, Hidden: hidden, Out: out}, ds)
	b, err := Rows(ds, 0, B)
	if err != nil {
		t.Fatal(err)
	}
	P := len(strats)
	sums, weights := make([][]float64, P), make([][]float64, P)
	err = Each(strats, func(r int, s strategy.Strategy) error {
		res, err := s.Step(ctx, module.Validate, Shard(b, r, P), strategy.TrainOptions{})
		if err != nil {
			return err
		}
		ms := res.Metrics
		if len(ms) != 1 || ms[0].Name != "val_loss" {
			return fmt.Errorf("EvalStep returned %v, want one metric val_loss", ms)
		}
		sums[r], weights[r] = []float64{ms[0].Value * ms[0].Weight}, []float64{ms[0].Weight}
		return s.Reduce(ctx, sums[r], weights[r], []module.Reduce{module.Mean})
	})
	if err != nil {
		t.Fatal(err)
	}
	rr, err := ref[0].Step(ctx, module.Validate, b, strategy.TrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rm := rr.Metrics
	for r := range strats {
		if weights[r][0] != float64(B) {
			t.Errorf("rank %d: reduced weight %g, want %d rows", r, weights[r][0], B)
		}
		if got := sums[r][0] / weights[r][0]; !near(got, rm[0].Value) {
			t.Errorf("rank %d: val_loss %g, one device gives %g", r, got, rm[0].Value)
		}
	}
	if res, err := strats[0].Step(ctx, module.Predict, Shard(b, 0, P), strategy.TrainOptions{}); err != nil || res.Output == nil {
		t.Errorf("Step in predict mode: output %v, error %v", res.Output, err)
	}
}

func reduce(t *testing.T, f Factory, n int) {
	strats := f(t, n)
	ctx := testCtx(t)
	ds, _ := Regression(4, in, out, 1)
	mustSetup(t, ctx, strats, &MLP{In: in, Hidden: hidden, Out: out}, ds)
	P := len(strats)
	ops := []module.Reduce{module.Mean, module.Sum, module.Max, module.Min}
	got := make([][]float64, P)
	gotW := make([][]float64, P)
	err := Each(strats, func(r int, s strategy.Strategy) error {
		v := float64(r + 1)
		got[r] = []float64{2 * v, v, v, -v}
		gotW[r] = []float64{2, 1, 1, 1}
		return s.Reduce(ctx, got[r], gotW[r], ops)
	})
	if err != nil {
		t.Fatal(err)
	}
	tri := float64(P * (P + 1) / 2)
	want := []float64{2 * tri, tri, float64(P), -float64(P)}
	for r := range strats {
		if !slices.Equal(got[r], want) || gotW[r][0] != float64(2*P) {
			t.Errorf("rank %d: Reduce gave sums %v weight %g, want %v weight %d", r, got[r], gotW[r][0], want, 2*P)
		}
	}
}

// sampler checks the distributed sampler of a strategy that has one: every
// process trains the same number of rows and together they cover the data
// set; evaluation visits every row exactly once.
func sampler(t *testing.T, f Factory, n int) {
	strats := f(t, n)
	ctx := testCtx(t)
	ds, _ := Regression(4, in, out, 1)
	mustSetup(t, ctx, strats, &MLP{In: in, Hidden: hidden, Out: out}, ds)
	if _, ok := strats[0].(strategy.Sampler); !ok {
		if len(strats) > 1 {
			t.Fatalf("%d processes share the data but the strategy is not a strategy.Sampler: each would train on every row", len(strats))
		}
		t.Skip("one process, no distributed sampler")
	}
	const rows = 11
	counts := make([]int, rows)
	var trainLen []int
	for _, s := range strats {
		idx, _ := s.(strategy.Sampler).DistributedSampler(true, 9, true).Order(0, rows)
		trainLen = append(trainLen, len(idx))
		for _, i := range idx {
			counts[i]++
		}
		idx, pad := s.(strategy.Sampler).DistributedSampler(true, 9, false).Order(0, rows)
		for j, i := range idx {
			if pad != nil && pad[j] {
				t.Errorf("rank %d: the evaluation sampler pads (row %d): duplicates would skew metrics", s.Info().Rank, i)
			}
			counts[i] += 100
		}
	}
	if len(slices.Compact(slices.Clone(trainLen))) != 1 {
		t.Errorf("processes train %v rows per epoch: every rank must run the same number of steps", trainLen)
	}
	for i, c := range counts {
		if c/100 != 1 || c%100 < 1 {
			t.Errorf("row %d: visited %d times in evaluation and %d in training, want 1 and at least 1", i, c/100, c%100)
		}
	}
}

// state checks SaveState and LoadState: a fresh job loaded with the state
// a job saved after two steps (weights and Adam's moments and step count)
// holds its weights and takes the third step exactly as it does.
func state(t *testing.T, f Factory, n int) {
	strats, fresh := f(t, n), f(t, n)
	ctx := testCtx(t)
	B := n * PerDev
	ds, err := Regression(3*B, in, out, 7)
	if err != nil {
		t.Fatal(err)
	}
	m := &MLP{In: in, Hidden: hidden, Out: out, Optimizer: "adam", LR: 0.02}
	mustSetup(t, ctx, strats, m, ds)
	mustSetup(t, ctx, fresh, m, ds)
	batch := func(k int) *data.Batch {
		b, err := Rows(ds, k*B, (k+1)*B)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for k := 0; k < 2; k++ {
		if _, _, err := Step(ctx, strats, strategy.OptimizerOptions{}, batch(k)); err != nil {
			t.Fatal(err)
		}
	}
	saved := make([]*strategy.StateDict, len(strats))
	err = Each(strats, func(r int, s strategy.Strategy) (err error) {
		saved[r], err = s.SaveState(ctx, strategy.SaveOptions{Full: true})
		return err
	})
	if err != nil {
		t.Fatalf("SaveState: %v", err)
	}
	for _, tn := range saved[0].Tensors {
		if !tn.Whole() {
			t.Errorf("SaveState with Full: rank 0 holds [%d, %d) of %q, want all %d elements", tn.Lo, tn.Hi, tn.Name, tn.Size())
		}
	}
	if err := Each(fresh, func(r int, s strategy.Strategy) error { return s.LoadState(ctx, saved[0]) }); err != nil {
		t.Fatalf("LoadState: %v", err)
	}
	if got, want := Hashes(fresh), Hashes(strats); !slices.Equal(got, want) {
		t.Errorf("after LoadState the weights hash to %v, the saved job's to %v", got, want)
	}
	for _, job := range [][]strategy.Strategy{strats, fresh} {
		if _, _, err := Step(ctx, job, strategy.OptimizerOptions{}, batch(2)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := Hashes(fresh), Hashes(strats); !slices.Equal(got, want) {
		t.Errorf("one step after LoadState the weights hash to %v, the saved job's to %v: the optimizer state was not restored", got, want)
	}
}
