package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// wideBN is Linear(6→h) → BatchNorm1d(h) with ReLU → Linear(h→2): with h
// large, the bucket holding l1 is past what DDP copies to carry the
// buffers in the same all-reduce.
type wideBN struct {
	h      int
	l1, l2 *nn.Linear
	bn     *nn.BatchNorm
}

func (m *wideBN) Configure(b *module.Builder) error {
	m.l1 = nn.NewLinear(b, "l1", 6, m.h)
	m.bn = nn.NewBatchNorm1d(b, "bn", m.h)
	m.l2 = nn.NewLinear(b, "l2", m.h, 2)
	return nil
}

func (m *wideBN) TrainingStep(s *module.Step) (*G.Node, error) {
	return squaredError(s, m.l2.Forward(s, m.bn.ForwardReLU(s, m.l1.Forward(s, s.Input("x"))))), nil
}

// squaredError is the mean squared error of o, two outputs a row, against
// the input "y".
func squaredError(s *module.Step, o *G.Node) *G.Node {
	n := s.BatchSize() * 2
	d := G.Must(G.Sub(G.Must(G.Reshape(o, []int{n})), G.Must(G.Reshape(s.Input("y"), []int{n}))))
	return G.Must(G.Mean(G.Must(G.Square(d))))
}

// TestBuffersRideWithTheGradients: every rank trains on its own rows, so
// each computes its own BatchNorm running statistics; after every optimizer
// step every rank holds rank 0's, bit for bit, as the broadcast after the
// step gave them, and the weights are bit for bit those of a run that
// broadcasts buffers only at setup (BatchNorm trains on batch statistics,
// so the running ones never reach the weights): the last bucket summed
// with the buffers and divided on landing gives Mean's bits. The
// collectives of a step are the gradient buckets alone when the last
// bucket is small enough to carry the buffers, and one all-reduce more
// (none a broadcast) when it is not.
func TestBuffersRideWithTheGradients(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ranks  int
		bucket int
		mod    func() module.Module
		dtype  tensor.Dtype
		extra  int // collectives per step besides the buckets
	}{
		{"one bucket", 2, 0, func() module.Module { return &bnNet{} }, tensor.Float32, 0},
		{"one bucket, 3 ranks", 3, 0, func() module.Module { return &bnNet{} }, tensor.Float32, 0},
		{"one bucket, float64", 2, 0, func() module.Module { return &bnNet{} }, tensor.Float64, 0},
		{"16-float buckets", 3, 64, func() module.Module { return &bnNet{} }, tensor.Float32, 0},
		{"last bucket over 1 MiB", 2, 0, func() module.Module { return &wideBN{h: 50000} }, tensor.Float32, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ds, err := strategytest.Regression(4*8*tc.ranks, 6, 2, 9)
			if err != nil {
				t.Fatal(err)
			}
			run := func(once bool) ([]strategy.Strategy, []*recorder) {
				strats, recs := recordedRanks(t, tc.ranks, ddp.DDPConfig{BucketBytes: tc.bucket, BufferSyncOnce: once})
				if err := strategytest.Each(strats, func(r int, s strategy.Strategy) error {
					su, err := strategytest.SetupForDtype(tc.mod(), ds.Fields(), 1+uint64(r), tc.dtype)
					if err != nil {
						return err
					}
					return s.Setup(ctx, su)
				}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { strategytest.Each(strats, func(_ int, s strategy.Strategy) error { return s.Teardown(ctx) }) })
				return strats, recs
			}
			got, recs := run(false)
			ref, _ := run(true)
			st0 := strategytest.StoreOf(got[0])
			if st0.Len() == st0.NumParams() {
				t.Fatal("the model has no buffers")
			}
			for k := 0; k < 4; k++ {
				b, _ := strategytest.Rows(ds, k*8*tc.ranks, (k+1)*8*tc.ranks)
				for _, strats := range [][]strategy.Strategy{got, ref} {
					if _, _, err := strategytest.Step(ctx, strats, strategy.OptimizerOptions{}, b); err != nil {
						t.Fatal(err)
					}
				}
				want := strategytest.StoreOf(ref[0])
				for r := range got {
					st := strategytest.StoreOf(got[r])
					if i := bitsDiffer(st, want, 0, st.NumParams()); i >= 0 {
						t.Fatalf("step %d, rank %d: parameter %d is %v, want %v (the run broadcasting buffers at setup only)", k, r, i, at(st, i), at(want, i))
					}
					if i := bitsDiffer(st, want, st.NumParams(), st.Len()); i >= 0 {
						t.Fatalf("step %d, rank %d: buffer element %d is %v, want rank 0's %v", k, r, i, at(st, i), at(want, i))
					}
					if r > 0 && bitsDiffer(strategytest.StoreOf(ref[r]), want, st.NumParams(), st.Len()) < 0 {
						t.Fatalf("step %d, rank %d: the reference run's buffers equal rank 0's: the test cannot tell", k, r)
					}
				}
			}
			nb := len(got[0].(*ddp.DDP).Buckets())
			setup := fmt.Sprintf("broadcast %v[%d]", dtypeName(tc.dtype), st0.Len())
			for r, rec := range recs {
				ops := rec.ops
				if len(ops) == 0 || ops[0] != setup {
					t.Fatalf("rank %d ran %v; want the setup broadcast first", r, ops)
				}
				ops = ops[1:]
				if want := 4 * (nb + tc.extra); len(ops) != want {
					t.Errorf("rank %d ran %d collectives in 4 steps of %d buckets, want %d: %v", r, len(ops), nb, want, ops)
				}
				if i := slices.IndexFunc(ops, func(s string) bool { return strings.HasPrefix(s, "broadcast") }); i >= 0 {
					t.Errorf("rank %d broadcast during training: %v", r, ops)
				}
			}
		})
	}
}

func dtypeName(dt tensor.Dtype) string {
	if dt == tensor.Float64 {
		return "float64"
	}
	return "float32"
}

// bitsDiffer returns the first index in [lo, hi) where a and b hold
// different bits, or -1.
func bitsDiffer(a, b *module.Store, lo, hi int) int {
	for i := lo; i < hi; i++ {
		if bitsAt(a, i) != bitsAt(b, i) {
			return i
		}
	}
	return -1
}

func bitsAt(s *module.Store, i int) uint64 {
	if s.Dtype() == tensor.Float32 {
		return uint64(math.Float32bits(s.Data32()[i]))
	}
	return math.Float64bits(s.Data64()[i])
}

func at(s *module.Store, i int) float64 {
	if s.Dtype() == tensor.Float32 {
		return float64(s.Data32()[i])
	}
	return s.Data64()[i]
}

// bnModule is bnNet with a validation loss (in evaluation mode BatchNorm
// normalises with the running statistics, so val_loss depends on them).
type bnModule struct{ bnNet }

func (m *bnModule) TrainingStep(s *module.Step) (*G.Node, error) {
	l, err := m.bnNet.TrainingStep(s)
	s.Log("train_loss", l, module.OnEpoch(true))
	return l, err
}

func (m *bnModule) ValidationStep(s *module.Step) error {
	l, err := m.bnNet.TrainingStep(s) // the same loss, in evaluation mode
	s.Log("val_loss", l)
	return err
}

func (m *bnModule) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewAdam(optim.AdamConfig{LR: 0.01})
	return o, nil, err
}

// weightLog records what a callback sees of the weights (parameters and
// buffers) at every point where one can look; a rank's stopAt, when set,
// asks to stop at that global step's batch end.
type weightLog struct {
	seen   []string
	stopAt int
}

func (w *weightLog) Name() string { return "weightLog" }

func (w *weightLog) note(where string, s *trainer.State) {
	w.seen = append(w.seen, fmt.Sprintf("%s step %d: %s", where, s.GlobalStep, s.Weights.SHA256()))
}

func (w *weightLog) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	w.note("batch end", s)
	if w.stopAt > 0 && s.GlobalStep == w.stopAt {
		return trainer.Stop("asked at step %d", s.GlobalStep)
	}
	return nil
}

func (w *weightLog) OnValidationEnd(ctx context.Context, s *trainer.State) error {
	w.note(fmt.Sprintf("validation end (val_loss %v)", s.Metrics.Map()["val_loss"]), s)
	return nil
}

func (w *weightLog) OnTrainEpochEnd(ctx context.Context, s *trainer.State) error {
	w.note("epoch end", s)
	return nil
}

// TestEveryRankSeesRankZerosBuffers trains a BatchNorm model with DDP on 3
// ranks (inproc), each on its own rows, so each computes its own running
// statistics: at every batch end, validation end and epoch end, every
// rank's callbacks see the same parameters and buffers (rank 0's), the
// ranks' validation losses agree, and the ranks stop together at the same
// step, whether one rank's callback asks or EarlyStopping decides.
func TestEveryRankSeesRankZerosBuffers(t *testing.T) {
	huge := 1e9
	for _, tc := range []struct {
		name     string
		stopRank int // asks to stop at step 5 (-1: none)
		early    bool
		wantStep int
	}{
		{"two epochs", -1, false, 16},
		{"rank 1 stops at step 5", 1, false, 5},
		{"early stopping", -1, true, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3
			ds, err := strategytest.Regression(8*3*8, 6, 2, 9) // 8 batches of 8 rows per rank and epoch
			if err != nil {
				t.Fatal(err)
			}
			logs := make([]*weightLog, n)
			trs, errs := fitDDP(t, n, ds, 4, nil, func(r int, _ *ddp.DDP) []trainer.Callback {
				logs[r] = &weightLog{}
				if r == tc.stopRank {
					logs[r].stopAt = 5
				}
				cbs := []trainer.Callback{logs[r]}
				if tc.early {
					// Any change counts as none: stops at the second validation.
					es, err := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "val_loss", MinDelta: huge, Patience: 1})
					if err != nil {
						t.Fatal(err)
					}
					cbs = append(cbs, es)
				}
				return cbs
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r := range n {
				if got := trs[r].Stats().GlobalStep; got != tc.wantStep {
					t.Errorf("rank %d stopped at step %d, want %d", r, got, tc.wantStep)
				}
				if r == 0 {
					continue
				}
				if !slices.Equal(logs[r].seen, logs[0].seen) {
					t.Errorf("rank %d's callbacks saw\n%s\nrank 0's\n%s", r, strings.Join(logs[r].seen, "\n"), strings.Join(logs[0].seen, "\n"))
				}
				if a, b := trs[r].Store().SHA256(), trs[0].Store().SHA256(); a != b {
					t.Errorf("rank %d ends with weights %s, rank 0 with %s", r, a, b)
				}
			}
			if len(logs[0].seen) < tc.wantStep {
				t.Errorf("the callback saw %d points, want %d batch ends at least", len(logs[0].seen), tc.wantStep)
			}
		})
	}
}

// opsAtBatchEnd records, at every batch end, the collectives its rank has
// run so far.
type opsAtBatchEnd struct {
	rec  *recorder
	seen [][]string
}

func (o *opsAtBatchEnd) Name() string { return "opsAtBatchEnd" }

func (o *opsAtBatchEnd) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	o.rec.mu.Lock()
	defer o.rec.mu.Unlock()
	o.seen = append(o.seen, slices.Clone(o.rec.ops))
	return nil
}

// quietOps is opsAtBatchEnd declaring that it never stops at a step's
// end (trainer.StepEndStopper).
type quietOps struct{ *opsAtBatchEnd }

func (quietOps) StopsAtStepEnd() bool { return false }

// TestTrainerStepCollectives: a training step of DDP under the trainer,
// from one batch end to the next (no validation, logging or checkpoint in
// between), runs the gradient buckets, which carry rank 0's buffers, and
// no broadcast. With a callback that may stop at the batch end, one
// all-reduce of the ranks' stop flags follows; with callbacks that never
// stop there, the flags ride in the last bucket and a step runs nothing
// besides the buckets, with overlap or without. Both give the same
// weights, bit for bit.
func TestTrainerStepCollectives(t *testing.T) {
	const n = 2
	ds, err := strategytest.Regression(8*n*6, 6, 2, 9) // 6 batches of 8 rows per rank
	if err != nil {
		t.Fatal(err)
	}
	var weights []string
	for _, tc := range []struct {
		name      string
		quiet     bool // the callback declares it never stops at a step's end
		noOverlap bool
		extra     int // all-reduces of float64 (the stop flags) per step
	}{
		{"a callback that may stop", false, false, 1},
		{"callbacks that never stop", true, false, 0},
		{"callbacks that never stop, no overlap", true, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cbs := make([]*opsAtBatchEnd, n)
			strats := make([]*ddp.DDP, n)
			trs, errs := fitDDPConfig(t, n, ds, 0, func(r int, c *ddp.DDPConfig) {
				cbs[r] = &opsAtBatchEnd{rec: &recorder{Collective: c.Group}}
				c.Group, c.NoOverlap = cbs[r].rec, tc.noOverlap
			}, func(r int, d *ddp.DDP) []trainer.Callback {
				strats[r] = d
				if tc.quiet {
					return []trainer.Callback{quietOps{cbs[r]}}
				}
				return []trainer.Callback{cbs[r]}
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			nb := len(strats[0].Buckets())
			if nb < 2 {
				t.Fatalf("%d buckets: the test wants several", nb)
			}
			for r, cb := range cbs {
				if len(cb.seen) != 6 {
					t.Fatalf("rank %d: %d batch ends, want 6", r, len(cb.seen))
				}
				for k := 1; k < len(cb.seen); k++ {
					step := cb.seen[k][len(cb.seen[k-1]):]
					var buckets, others []string
					for _, op := range step {
						if strings.HasPrefix(op, "all-reduce float32") {
							buckets = append(buckets, op)
						} else {
							others = append(others, op)
						}
					}
					if len(buckets) != nb || len(others) != tc.extra || tc.extra > 0 && !strings.HasPrefix(others[0], "all-reduce float64") {
						t.Errorf("rank %d, step %d ran %v; want the %d buckets and %d all-reduce of the stop flags", r, k+1, step, nb, tc.extra)
					}
				}
			}
			weights = append(weights, trs[0].Store().SHA256())
			if trs[1].Store().SHA256() != weights[len(weights)-1] {
				t.Errorf("the ranks end with different weights")
			}
		})
	}
	for i, w := range weights {
		if w != weights[0] {
			t.Errorf("case %d ends with weights %s, case 0 with %s", i, w, weights[0])
		}
	}
}

// fitDDP fits bnModule with DDP on n ranks (inproc, 256-byte buckets),
// each in its own goroutine and trainer: two epochs of ds in batches of 8
// (one when valEvery is 0, without validation), validating every valEvery
// batches. wrap, when set, wraps each rank's collective; cbs gives each
// rank's callbacks and sees its strategy; ctxs, when set, is each rank's
// context for Fit. It returns the trainers and each rank's Fit error.
func fitDDP(t *testing.T, n int, ds data.Dataset, valEvery int, wrap func(int, collective.Collective) collective.Collective, cbs func(int, *ddp.DDP) []trainer.Callback, ctxs ...context.Context) ([]*trainer.Trainer, []error) {
	t.Helper()
	return fitDDPConfig(t, n, ds, valEvery, func(r int, c *ddp.DDPConfig) {
		if wrap != nil {
			c.Group = wrap(r, c.Group)
		}
	}, cbs, ctxs...)
}

// fitDDPConfig is fitDDP with each rank's DDPConfig (its Group set to
// the rank's inproc member) given to config to change.
func fitDDPConfig(t *testing.T, n int, ds data.Dataset, valEvery int, config func(int, *ddp.DDPConfig), cbs func(int, *ddp.DDP) []trainer.Callback, ctxs ...context.Context) ([]*trainer.Trainer, []error) {
	t.Helper()
	group, err := inproc.NewGroup(n, inproc.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	trs := make([]*trainer.Trainer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		dc := ddp.DDPConfig{Group: group[r], BucketBytes: 256, Timeout: 20 * time.Second}
		config(r, &dc)
		d, err := ddp.NewDDP(dc)
		if err != nil {
			t.Fatal(err)
		}
		cfg := trainer.Config{MaxEpochs: 2, Seed: 5, StrategyImpl: d, Callbacks: cbs(r, d), ValCheckInterval: valEvery, LogEveryNSteps: 1000,
			Out: io.Discard, EnableProgressBar: trainer.Bool(false), DefaultRootDir: t.TempDir(), HandleSignals: trainer.Bool(false)}
		var val *data.Loader
		if valEvery == 0 {
			cfg.MaxEpochs = 1
		} else if val, err = data.NewLoader(ds, data.LoaderConfig{BatchSize: 16}); err != nil {
			t.Fatal(err)
		}
		if trs[r], err = trainer.New(cfg); err != nil {
			t.Fatal(err)
		}
		train, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8, Shuffle: true, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if ctxs != nil {
			ctx = ctxs[r]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = trs[r].Fit(ctx, &bnModule{}, train, val)
			var ie *trainer.InterruptedError
			if errs[r] != nil && !errors.As(errs[r], &ie) {
				// As a rank's process would exit: its peers learn at
				// once instead of at their timeout.
				trs[r].Teardown(context.Background())
			}
		}()
	}
	wg.Wait()
	return trs, errs
}

// cancelAt cancels its rank's context at a global step's batch end, and
// asks to stop there when stop is set.
type cancelAt struct {
	step   int
	cancel context.CancelFunc
	stop   bool
}

func (c *cancelAt) Name() string { return "cancelAt" }

func (c *cancelAt) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.GlobalStep != c.step {
		return nil
	}
	return c.fire("at step %d", c.step)
}

// fire cancels and asks to stop, as c says.
func (c *cancelAt) fire(format string, args ...any) error {
	if c.cancel != nil {
		c.cancel()
	}
	if c.stop {
		return trainer.Stop("asked "+format, args...)
	}
	return nil
}

// quietCancelAt is cancelAt declaring that it never stops at a step's end
// (it only cancels): the stop flags ride with the gradients.
type quietCancelAt struct{ *cancelAt }

func (quietCancelAt) StopsAtStepEnd() bool { return false }

// cancelBefore does what its cancelAt says in OnBeforeBackward of the
// step that makes global step c.step: before the step's gradients are
// sent.
type cancelBefore struct{ c cancelAt }

func (c *cancelBefore) Name() string { return "cancelBefore" }

func (c *cancelBefore) OnBeforeBackward(ctx context.Context, s *trainer.State, loss float64) error {
	if s.GlobalStep+1 != c.c.step {
		return nil
	}
	return c.c.fire("before step %d's backward pass", c.c.step)
}

// TestStopAgreementCarriesCancellation: one rank's context is cancelled:
// every rank stops at the same step with an *InterruptedError and saves
// the interrupt checkpoint, the others saying another rank's context was
// cancelled; a cancellation wins over another rank's Stop at the same
// step. With a callback that may stop at the batch end the ranks agree
// after each batch, so a cancellation there stops them at that step; with
// callbacks that never stop there the agreement rides with the next
// step's gradients: a cancellation at step 3's end stops them at step 4
// (the step in progress finishes, its context detached from the
// cancellation), one before step 3's backward pass at step 3.
func TestStopAgreementCarriesCancellation(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stopRank   int // asks to stop at step 3 too (-1: none)
		cancelRank int
		quiet      bool // callbacks that never stop at a step's end
		before     bool // cancels in OnBeforeBackward instead of at the batch end
		wantStep   int
	}{
		{"rank 1 cancelled", -1, 1, false, false, 3},
		{"rank 0 stops, rank 1 cancelled", 0, 1, false, false, 3},
		{"rank 0 cancelled, rank 1 stops", 1, 0, false, false, 3},
		{"flags ride: rank 1 cancelled at the batch end", -1, 1, true, false, 4},
		{"flags ride: rank 0 cancelled at the batch end", -1, 0, true, false, 4},
		{"flags ride: rank 1 cancelled before backward", -1, 1, true, true, 3},
		{"flags ride: rank 0 stops, rank 1 cancelled before backward", 0, 1, true, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 2
			ds, err := strategytest.Regression(8*n*6, 6, 2, 9)
			if err != nil {
				t.Fatal(err)
			}
			ctxs := make([]context.Context, n)
			cancels := make([]context.CancelFunc, n)
			for r := range ctxs {
				ctxs[r], cancels[r] = context.WithCancel(context.Background())
				defer cancels[r]()
			}
			var recs [n]*recorder
			trs, errs := fitDDP(t, n, ds, 0, func(r int, g collective.Collective) collective.Collective {
				recs[r] = &recorder{Collective: g}
				return recs[r]
			}, func(r int, _ *ddp.DDP) []trainer.Callback {
				var cancel context.CancelFunc
				if r == tc.cancelRank {
					cancel = cancels[r]
				}
				if tc.before {
					c := &cancelBefore{cancelAt{step: 3, cancel: cancel, stop: r == tc.stopRank}}
					if !tc.quiet {
						return []trainer.Callback{c, &cancelAt{}}
					}
					return []trainer.Callback{c}
				}
				c := &cancelAt{step: 3, cancel: cancel, stop: r == tc.stopRank}
				if tc.quiet {
					return []trainer.Callback{quietCancelAt{c}}
				}
				return []trainer.Callback{c}
			}, ctxs...)
			for r, err := range errs {
				var ie *trainer.InterruptedError
				if !errors.As(err, &ie) {
					t.Fatalf("rank %d: Fit returned %v, want an *InterruptedError", r, err)
				}
				if r == tc.cancelRank && !errors.Is(err, context.Canceled) {
					t.Errorf("rank %d: %v, want it to wrap context.Canceled", r, err)
				}
				if r != tc.cancelRank && !strings.Contains(err.Error(), "another rank's context was cancelled") {
					t.Errorf("rank %d: %v, want another rank's cancellation named", r, err)
				}
				if ie.GlobalStep != tc.wantStep || trs[r].Stats().GlobalStep != tc.wantStep {
					t.Errorf("rank %d stopped at step %d (stats %d), want %d", r, ie.GlobalStep, trs[r].Stats().GlobalStep, tc.wantStep)
				}
				if ie.Checkpoint == "" {
					t.Errorf("rank %d: no interrupt checkpoint", r)
				}
				// Every step's collectives are float32 buckets; the stop
				// flags' own all-reduce is the float64 one of 5 values and
				// their 5 weights. Those before the first step agree on
				// Stops from the start hooks (OnFitStart, the sanity check,
				// OnTrainStart), once a Fit.
				flags := 0
				for _, op := range fromFirstStep(recs[r].ops) {
					if op == "all-reduce float64[10]" {
						flags++
					}
				}
				if want := map[bool]int{true: 0, false: tc.wantStep}[tc.quiet]; flags != want {
					t.Errorf("rank %d ran %d all-reduces of the stop flags in %d steps, want %d: %v", r, flags, tc.wantStep, want, recs[r].ops)
				}
			}
		})
	}
}

// lyingStopper says it never stops at a step's end, then does at step 3
// on its rank.
type lyingStopper struct{ rank int }

func (l lyingStopper) Name() string         { return "lyingStopper" }
func (l lyingStopper) StopsAtStepEnd() bool { return false }
func (l lyingStopper) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.Rank == l.rank && s.GlobalStep == 3 {
		return trainer.Stop("asked at step 3")
	}
	return nil
}

// TestStopRidesWithTheGradients: with callbacks that never stop at a
// step's end, a Stop from one rank's OnBeforeBackward rides with that
// step's gradients and stops every rank after the same step, with no
// all-reduce of the stop flags; a callback that says it never stops there
// and then does fails Fit with an error saying so, on its rank, and the
// other rank fails too instead of training on alone.
func TestStopRidesWithTheGradients(t *testing.T) {
	const n = 2
	ds, err := strategytest.Regression(8*n*6, 6, 2, 9)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("Stop before backward", func(t *testing.T) {
		var recs [n]*recorder
		trs, errs := fitDDP(t, n, ds, 0, func(r int, g collective.Collective) collective.Collective {
			recs[r] = &recorder{Collective: g}
			return recs[r]
		}, func(r int, _ *ddp.DDP) []trainer.Callback {
			cbs := []trainer.Callback{quietOps{&opsAtBatchEnd{rec: recs[r]}}}
			if r == 1 {
				cbs = append(cbs, &cancelBefore{cancelAt{step: 3, stop: true}})
			}
			return cbs
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
			st := trs[r].Stats()
			want := map[int]string{0: "another rank stopped training", 1: "asked before step 3's backward pass"}[r]
			if st.GlobalStep != 3 || st.StoppedEarly != want {
				t.Errorf("rank %d: step %d, reason %q; want 3, %q", r, st.GlobalStep, st.StoppedEarly, want)
			}
			if i := slices.Index(fromFirstStep(recs[r].ops), "all-reduce float64[10]"); i >= 0 {
				t.Errorf("rank %d ran an all-reduce of the stop flags: %v", r, recs[r].ops)
			}
		}
		if a, b := trs[0].Store().SHA256(), trs[1].Store().SHA256(); a != b {
			t.Errorf("rank 0 ends with weights %s, rank 1 with %s", a, b)
		}
	})
	t.Run("a callback that says it never stops stops", func(t *testing.T) {
		_, errs := fitDDP(t, n, ds, 0, nil, func(r int, _ *ddp.DDP) []trainer.Callback {
			return []trainer.Callback{lyingStopper{rank: 1}}
		})
		if errs[1] == nil || !strings.Contains(errs[1].Error(), "StopsAtStepEnd") || !strings.Contains(errs[1].Error(), "asked at step 3") {
			t.Errorf("rank 1: %v; want an error naming the Stop and StopsAtStepEnd", errs[1])
		}
		if errs[0] == nil {
			t.Errorf("rank 0 finished training alone")
		}
	})
}

// wideMLP is Linear(6→h) with ReLU → Linear(h→2), no buffers: with h
// large its one bucket is past what DDP copies to fold what rides.
type wideMLP struct {
	h      int
	l1, l2 *nn.Linear
}

func (m *wideMLP) Configure(b *module.Builder) error {
	m.l1 = nn.NewLinear(b, "l1", 6, m.h)
	m.l2 = nn.NewLinear(b, "l2", m.h, 2)
	return nil
}

func (m *wideMLP) TrainingStep(s *module.Step) (*G.Node, error) {
	return squaredError(s, m.l2.Forward(s, G.Must(G.Rectify(m.l1.Forward(s, s.Input("x")))))), nil
}

// TestRideBehindALargeBucket: when the last bucket is too large to copy
// (over 1 MiB), the values of a TrainOptions.Ride travel in one all-reduce
// queued right behind it, with rank 0's buffers when the model has any:
// every rank gets the sums, a step runs one collective besides the
// buckets (as the buffers alone did), and the weights are those of the
// same steps without a ride, bit for bit.
func TestRideBehindALargeBucket(t *testing.T) {
	const ranks, steps = 2, 3
	for _, tc := range []struct {
		name    string
		mod     func() module.Module
		stage   string // the all-reduce besides the buckets
		without int    // collectives besides the buckets without a ride
	}{
		{"buffers and values", func() module.Module { return &wideBN{h: 50000} }, "all-reduce float32[100006]", 1},
		{"values alone", func() module.Module { return &wideMLP{h: 50000} }, "all-reduce float32[5]", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ds, err := strategytest.Regression(8*ranks*steps, 6, 2, 9)
			if err != nil {
				t.Fatal(err)
			}
			run := func(withRide bool) ([]strategy.Strategy, []*recorder) {
				strats, recs := recordedRanks(t, ranks, ddp.DDPConfig{})
				t.Cleanup(func() { strategytest.Each(strats, func(_ int, s strategy.Strategy) error { return s.Teardown(ctx) }) })
				err := strategytest.Each(strats, func(r int, s strategy.Strategy) error {
					su, err := strategytest.SetupFor(tc.mod(), ds.Fields(), 1+uint64(r))
					if err != nil {
						return err
					}
					if err := s.Setup(ctx, su); err != nil {
						return err
					}
					rd := &strategy.Ride{Values: make([]float64, 5), Sample: func(v []float64) { v[r] = 1; v[4] = 2 }}
					for k := range steps {
						b, err := strategytest.Rows(ds, k*8*ranks, (k+1)*8*ranks)
						if err != nil {
							return err
						}
						o := strategy.TrainOptions{Sync: true}
						if withRide {
							clear(rd.Values)
							rd.Rode, o.Ride = false, rd
						}
						if _, err := s.Step(ctx, module.Train, strategytest.Shard(b, r, ranks), o); err != nil {
							return err
						}
						if _, err := s.OptimizerStep(ctx, strategy.OptimizerOptions{}); err != nil {
							return err
						}
						if want := []float64{1, 1, 0, 0, 4}; withRide && (!rd.Rode || !slices.Equal(rd.Values, want)) {
							return fmt.Errorf("step %d: Rode %v, values %v, want the sums %v", k, rd.Rode, rd.Values, want)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				return strats, recs
			}
			got, recs := run(true)
			want, wantRecs := run(false)
			if g, w := strategytest.Hashes(got), strategytest.Hashes(want); !slices.Equal(g, w) {
				t.Errorf("weights with the ride %v, without %v", g, w)
			}
			nb := len(got[0].(*ddp.DDP).Buckets())
			for r := range recs {
				ops := recs[r].ops[1:] // after the setup broadcast
				if len(ops) != steps*(nb+1) || slices.Index(ops, tc.stage) < 0 {
					t.Errorf("rank %d ran %v in %d steps of %d buckets, want one %s a step besides them", r, ops, steps, nb, tc.stage)
				}
				if n := len(wantRecs[r].ops) - 1; n != steps*(nb+tc.without) {
					t.Errorf("rank %d ran %d collectives without the ride, want %d", r, n, steps*(nb+tc.without))
				}
			}
		})
	}
}

// fromFirstStep is ops from the first step's first gradient bucket on.
func fromFirstStep(ops []string) []string {
	i := slices.IndexFunc(ops, func(s string) bool { return strings.HasPrefix(s, "all-reduce float32") })
	if i < 0 {
		return nil
	}
	return ops[i:]
}
