package fsdp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// deepMLP is a stack of nn.Linear layers (ReLU between them, named fc0,
// fc1, ...) with a mean squared error loss: with the layer policy, one unit
// per layer.
type deepMLP struct {
	Sizes []int
	Opt   string // "sgd" (momentum) or "adam"
	LR    float64
}

// layers returns the model's layers; Configure and the steps each build
// their own (ranks share the module value and run at once).
func (m *deepMLP) layers(b *module.Builder) []*nn.Linear {
	var out []*nn.Linear
	for i := 0; i+1 < len(m.Sizes); i++ {
		var opts []nn.LinearOption
		if i+2 < len(m.Sizes) {
			opts = append(opts, nn.LinearReLU())
		}
		out = append(out, nn.NewLinear(b, fmt.Sprintf("fc%d", i), m.Sizes[i], m.Sizes[i+1], opts...))
	}
	return out
}

func (m *deepMLP) Configure(b *module.Builder) error {
	m.layers(b)
	return nil
}

func (m *deepMLP) forward(s *module.Step) *G.Node {
	x := s.Input("x")
	for _, l := range m.layers(module.NewBuilder(s.Dtype())) {
		x = l.Forward(s, x)
	}
	return x
}

func (m *deepMLP) loss(s *module.Step) *G.Node {
	n := s.BatchSize() * m.Sizes[len(m.Sizes)-1]
	o := G.Must(G.Reshape(m.forward(s), []int{n}))
	y := G.Must(G.Reshape(s.Input("y"), []int{n}))
	return G.Must(G.Mean(G.Must(G.Square(G.Must(G.Sub(o, y))))))
}

func (m *deepMLP) TrainingStep(s *module.Step) (*G.Node, error) { return m.loss(s), nil }

func (m *deepMLP) ValidationStep(s *module.Step) error {
	s.Log("val_loss", m.loss(s))
	return nil
}

func (m *deepMLP) PredictStep(s *module.Step) (*G.Node, error) { return m.forward(s), nil }

func (m *deepMLP) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	if m.Opt == "adam" {
		o, err := optim.NewAdam(optim.AdamConfig{LR: m.LR})
		return o, nil, err
	}
	o, err := optim.NewSGD(optim.SGDConfig{LR: m.LR, Momentum: 0.9})
	return o, nil, err
}

const seed = 42

func ranks(t testing.TB, n int, cfg fsdp.Config) []strategy.Strategy {
	t.Helper()
	group, err := inproc.NewGroup(n, inproc.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]strategy.Strategy, n)
	for r := range out {
		c := cfg
		c.Group = group[r]
		s, err := fsdp.New(c)
		if err != nil {
			t.Fatal(err)
		}
		out[r] = s
	}
	return out
}

// setup sets every rank up; rank r gets seed+r, so only a strategy that
// starts every rank from rank 0's initial parameters trains as one device.
func setup(t *testing.T, ctx context.Context, strats []strategy.Strategy, m module.Module, ds data.Dataset, dt tensor.Dtype) {
	t.Helper()
	err := strategytest.Each(strats, func(r int, s strategy.Strategy) error {
		su, err := strategytest.SetupForDtype(m, ds.Fields(), seed+uint64(r), dt)
		if err != nil {
			return err
		}
		return s.Setup(ctx, su)
	})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		if err := strategytest.Each(strats, func(_ int, s strategy.Strategy) error { return s.Teardown(context.Background()) }); err != nil {
			t.Errorf("Teardown: %v", err)
		}
	})
}

// fullState is rank 0's SaveState with Full, every rank taking part.
func fullState(t *testing.T, ctx context.Context, strats []strategy.Strategy) *strategy.StateDict {
	t.Helper()
	sds := make([]*strategy.StateDict, len(strats))
	err := strategytest.Each(strats, func(r int, s strategy.Strategy) (err error) {
		sds[r], err = s.SaveState(ctx, strategy.SaveOptions{Full: true})
		return err
	})
	if err != nil {
		t.Fatalf("SaveState: %v", err)
	}
	for _, tn := range sds[0].Tensors {
		if !tn.Whole() {
			t.Fatalf("SaveState with Full: %q holds [%d, %d) of %d elements, want all", tn.Name, tn.Lo, tn.Hi, tn.Size())
		}
	}
	return sds[0]
}

func values(tn *strategy.Tensor) []float64 {
	if tn.Dtype == tensor.Float32 {
		out := make([]float64, len(tn.Data32))
		for i, v := range tn.Data32 {
			out[i] = float64(v)
		}
		return out
	}
	return tn.Data64
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const in, out = 6, 3

// train runs steps optimizer steps of accum micro-batches of the global
// batch B on strats (each rank its shard of every batch).
func train(t *testing.T, ctx context.Context, strats []strategy.Strategy, ds data.Dataset, B, steps, accum int, so strategy.OptimizerOptions) {
	t.Helper()
	for k := 0; k < steps; k++ {
		micro := make([]*data.Batch, accum)
		for i := range micro {
			lo := (k*accum + i) * B
			var err error
			if micro[i], err = strategytest.Rows(ds, lo, lo+B); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := strategytest.Step(ctx, strats, so, micro...); err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
	}
}

// FSDP trains as one device does with the global batch (within the
// suite's float32 and float64 tolerances), whatever the number of ranks,
// the wrapping policy, resharding after forward, prefetching, the
// optimizer, clipping or accumulation.
func TestFSDPTrainsAsOneDevice(t *testing.T) {
	type tc struct {
		name  string
		n     int
		cfg   fsdp.Config
		opt   string
		so    strategy.OptimizerOptions
		accum int
	}
	var cases []tc
	for _, n := range []int{1, 2, 3} {
		cases = append(cases,
			tc{"layer/sgd", n, fsdp.Config{}, "sgd", strategy.OptimizerOptions{}, 1},
			tc{"layer/adam", n, fsdp.Config{}, "adam", strategy.OptimizerOptions{}, 1},
			tc{"size/adam", n, fsdp.Config{Wrap: fsdp.WrapSize, MinUnitParams: 50}, "adam", strategy.OptimizerOptions{}, 1},
			tc{"keep-after-forward/adam", n, fsdp.Config{KeepAfterForward: true}, "adam", strategy.OptimizerOptions{}, 1},
			tc{"no-prefetch/sgd", n, fsdp.Config{NoPrefetch: true}, "sgd", strategy.OptimizerOptions{}, 1},
			tc{"clip-norm/adam", n, fsdp.Config{}, "adam", strategy.OptimizerOptions{ClipNorm: 0.05}, 1},
			tc{"clip-value/sgd", n, fsdp.Config{}, "sgd", strategy.OptimizerOptions{ClipValue: 0.01}, 1},
			tc{"accumulate/sgd", n, fsdp.Config{}, "sgd", strategy.OptimizerOptions{}, 2},
		)
	}
	for _, c := range cases {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			t.Run(fmt.Sprintf("n=%d/%s/%v", c.n, c.name, dt), func(t *testing.T) {
				ctx := ctxFor(t)
				const steps = 4
				B := 2 * c.n
				ds, err := strategytest.Regression(steps*B*c.accum, in, out, 3)
				if err != nil {
					t.Fatal(err)
				}
				m := &deepMLP{Sizes: []int{in, 9, 7, 5, out}, Opt: c.opt, LR: 0.02}
				strats := ranks(t, c.n, c.cfg)
				setup(t, ctx, strats, m, ds, dt)
				ref := []strategy.Strategy{single.NewSingle()}
				setup(t, ctx, ref, m, ds, dt)
				train(t, ctx, strats, ds, B, steps, c.accum, c.so)
				train(t, ctx, ref, ds, B, steps, c.accum, c.so)
				got := fullState(t, ctx, strats)
				want := strategytest.StoreOf(ref[0])
				abs, rel := strategytest.AbsTol, strategytest.RelTol
				if dt == tensor.Float64 {
					abs, rel = strategytest.AbsTol64, strategytest.RelTol64
				}
				worst := 0.0
				for _, e := range want.Entries() {
					tn := got.Lookup(e.Name)
					if tn == nil {
						t.Fatalf("the saved state has no %q", e.Name)
					}
					wt, _ := want.Tensor(e.Name)
					w := values(&strategy.Tensor{Dtype: dt, Data32: f32s(wt), Data64: f64s(wt)})
					g := values(tn)
					for i := range w {
						d := math.Abs(g[i] - w[i])
						worst = math.Max(worst, d)
						if !(d <= abs+rel*math.Abs(w[i])) {
							t.Fatalf("%s[%d] is %g after %d steps, one device gives %g (beyond %g + %g·|want|)", e.Name, i, g[i], steps, w[i], abs, rel)
						}
					}
				}
				t.Logf("largest difference from one device: %.3g", worst)
			})
		}
	}
}

func f32s(t *tensor.Dense) []float32 {
	if t.Dtype() == tensor.Float32 {
		return t.Float32s()
	}
	return nil
}

func f64s(t *tensor.Dense) []float64 {
	if t.Dtype() == tensor.Float64 {
		return t.Float64s()
	}
	return nil
}

// Two runs of the same job end with the same parameters and optimizer
// state, bit for bit.
func TestFSDPBitIdenticalAcrossRuns(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			var runs []*strategy.StateDict
			for range 2 {
				ctx := ctxFor(t)
				ds, _ := strategytest.Regression(5*2*n, in, out, 4)
				strats := ranks(t, n, fsdp.Config{Wrap: fsdp.WrapSize, MinUnitParams: 40})
				setup(t, ctx, strats, &deepMLP{Sizes: []int{in, 17, 11, out}, Opt: "adam", LR: 0.01}, ds, tensor.Float32)
				train(t, ctx, strats, ds, 2*n, 5, 1, strategy.OptimizerOptions{ClipNorm: 1})
				runs = append(runs, fullState(t, ctx, strats))
			}
			if len(runs[0].Tensors) != len(runs[1].Tensors) {
				t.Fatalf("runs saved %d and %d tensors", len(runs[0].Tensors), len(runs[1].Tensors))
			}
			for i, a := range runs[0].Tensors {
				b := runs[1].Tensors[i]
				if a.Name != b.Name || !slices.Equal(a.Data32, b.Data32) || !slices.Equal(a.Data64, b.Data64) {
					t.Errorf("tensor %q differs between two runs of the same job", a.Name)
				}
			}
		})
	}
}

// A job saved by 2 ranks, each writing only its shards, loads at 1, 3 and
// 2 ranks: saved whole again it holds the same tensors bit for bit, and
// the next step trains as the saving job's next step does.
func TestFSDPStateReshards(t *testing.T) {
	ctx := ctxFor(t)
	const B = 6
	ds, _ := strategytest.Regression(3*B, in, out, 7)
	m := &deepMLP{Sizes: []int{in, 13, 5, out}, Opt: "adam", LR: 0.02}
	saver := ranks(t, 2, fsdp.Config{})
	setup(t, ctx, saver, m, ds, tensor.Float32)
	train(t, ctx, saver, ds, B, 2, 1, strategy.OptimizerOptions{})
	// Each rank's shards, merged as a sharded checkpoint's files would be.
	merged := &strategy.StateDict{}
	sds := make([]*strategy.StateDict, 2)
	if err := strategytest.Each(saver, func(r int, s strategy.Strategy) (err error) {
		sds[r], err = s.SaveState(ctx, strategy.SaveOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for r, sd := range sds {
		partial := 0
		for _, tn := range sd.Tensors {
			if !tn.Whole() {
				partial++
			}
		}
		if partial == 0 {
			t.Errorf("rank %d saved every tensor whole without Full: it should save its shards only", r)
		}
		merged.Tensors = append(merged.Tensors, sd.Tensors...)
	}
	merged.Blobs = sds[0].Blobs
	want := fullState(t, ctx, saver)
	third, _ := strategytest.Rows(ds, 2*B, 3*B)
	if _, _, err := strategytest.Step(ctx, saver, strategy.OptimizerOptions{}, third); err != nil {
		t.Fatal(err)
	}
	after := fullState(t, ctx, saver)

	for _, n := range []int{1, 3, 2} {
		t.Run(fmt.Sprintf("load at %d", n), func(t *testing.T) {
			ctx := ctxFor(t)
			strats := ranks(t, n, fsdp.Config{Wrap: fsdp.WrapSize, MinUnitParams: 30})
			setup(t, ctx, strats, m, ds, tensor.Float32)
			if err := strategytest.Each(strats, func(_ int, s strategy.Strategy) error { return s.LoadState(ctx, merged) }); err != nil {
				t.Fatalf("LoadState: %v", err)
			}
			got := fullState(t, ctx, strats)
			for _, w := range want.Tensors {
				g := got.Lookup(w.Name)
				if g == nil || !slices.Equal(g.Data32, w.Data32) || !slices.Equal(g.Data64, w.Data64) {
					t.Errorf("%q loaded at %d ranks and saved again differs from the 2-rank job's", w.Name, n)
				}
			}
			if _, _, err := strategytest.Step(ctx, strats, strategy.OptimizerOptions{}, third); err != nil {
				t.Fatal(err)
			}
			next := fullState(t, ctx, strats)
			for _, w := range after.Tensors {
				g, wv := values(next.Lookup(w.Name)), values(&w)
				for i := range wv {
					if d := math.Abs(g[i] - wv[i]); !(d <= strategytest.AbsTol+strategytest.RelTol*math.Abs(wv[i])) {
						t.Fatalf("%s[%d] after one more step at %d ranks: %g, the 2-rank job has %g", w.Name, i, n, g[i], wv[i])
					}
				}
			}
		})
	}
}

// LoadState refuses a dict that does not fit, naming the tensor, and
// changes nothing: the job's state saved after the refusal is the one
// saved before it.
func TestFSDPLoadStateRefusesBadDicts(t *testing.T) {
	ctx := ctxFor(t)
	ds, _ := strategytest.Regression(8, in, out, 2)
	m := &deepMLP{Sizes: []int{in, 5, out}, Opt: "adam", LR: 0.02}
	strats := ranks(t, 2, fsdp.Config{})
	setup(t, ctx, strats, m, ds, tensor.Float32)
	train(t, ctx, strats, ds, 4, 1, 1, strategy.OptimizerOptions{})
	before := fullState(t, ctx, strats)
	shards := make([]*strategy.StateDict, 2)
	if err := strategytest.Each(strats, func(r int, s strategy.Strategy) (err error) {
		shards[r], err = s.SaveState(ctx, strategy.SaveOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Both ranks' shards but rank 1's part of fc0.weight.
	holed := &strategy.StateDict{Blobs: shards[0].Blobs, Tensors: slices.Clone(shards[0].Tensors)}
	for _, tn := range shards[1].Tensors {
		if tn.Name != "fc0.weight" {
			holed.Tensors = append(holed.Tensors, tn)
		}
	}
	reshaped := fullState(t, ctx, strats)
	for i := range reshaped.Tensors {
		if reshaped.Tensors[i].Name == "fc1.weight" {
			reshaped.Tensors[i].Shape = []int{out * 5}
		}
	}
	for _, tc := range []struct {
		name string
		sd   *strategy.StateDict
		want string
	}{
		{"one rank's shards only", shards[0], "of the model are missing from the checkpoint"},
		{"a shard left out", holed, `tensor "fc0.weight": the saved spans do not cover`},
		{"another shape", reshaped, `"fc1.weight" has shape [15]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := strategytest.Each(strats, func(_ int, s strategy.Strategy) error { return s.LoadState(ctx, tc.sd) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadState: %v, want an error saying %q", err, tc.want)
			}
			after := fullState(t, ctx, strats)
			for i, a := range after.Tensors {
				if !slices.Equal(a.Data32, before.Tensors[i].Data32) || !slices.Equal(a.Data64, before.Tensors[i].Data64) {
					t.Errorf("%q changed although LoadState failed", a.Name)
				}
			}
		})
	}
}

// Validation metrics reduced across ranks equal one device's over the same
// rows, and predict returns each rank's outputs.
func TestFSDPEvalAndPredict(t *testing.T) {
	ctx := ctxFor(t)
	const n, B = 2, 8
	ds, _ := strategytest.Regression(B, in, out, 5)
	m := &deepMLP{Sizes: []int{in, 7, out}, Opt: "adam", LR: 0.01}
	strats := ranks(t, n, fsdp.Config{})
	setup(t, ctx, strats, m, ds, tensor.Float32)
	ref := []strategy.Strategy{single.NewSingle()}
	setup(t, ctx, ref, m, ds, tensor.Float32)
	b, _ := strategytest.Rows(ds, 0, B)
	sums, weights := make([][]float64, n), make([][]float64, n)
	outs := make([]int, n)
	err := strategytest.Each(strats, func(r int, s strategy.Strategy) error {
		res, err := s.Step(ctx, module.Validate, strategytest.Shard(b, r, n), strategy.TrainOptions{})
		if err != nil {
			return err
		}
		ms := res.Metrics
		sums[r], weights[r] = []float64{ms[0].Value * ms[0].Weight}, []float64{ms[0].Weight}
		if err := s.Reduce(ctx, sums[r], weights[r], []module.Reduce{module.Mean}); err != nil {
			return err
		}
		p, err := s.Step(ctx, module.Predict, strategytest.Shard(b, r, n), strategy.TrainOptions{})
		if err != nil {
			return err
		}
		outs[r] = p.Output.Shape().TotalSize()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rr, err := ref[0].Step(ctx, module.Validate, b, strategy.TrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := rr.Metrics[0].Value
	for r := range strats {
		if got := sums[r][0] / weights[r][0]; math.Abs(got-want) > 1e-6+1e-5*math.Abs(want) {
			t.Errorf("rank %d: val_loss %g, one device gives %g", r, got, want)
		}
		if outs[r] != B/n*out {
			t.Errorf("rank %d: predict gave %d values, want %d", r, outs[r], B/n*out)
		}
	}
}

// A rank that dies mid-training is an error on every rank, within the
// group's timeout, not a hang.
func TestFSDPDeadPeerFailsEveryRank(t *testing.T) {
	ctx := ctxFor(t)
	group, err := inproc.NewGroup(2, inproc.Timeout(5*time.Second), inproc.KillRank(1, 12))
	if err != nil {
		t.Fatal(err)
	}
	strats := make([]strategy.Strategy, 2)
	for r := range strats {
		if strats[r], err = fsdp.New(fsdp.Config{Group: group[r], Timeout: 5 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	ds, _ := strategytest.Regression(40, in, out, 6)
	setup(t, ctx, strats, &deepMLP{Sizes: []int{in, 7, 5, out}, LR: 0.01}, ds, tensor.Float32)
	errs := make([]error, 2)
	strategytest.Each(strats, func(r int, s strategy.Strategy) error {
		for k := 0; k < 10 && errs[r] == nil; k++ {
			b, _ := strategytest.Rows(ds, 4*k, 4*k+4)
			if _, err := s.Step(ctx, module.Train, strategytest.Shard(b, r, 2), strategy.TrainOptions{Sync: true, Scale: 1}); err != nil {
				errs[r] = err
				break
			}
			_, errs[r] = s.OptimizerStep(ctx, strategy.OptimizerOptions{})
		}
		return nil
	})
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		if err == nil {
			t.Errorf("rank %d trained 10 steps with a dead peer", r)
		} else if !strings.Contains(err.Error(), fmt.Sprintf("rank %d", r)) {
			t.Errorf("rank %d: %v: the error should name the rank", r, err)
		}
	}
}

// counting wraps a rank's collective and counts its all-gathers and
// reduce-scatters, the communication the options change.
type counting struct {
	collective.Collective
	gathers, scatters int
}

func (c *counting) AllGather(ctx context.Context, send, recv any) error {
	c.gathers++
	return c.Collective.AllGather(ctx, send, recv)
}

func (c *counting) ReduceScatter(ctx context.Context, send, recv any, op collective.Op) error {
	c.scatters++
	return c.Collective.ReduceScatter(ctx, send, recv, op)
}

// countingRanks is n in-process ranks of cfg, each counting its
// collectives.
func countingRanks(t *testing.T, n int, cfg fsdp.Config) ([]*counting, []strategy.Strategy) {
	t.Helper()
	group, err := inproc.NewGroup(n, inproc.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]*counting, n)
	strats := make([]strategy.Strategy, n)
	for r := range strats {
		counts[r] = &counting{Collective: group[r]}
		c := cfg
		c.Group = counts[r]
		if strats[r], err = fsdp.New(c); err != nil {
			t.Fatal(err)
		}
	}
	return counts, strats
}

// A 3-layer mlp (fc0 fed from the batch, so its backward needs no weight)
// gathers fc0, fc1 and fc2 for forward and, resharded after forward, fc1
// again for backward (fc2's backward follows its forward with nothing in
// between): 4 gathers a step, 3 with KeepAfterForward; every unit's
// gradient is reduce-scattered once. The wrapping policy sets the units:
// by size, fc0 and fc1 (6·7+7 + 7·5+5 = 89 ≥ 60) make one unit.
func TestFSDPGathersPerStep(t *testing.T) {
	for _, tc := range []struct {
		name              string
		cfg               fsdp.Config
		gathers, scatters int
	}{
		{"layer", fsdp.Config{}, 4, 3},
		{"layer/keep-after-forward", fsdp.Config{KeepAfterForward: true}, 3, 3},
		{"layer/no-prefetch", fsdp.Config{NoPrefetch: true}, 4, 3},
		{"size", fsdp.Config{Wrap: fsdp.WrapSize, MinUnitParams: 60}, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			counts, strats := countingRanks(t, 2, tc.cfg)
			ds, _ := strategytest.Regression(12, in, out, 6)
			setup(t, ctx, strats, &deepMLP{Sizes: []int{in, 7, 5, out}, LR: 0.01}, ds, tensor.Float32)
			for k := 0; k < 3; k++ {
				g0, s0 := counts[0].gathers, counts[0].scatters
				b, _ := strategytest.Rows(ds, 4*k, 4*k+4)
				if _, _, err := strategytest.Step(ctx, strats, strategy.OptimizerOptions{}, b); err != nil {
					t.Fatal(err)
				}
				if g, s := counts[0].gathers-g0, counts[0].scatters-s0; g != tc.gathers || s != tc.scatters {
					t.Errorf("step %d: %d all-gathers and %d reduce-scatters, want %d and %d", k, g, s, tc.gathers, tc.scatters)
				}
			}
		})
	}
}

// Bad settings are refused together, each naming the setting, the value
// and what to use instead.
func TestFSDPRefusesBadConfig(t *testing.T) {
	g, _ := inproc.NewGroup(1)
	_, err := fsdp.New(fsdp.Config{Group: g[0], Wrap: fsdp.Wrap(7), MinUnitParams: -1, Timeout: -time.Second})
	for _, want := range []string{"Wrap is Wrap(7): use WrapLayer or WrapSize", "MinUnitParams is -1", "Timeout is -1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New: %v, want it to say %q", err, want)
		}
	}
	// Without a group, the rest is reported too, not only the group.
	_, err = fsdp.New(fsdp.Config{Wrap: fsdp.Wrap(7), MinUnitParams: -1, Timeout: -time.Second, Sharding: fsdp.HybridShard, NodeSize: -2})
	for _, want := range []string{"Group is nil: pass this rank's collective", "Wrap is Wrap(7)", "MinUnitParams is -1", "Timeout is -1s", "NodeSize is -2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New without a group and with bad settings: %v, want it to say %q", err, want)
		}
	}
	g2, _ := inproc.NewGroup(2)
	_, err = fsdp.New(fsdp.Config{ShardGroup: g2[0], ReplicaGroup: g2[1], Timeout: -time.Second})
	for _, want := range []string{"Group is nil", "hybrid sharding", "Timeout is -1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New with ShardGroup and ReplicaGroup but no Group: %v, want it to say %q", err, want)
		}
	}
	if err != nil && strings.Count(err.Error(), "Group is nil") != 1 {
		t.Errorf("New with ShardGroup and ReplicaGroup but no Group says Group is nil more than once: %v", err)
	}
	env := map[string]string{fsdp.EnvWrap: "blocks", fsdp.EnvMinUnitParams: "many", fsdp.EnvReshardAfterForward: "yes", fsdp.EnvPrefetch: "2", fsdp.EnvSyncMicroBatches: "always", fsdp.EnvCPUOffload: "yes"}
	_, err = strategy.New("fsdp", strategy.Options{Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	for _, want := range []string{`FULGUR_FSDP_WRAP="blocks"`, `FULGUR_FSDP_MIN_UNIT_PARAMS="many"`, `FULGUR_FSDP_RESHARD_AFTER_FORWARD="yes": use 1 or 0`, `FULGUR_FSDP_PREFETCH="2"`, `FULGUR_FSDP_SYNC_MICROBATCHES="always": use 1 or 0`, `FULGUR_FSDP_CPU_OFFLOAD="yes"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("strategy.New(\"fsdp\") with bad variables: %v, want it to say %q", err, want)
		}
	}
	s, err := strategy.New("fsdp", strategy.Options{Lookup: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatalf("strategy.New(\"fsdp\"): %v", err)
	}
	if i := s.Info(); i.Name != "fsdp" || i.WorldSize != 1 {
		t.Errorf("strategy.New(\"fsdp\") on one device: %+v", i)
	}
	s.Teardown(context.Background())
}

// With a profiler, each rank records its waits for every gather and
// reduce-scatter, one span each (the spans of the operations themselves
// end on goroutines of their own, so their counts are not checked here).
func TestFSDPProfilesItsCommunication(t *testing.T) {
	ctx := ctxFor(t)
	strats := ranks(t, 2, fsdp.Config{})
	profs := []*profiler.Simple{profiler.NewSimple(), profiler.NewSimple()}
	ds, _ := strategytest.Regression(8, in, out, 6)
	m := &deepMLP{Sizes: []int{in, 7, 5, out}, LR: 0.01}
	err := strategytest.Each(strats, func(r int, s strategy.Strategy) error {
		su, err := strategytest.SetupForDtype(m, ds.Fields(), seed, tensor.Float32)
		if err != nil {
			return err
		}
		su.Profiler = profs[r]
		return s.Setup(ctx, su)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		strategytest.Each(strats, func(_ int, s strategy.Strategy) error { return s.Teardown(context.Background()) })
	})
	for k := 0; k < 2; k++ {
		b, _ := strategytest.Rows(ds, 4*k, 4*k+4)
		if _, _, err := strategytest.Step(ctx, strats, strategy.OptimizerOptions{}, b); err != nil {
			t.Fatal(err)
		}
	}
	// Two steps of the 3-layer mlp: 4 gathers and 3 reduce-scatters each.
	want := map[string]int{"wait all-gather": 8, "wait reduce-scatter": 6}
	for r, p := range profs {
		got := map[string]int{}
		for _, row := range p.Rows() {
			got[row.Action] = row.Calls
		}
		for a, n := range want {
			if got[a] != n {
				t.Errorf("rank %d: %d spans %q, want %d (all: %v)", r, got[a], a, n, got)
			}
		}
	}
}

// convNet: conv, BatchNorm (with running statistics, buffers), ReLU,
// conv, flatten, linear; fed [3·6·6] rows reshaped to images.
type convNet struct{}

func (convNet) layers(b *module.Builder) (*nn.Conv2d, *nn.BatchNorm, *nn.Conv2d, *nn.Linear) {
	return nn.NewConv2d(b, "conv1", nn.Conv2dConfig{In: 3, Out: 4, Kernel: 3, Padding: 1, NoBias: true}),
		nn.NewBatchNorm2d(b, "bn1", 4),
		nn.NewConv2d(b, "conv2", nn.Conv2dConfig{In: 4, Out: 2, Kernel: 3}),
		nn.NewLinear(b, "fc", 2*4*4, out)
}

func (m convNet) Configure(b *module.Builder) error { m.layers(b); return nil }

func (m convNet) TrainingStep(s *module.Step) (*G.Node, error) {
	c1, bn, c2, fc := m.layers(module.NewBuilder(s.Dtype()))
	x := G.Must(G.Reshape(s.Input("x"), []int{s.BatchSize(), 3, 6, 6}))
	h := bn.ForwardReLU(s, c1.Forward(s, x))
	h = c2.Forward(s, h)
	h = G.Must(G.Reshape(h, []int{s.BatchSize(), 2 * 4 * 4}))
	o := G.Must(G.Reshape(fc.Forward(s, h), []int{s.BatchSize() * out}))
	y := G.Must(G.Reshape(s.Input("y"), []int{s.BatchSize() * out}))
	return G.Must(G.Mean(G.Must(G.Square(G.Must(G.Sub(o, y)))))), nil
}

func (convNet) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewAdam(optim.AdamConfig{LR: 0.01})
	return o, nil, err
}

// A conv net with BatchNorm trains under fsdp (units per layer, the
// BatchNorm's running statistics broadcast from rank 0 after each step)
// exactly as under ddp with the same ranks, within float32 tolerance.
func TestFSDPConvNetMatchesDDP(t *testing.T) {
	ctx := ctxFor(t)
	const n, B = 2, 8
	ds, _ := strategytest.Regression(4*B, 3*6*6, out, 11)
	run := func(strats []strategy.Strategy) *strategy.StateDict {
		setup(t, ctx, strats, convNet{}, ds, tensor.Float32)
		train(t, ctx, strats, ds, B, 4, 1, strategy.OptimizerOptions{})
		return fullState(t, ctx, strats)
	}
	got := run(ranks(t, n, fsdp.Config{}))
	group, _ := inproc.NewGroup(n, inproc.Timeout(20*time.Second))
	ref := make([]strategy.Strategy, n)
	for r := range ref {
		d, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
		if err != nil {
			t.Fatal(err)
		}
		ref[r] = d
	}
	want := run(ref)
	for _, w := range want.Tensors {
		if strings.HasPrefix(w.Name, strategy.OptimizerPrefix) {
			continue
		}
		g := got.Lookup(w.Name)
		if g == nil {
			t.Fatalf("fsdp saved no %q", w.Name)
		}
		gv, wv := values(g), values(&w)
		for i := range wv {
			if d := math.Abs(gv[i] - wv[i]); !(d <= 2e-6+2e-5*math.Abs(wv[i])) {
				t.Fatalf("%s[%d] after 4 steps: fsdp %g, ddp %g", w.Name, i, gv[i], wv[i])
			}
		}
	}
}

// HYBRID_SHARD: 4 ranks, sharded in pairs ({0, 1} and {2, 3}) and
// replicated across them ({0, 2} and {1, 3}), train as one device does
// with the global batch; every rank holds the shard of its pair.
func TestFSDPHybridShardTrainsAsOneDevice(t *testing.T) {
	ctx := ctxFor(t)
	const n, B = 4, 8
	strats := hybridRanks(t)
	ds, _ := strategytest.Regression(4*B, in, out, 12)
	m := &deepMLP{Sizes: []int{in, 9, 7, out}, Opt: "adam", LR: 0.02}
	setup(t, ctx, strats, m, ds, tensor.Float32)
	ref := []strategy.Strategy{single.NewSingle()}
	setup(t, ctx, ref, m, ds, tensor.Float32)
	so := strategy.OptimizerOptions{ClipNorm: 0.5}
	train(t, ctx, strats, ds, B, 4, 1, so)
	train(t, ctx, ref, ds, B, 4, 1, so)
	sds := make([]*strategy.StateDict, n)
	if err := strategytest.Each(strats, func(r int, s strategy.Strategy) (err error) {
		sds[r], err = s.SaveState(ctx, strategy.SaveOptions{Full: true})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want := strategytest.StoreOf(ref[0])
	for r, sd := range sds {
		for _, e := range want.Entries() {
			wt, _ := want.Tensor(e.Name)
			w, g := values(&strategy.Tensor{Dtype: tensor.Float32, Data32: wt.Float32s()}), values(sd.Lookup(e.Name))
			for i := range w {
				if d := math.Abs(g[i] - w[i]); !(d <= strategytest.AbsTol+strategytest.RelTol*math.Abs(w[i])) {
					t.Fatalf("rank %d: %s[%d] is %g after 4 steps, one device gives %g", r, e.Name, i, g[i], w[i])
				}
			}
		}
	}
	// Each rank's own shards cover half of the model (its pair's share).
	sd, err := func() (*strategy.StateDict, error) {
		out := make([]*strategy.StateDict, n)
		err := strategytest.Each(strats, func(r int, s strategy.Strategy) (err error) {
			out[r], err = s.SaveState(ctx, strategy.SaveOptions{})
			return err
		})
		return out[0], err
	}()
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, tn := range sd.Tensors {
		if !strings.HasPrefix(tn.Name, strategy.OptimizerPrefix) && tn.Name != "" {
			held += tn.Hi - tn.Lo
		}
	}
	np := 0
	for _, e := range want.Entries() {
		np += e.Len
	}
	if held*2 < np-4 || held*2 > np+4 {
		t.Errorf("rank 0 holds %d of the %d parameters, want about half (sharded across its pair)", held, np)
	}
}

// hybridRanks is 4 in-process ranks of HYBRID_SHARD: sharded in pairs
// ({0, 1} and {2, 3}) and replicated across them ({0, 2} and {1, 3}).
func hybridRanks(t *testing.T) []strategy.Strategy {
	t.Helper()
	group, _ := inproc.NewGroup(4, inproc.Timeout(20*time.Second))
	var shardG, replicaG [2][]collective.Collective
	for i := range 2 {
		shardG[i], _ = inproc.NewGroup(2, inproc.Timeout(20*time.Second))
		replicaG[i], _ = inproc.NewGroup(2, inproc.Timeout(20*time.Second))
	}
	strats := make([]strategy.Strategy, 4)
	for r := range strats {
		var err error
		strats[r], err = fsdp.New(fsdp.Config{Group: group[r], ShardGroup: shardG[r/2][r%2], ReplicaGroup: replicaG[r%2][r/2]})
		if err != nil {
			t.Fatal(err)
		}
	}
	return strats
}

// Hybrid sharding with groups that do not multiply to the job is refused.
func TestFSDPHybridShardRefusesMismatchedGroups(t *testing.T) {
	group, _ := inproc.NewGroup(4)
	s3, _ := inproc.NewGroup(3)
	r2, _ := inproc.NewGroup(2)
	_, err := fsdp.New(fsdp.Config{Group: group[0], ShardGroup: s3[0], ReplicaGroup: r2[0]})
	if err == nil || !strings.Contains(err.Error(), "ShardGroup has 3 ranks and ReplicaGroup 2, but Group has 4") {
		t.Errorf("New: %v", err)
	}
	_, err = fsdp.New(fsdp.Config{Group: group[0], ShardGroup: s3[0]})
	if err == nil || !strings.Contains(err.Error(), "only one of ShardGroup and ReplicaGroup is set") {
		t.Errorf("New: %v", err)
	}
}

// Memory before Setup reports nothing held, as sharded's does, not a nil
// dereference.
func TestMemoryBeforeSetupIsZero(t *testing.T) {
	g, err := inproc.NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fsdp.New(fsdp.Config{Group: g[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Teardown(t.Context())
	if m := f.Memory(); m != (strategy.Memory{}) {
		t.Errorf("Memory before Setup = %+v, want zero", m)
	}
}

// A Setup that fails at the optimizer leaves Memory reporting nothing held,
// not a nil dereference.
func TestMemoryAfterAFailedSetupIsZero(t *testing.T) {
	g, err := inproc.NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fsdp.New(fsdp.Config{Group: g[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Teardown(t.Context())
	setup, err := strategytest.SetupFor(&strategytest.MLP{In: 2, Hidden: 3, Out: 1},
		[]data.Field{{Name: "x", Shape: []int{2}}, {Name: "y", Shape: []int{1}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	bad := errors.New("no optimizer today")
	setup.NewOptimizer = func() (optim.Optimizer, optim.Scheduler, error) { return nil, nil, bad }
	if err := f.Setup(t.Context(), setup); !errors.Is(err, bad) {
		t.Fatalf("Setup = %v, want the optimizer's error", err)
	}
	if mem := f.Memory(); mem != (strategy.Memory{}) {
		t.Errorf("Memory after a failed Setup = %+v, want zero", mem)
	}
}
