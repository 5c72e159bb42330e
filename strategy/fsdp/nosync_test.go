package fsdp_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// Gradient accumulation over 3 micro-batches on 2 ranks, counted per
// micro-batch: by default (PyTorch's no_sync) the two micro-batches
// without Sync gather as usual but reduce-scatter nothing, and the last one
// reduce-scatters each of the 3 units once; the window's gradient of the
// whole model is held on each rank meanwhile (Memory's LocalGrads: the
// model's 4·(6·7+7 + 7·5+5 + 5·3+3) bytes beside the shard), and the last
// one reduce-scatters into the shard in place (before, through a second
// gradient shard that nothing had reduce-scattered into before it). With
// SyncMicroBatches every micro-batch reduce-scatters every unit and no
// whole gradient is held: the micro-batches after the first land in a
// second shard and are added.
func TestFSDPMicroBatchesWithoutSyncDoNotCommunicate(t *testing.T) {
	const params = 6*7 + 7 + 7*5 + 5 + 5*3 + 3
	for _, tc := range []struct {
		name     string
		cfg      fsdp.Config
		scatters []int // per micro-batch
		held     int   // bytes of the whole gradient held, beyond the shard
		shards   int   // gradient shards beyond the first
	}{
		{"no-sync", fsdp.Config{}, []int{0, 0, 3}, 4 * params, 0},
		{"sync-micro-batches", fsdp.Config{SyncMicroBatches: true}, []int{3, 3, 3}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			counts, strats := countingRanks(t, 2, tc.cfg)
			ds, _ := strategytest.Regression(24, in, out, 6)
			setup(t, ctx, strats, &deepMLP{Sizes: []int{in, 7, 5, out}, LR: 0.01}, ds, tensor.Float32)
			shardGrads := strats[0].(strategy.MemoryReporter).Memory().LocalGrads
			for k := 0; k < 2; k++ {
				for i, want := range tc.scatters {
					g0, s0 := counts[0].gathers, counts[0].scatters
					b, _ := strategytest.Rows(ds, 12*k+4*i, 12*k+4*i+4)
					last := i == len(tc.scatters)-1
					if err := strategytest.Each(strats, func(r int, s strategy.Strategy) error {
						_, err := s.Step(ctx, module.Train, strategytest.Shard(b, r, 2), strategy.TrainOptions{Sync: last, Accumulate: i > 0, Scale: 1.0 / 3})
						return err
					}); err != nil {
						t.Fatal(err)
					}
					if g, s := counts[0].gathers-g0, counts[0].scatters-s0; g != 4 || s != want {
						t.Errorf("step %d, micro-batch %d (Sync %v): %d all-gathers and %d reduce-scatters, want 4 and %d", k, i, last, g, s, want)
					}
				}
				if err := strategytest.Each(strats, func(_ int, s strategy.Strategy) error {
					_, err := s.OptimizerStep(ctx, strategy.OptimizerOptions{})
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := strats[0].(strategy.MemoryReporter).Memory().LocalGrads-shardGrads, tc.held+tc.shards*shardGrads; got != want {
				t.Errorf("LocalGrads grew by %d bytes after accumulating, want %d (the held gradient, %d, and %d more shards of %d)", got, want, tc.held, tc.shards, shardGrads)
			}
		})
	}
}

// Accumulating without communication trains as reduce-scattering every
// micro-batch does (within float32 rounding) and as one device does with
// the window's batches (the suite's tolerances), on 2 and 3 ranks, with
// either wrapping policy, in float32 and float64.
func TestFSDPNoSyncTrainsAsSyncMicroBatches(t *testing.T) {
	for _, n := range []int{2, 3} {
		for _, wrap := range []fsdp.Config{{}, {Wrap: fsdp.WrapSize, MinUnitParams: 60}} {
			for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
				t.Run(strings.Join([]string{string(rune('0' + n)), wrap.Wrap.String(), dt.String()}, "/"), func(t *testing.T) {
					ctx := ctxFor(t)
					const steps, accum = 3, 4
					B := 2 * n
					ds, err := strategytest.Regression(steps*accum*B, in, out, 7)
					if err != nil {
						t.Fatal(err)
					}
					m := &deepMLP{Sizes: []int{in, 9, 7, 5, out}, Opt: "adam", LR: 0.02}
					so := strategy.OptimizerOptions{ClipNorm: 0.5}
					noSync := ranks(t, n, wrap)
					eager := wrap
					eager.SyncMicroBatches = true
					every := ranks(t, n, eager)
					ref := []strategy.Strategy{single.NewSingle()}
					for _, s := range [][]strategy.Strategy{noSync, every, ref} {
						setup(t, ctx, s, m, ds, dt)
						train(t, ctx, s, ds, B, steps, accum, so)
					}
					a, b := fullState(t, ctx, noSync), fullState(t, ctx, every)
					want := strategytest.StoreOf(ref[0])
					abs, rel := strategytest.AbsTol, strategytest.RelTol
					if dt == tensor.Float64 {
						abs, rel = strategytest.AbsTol64, strategytest.RelTol64
					}
					for _, e := range want.Entries() {
						wt, _ := want.Tensor(e.Name)
						w := values(&strategy.Tensor{Dtype: dt, Data32: f32s(wt), Data64: f64s(wt)})
						g, h := values(a.Lookup(e.Name)), values(b.Lookup(e.Name))
						for i := range w {
							if d := math.Abs(g[i] - h[i]); !(d <= abs+rel*math.Abs(h[i])) {
								t.Fatalf("%s[%d]: %g accumulated without communication, %g reduce-scattering every micro-batch", e.Name, i, g[i], h[i])
							}
							if d := math.Abs(g[i] - w[i]); !(d <= abs+rel*math.Abs(w[i])) {
								t.Fatalf("%s[%d]: %g accumulated without communication, %g on one device", e.Name, i, g[i], w[i])
							}
						}
					}
				})
			}
		}
	}
}

// An optimizer step while a micro-batch's gradients are held unreduced is
// refused, saying which Step is missing; the window's last micro-batch
// then makes it work.
func TestFSDPOptimizerStepRefusesHeldGradients(t *testing.T) {
	ctx := ctxFor(t)
	strats := ranks(t, 2, fsdp.Config{})
	ds, _ := strategytest.Regression(8, in, out, 6)
	setup(t, ctx, strats, &deepMLP{Sizes: []int{in, 7, out}, LR: 0.01}, ds, tensor.Float32)
	b, _ := strategytest.Rows(ds, 0, 4)
	step := func(o strategy.TrainOptions) error {
		return strategytest.Each(strats, func(r int, s strategy.Strategy) error {
			_, err := s.Step(ctx, module.Train, strategytest.Shard(b, r, 2), o)
			return err
		})
	}
	if err := step(strategy.TrainOptions{Scale: 0.5}); err != nil {
		t.Fatal(err)
	}
	for r, s := range strats {
		if _, err := s.OptimizerStep(ctx, strategy.OptimizerOptions{}); err == nil || !strings.Contains(err.Error(), "without Sync") {
			t.Errorf("rank %d: OptimizerStep after a Step without Sync: %v, want an error saying so", r, err)
		}
	}
	if err := step(strategy.TrainOptions{Sync: true, Accumulate: true, Scale: 0.5}); err != nil {
		t.Fatal(err)
	}
	if err := strategytest.Each(strats, func(_ int, s strategy.Strategy) error {
		_, err := s.OptimizerStep(ctx, strategy.OptimizerOptions{})
		return err
	}); err != nil {
		t.Errorf("OptimizerStep after the window's last micro-batch: %v", err)
	}
}

// FULGUR_FSDP_CPU_OFFLOAD=1 is accepted on the CPU, where the shards
// already are: Setup logs one line saying it changes nothing, and the
// strategy trains.
func TestFSDPCPUOffloadIsANoOpOnTheCPU(t *testing.T) {
	ctx := ctxFor(t)
	var logs bytes.Buffer
	env := map[string]string{fsdp.EnvCPUOffload: "1"}
	s, err := strategy.New("fsdp", strategy.Options{Log: zerolog.New(&logs), Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("strategy.New(\"fsdp\") with %s=1: %v", fsdp.EnvCPUOffload, err)
	}
	ds, _ := strategytest.Regression(8, in, out, 6)
	strats := []strategy.Strategy{s}
	setup(t, ctx, strats, &deepMLP{Sizes: []int{in, 7, out}, LR: 0.01}, ds, tensor.Float32)
	if n := strings.Count(logs.String(), "CPU offload"); n != 1 || !strings.Contains(logs.String(), "host memory") {
		t.Errorf("log after Setup: %q, want one line saying CPU offload changes nothing (the shards are in host memory)", logs.String())
	}
	b, _ := strategytest.Rows(ds, 0, 4)
	if _, _, err := strategytest.Step(ctx, strats, strategy.OptimizerOptions{}, b); err != nil {
		t.Errorf("a step with CPU offload asked for: %v", err)
	}
}

// auxMLP adds a layer, aux, whose output joins the loss only in graphs of
// AuxAt rows: a window whose last micro-batch is smaller produces aux's
// gradient only in the micro-batches without Sync.
type auxMLP struct {
	deepMLP
	AuxAt int
}

func (m *auxMLP) Configure(b *module.Builder) error {
	m.layers(b)
	nn.NewLinear(b, "aux", m.Sizes[0], m.Sizes[len(m.Sizes)-1])
	return nil
}

func (m *auxMLP) TrainingStep(s *module.Step) (*G.Node, error) {
	o := m.forward(s)
	if s.BatchSize() == m.AuxAt {
		aux := nn.NewLinear(module.NewBuilder(s.Dtype()), "aux", m.Sizes[0], m.Sizes[len(m.Sizes)-1])
		o = G.Must(G.Add(o, aux.Forward(s, s.Input("x"))))
	}
	n := s.BatchSize() * m.Sizes[len(m.Sizes)-1]
	d := G.Must(G.Sub(G.Must(G.Reshape(o, []int{n})), G.Must(G.Reshape(s.Input("y"), []int{n}))))
	return G.Must(G.Mean(G.Must(G.Square(d)))), nil
}

// A unit whose gradient only micro-batches without Sync produced (aux,
// absent from the smaller last micro-batch's graph) is reduce-scattered
// after the window's last micro-batch all the same: 2 ranks train as
// reduce-scattering every micro-batch does, and as one device does.
func TestFSDPNoSyncSendsUnitsTheLastMicroBatchLacks(t *testing.T) {
	ctx := ctxFor(t)
	const n, steps = 2, 3
	ds, err := strategytest.Regression(steps*10, in, out, 8)
	if err != nil {
		t.Fatal(err)
	}
	newModel := func(auxAt int) *auxMLP {
		return &auxMLP{deepMLP: deepMLP{Sizes: []int{in, 7, out}, Opt: "adam", LR: 0.02}, AuxAt: auxAt}
	}
	noSync, every := ranks(t, n, fsdp.Config{}), ranks(t, n, fsdp.Config{SyncMicroBatches: true})
	ref := []strategy.Strategy{single.NewSingle()}
	setup(t, ctx, noSync, newModel(2), ds, tensor.Float32)
	setup(t, ctx, every, newModel(2), ds, tensor.Float32)
	setup(t, ctx, ref, newModel(4), ds, tensor.Float32)
	for k := range steps {
		// Windows of 4, 4 and 2 rows: 2, 2 and 1 a rank.
		var micro []*data.Batch
		for _, r := range [][2]int{{0, 4}, {4, 8}, {8, 10}} {
			b, err := strategytest.Rows(ds, 10*k+r[0], 10*k+r[1])
			if err != nil {
				t.Fatal(err)
			}
			micro = append(micro, b)
		}
		for _, s := range [][]strategy.Strategy{noSync, every, ref} {
			if _, _, err := strategytest.Step(ctx, s, strategy.OptimizerOptions{}, micro...); err != nil {
				t.Fatalf("step %d: %v", k, err)
			}
		}
	}
	a, b := fullState(t, ctx, noSync), fullState(t, ctx, every)
	want := strategytest.StoreOf(ref[0])
	for _, e := range want.Entries() {
		wt, _ := want.Tensor(e.Name)
		w := values(&strategy.Tensor{Dtype: tensor.Float32, Data32: wt.Float32s()})
		g, h := values(a.Lookup(e.Name)), values(b.Lookup(e.Name))
		for i := range w {
			if d := math.Abs(g[i] - h[i]); !(d <= strategytest.AbsTol+strategytest.RelTol*math.Abs(h[i])) {
				t.Fatalf("%s[%d]: %g accumulated without communication, %g reduce-scattering every micro-batch", e.Name, i, g[i], h[i])
			}
			if d := math.Abs(g[i] - w[i]); !(d <= strategytest.AbsTol+strategytest.RelTol*math.Abs(w[i])) {
				t.Fatalf("%s[%d]: %g accumulated without communication, %g on one device", e.Name, i, g[i], w[i])
			}
		}
	}
}

// HYBRID_SHARD with accumulation: 4 ranks sharded in pairs and replicated
// across them hold 3 micro-batches and train as one device does (the
// window's gradient is reduce-scattered within a pair, then all-reduced
// across the pairs, once).
func TestFSDPHybridShardNoSyncTrainsAsOneDevice(t *testing.T) {
	ctx := ctxFor(t)
	const B, steps, accum = 8, 3, 3
	strats := hybridRanks(t)
	ds, _ := strategytest.Regression(steps*accum*B, in, out, 13)
	m := &deepMLP{Sizes: []int{in, 9, 7, out}, Opt: "adam", LR: 0.02}
	ref := []strategy.Strategy{single.NewSingle()}
	for _, s := range [][]strategy.Strategy{strats, ref} {
		setup(t, ctx, s, m, ds, tensor.Float32)
		train(t, ctx, s, ds, B, steps, accum, strategy.OptimizerOptions{})
	}
	got, want := fullState(t, ctx, strats), strategytest.StoreOf(ref[0])
	for _, e := range want.Entries() {
		wt, _ := want.Tensor(e.Name)
		w, g := values(&strategy.Tensor{Dtype: tensor.Float32, Data32: wt.Float32s()}), values(got.Lookup(e.Name))
		for i := range w {
			if d := math.Abs(g[i] - w[i]); !(d <= strategytest.AbsTol+strategytest.RelTol*math.Abs(w[i])) {
				t.Fatalf("%s[%d] is %g after %d steps of %d micro-batches, one device gives %g", e.Name, i, g[i], steps, accum, w[i])
			}
		}
	}
}
