package ops

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

// resEnd is the end of a residual block: max(0, BatchNorm(x) + s), or with
// proj max(0, BatchNorm(x) + BatchNorm(s)).
type resEnd struct {
	shape                  []int
	training, affine, proj bool
}

func (c resEnd) String() string {
	return fmt.Sprintf("%v/train=%v/affine=%v/proj=%v", c.shape, c.training, c.affine, c.proj)
}

var resEndCases = func() []resEnd {
	var cs []resEnd
	// {2, 2, 5, 7}: planes of two whole vectors and a tail.
	for _, shape := range [][]int{{3, 2, 3, 2}, {2, 3, 5}, {5, 3}, {1, 2, 3, 3}, {2, 2, 5, 7}} {
		for _, training := range []bool{true, false} {
			for _, affine := range []bool{true, false} {
				for _, proj := range []bool{false, true} {
					cs = append(cs, resEnd{shape, training, affine, proj})
				}
			}
		}
	}
	return cs
}()

// inputs are x, s, then gamma and beta of each BatchNorm when affine.
func (c resEnd) inputs(dt tensor.Dtype) []*tensor.Dense {
	ch := c.shape[1]
	in := []*tensor.Dense{spreadT(dt, 1, -2, 2, c.shape...), spreadT(dt, 2, -1.5, 1.5, c.shape...)}
	if c.affine {
		in = append(in, randT(dt, 3, 0.5, 1.5, ch), randT(dt, 4, -0.5, 0.5, ch))
		if c.proj {
			in = append(in, randT(dt, 5, -1.5, -0.5, ch), randT(dt, 6, -0.5, 0.5, ch))
		}
	}
	return in
}

// build adds the block end over in (as inputs gives them) to in's graph:
// fused, or from BatchNorm and AddReLU.
func (c resEnd) build(fused bool, in []*G.Node, st [2]bnState, red [2]StatReducer) (*G.Node, error) {
	args := [2]BatchNormArgs{{X: in[0]}, {X: in[1]}}
	for i := range args {
		if c.affine && (i == 0 || c.proj) {
			args[i].Gamma, args[i].Beta = in[2+2*i], in[3+2*i]
		}
		args[i].Stats = st[i].stats()
		args[i].Opts = BatchNormOpts{Training: c.training, Sync: red[i]}
	}
	switch {
	case fused && c.proj:
		return BatchNormAddBatchNormReLU(args[0], args[1])
	case fused:
		return BatchNormAddReLU(args[0], in[1])
	}
	bn := func(a BatchNormArgs) (*G.Node, error) { return BatchNorm(a.X, a.Gamma, a.Beta, a.Stats, a.Opts) }
	h, err := bn(args[0])
	if err != nil {
		return nil, err
	}
	s := in[1]
	if c.proj {
		if s, err = bn(args[1]); err != nil {
			return nil, err
		}
	}
	return AddReLU(h, s)
}

// run builds the block end over in, runs the loss Σ w·y forward and
// backward once, and returns the output, every input's gradient and the
// running statistics after the run, by name.
func (c resEnd) run(fused bool, in []*tensor.Dense, w *tensor.Dense, red [2]StatReducer) (map[string][]float64, error) {
	gorgoniaBuild.Lock() // see runBNGrad
	unlock := sync.OnceFunc(gorgoniaBuild.Unlock)
	defer unlock()
	dt := in[0].Dtype()
	st := [2]bnState{newBNState(dt, c.shape[1]), newBNState(dt, c.shape[1])}
	for _, s := range st { // running statistics eval mode can tell apart
		setAll(s.mean, func(i int) float64 { return 0.3*float64(i) - 0.2 })
		setAll(s.vr, func(i int) float64 { return 0.5 + float64(i) })
	}
	g := G.NewGraph()
	ns := make([]*G.Node, len(in))
	for i, t := range in {
		ns[i] = node(g, t, fmt.Sprintf("in%d", i))
	}
	y, err := c.build(fused, ns, st, red)
	if err != nil {
		return nil, err
	}
	n := y.Shape().TotalSize()
	flat, err := G.Reshape(y, tensor.Shape{n})
	if err != nil {
		return nil, err
	}
	prod, err := G.HadamardProd(flat, node(g, w, "w"))
	if err != nil {
		return nil, err
	}
	loss, err := G.Sum(prod)
	if err != nil {
		return nil, err
	}
	grads, err := G.Grad(loss, ns...)
	if err != nil {
		return nil, err
	}
	var yv G.Value
	G.Read(y, &yv)
	m := G.NewTapeMachine(g)
	defer m.Close()
	unlock()
	if err := m.RunAll(); err != nil {
		return nil, err
	}
	out := map[string][]float64{"output": vals(yv)}
	for i, gr := range grads {
		out[fmt.Sprintf("gradient %d", i)] = vals(gr.Value())
	}
	for i, s := range st {
		out[fmt.Sprintf("BatchNorm %d running mean", i)] = vals(s.mean)
		out[fmt.Sprintf("BatchNorm %d running var", i)] = vals(s.vr)
		out[fmt.Sprintf("BatchNorm %d batches", i)] = vals(s.nb)
	}
	return out, nil
}

func compareRuns(t *testing.T, got, want map[string][]float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d values, want %d", len(got), len(want))
	}
	for k, w := range want {
		assertClose(t, k, got[k], w, tol)
	}
}

// The fused ops compute what BatchNorm (one or two) followed by AddReLU
// computes: the output, the gradient of every input (x, the shortcut,
// gamma and beta) and the running statistics, in training and eval, with
// and without the affine map, for 2-, 3- and 4-dimensional inputs. The
// loss weights differ per element, so the masked gradient's sums matter.
func TestBatchNormAddReLUMatchesSeparateOps(t *testing.T) {
	defer func(g int, w func() int) { parallelGrain, maxWorkers = g, w }(parallelGrain, maxWorkers)
	for _, par := range []bool{false, true} {
		if par { // the split kernels too, unevenly
			parallelGrain, maxWorkers = 1, func() int { return 3 }
		} else {
			parallelGrain, maxWorkers = 1<<30, func() int { return 1 }
		}
		for _, dt := range dtypes {
			for _, c := range resEndCases {
				t.Run(fmt.Sprintf("%v/parallel=%v/%v", c, par, dt), func(t *testing.T) {
					in := c.inputs(dt)
					w := randT(dt, 9, -1, 1, tensor.Shape(c.shape).TotalSize())
					want, err := c.run(false, in, w, [2]StatReducer{})
					if err != nil {
						t.Fatal(err)
					}
					got, err := c.run(true, in, w, [2]StatReducer{})
					if err != nil {
						t.Fatal(err)
					}
					gtol := 1e-10
					if dt == tensor.Float32 {
						gtol = 1e-4
					}
					compareRuns(t, got, want, gtol)
				})
			}
		}
	}
}

// The gradients of the fused ops against finite differences.
func TestBatchNormAddReLUGrad(t *testing.T) {
	for _, dt := range dtypes {
		for _, c := range resEndCases {
			st := [2]bnState{newBNState(dt, c.shape[1]), newBNState(dt, c.shape[1])}
			gc := gradcheck.Case{Name: c.String() + "/" + dt.String(), Inputs: c.inputs(dt), Seed: 11,
				Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
					return c.build(true, in, st, [2]StatReducer{})
				}}
			if dt == tensor.Float32 {
				gc.Eps = 1e-2 // as TestBatchNormGrad
			}
			check(t, gc)
		}
	}
}

// Under Sync (two replicas, each with half the batch) the fused ops
// compute what the separate ops compute under Sync: each replica's output,
// gradients and running statistics; and they reduce as often (statistics,
// then gradient sums, per BatchNorm).
func TestBatchNormAddReLUSync(t *testing.T) {
	for _, dt := range dtypes {
		for _, c := range []resEnd{{[]int{4, 3, 2, 2}, true, true, false}, {[]int{4, 3, 2, 2}, true, true, true}, {[]int{6, 2, 3}, true, false, true}} {
			t.Run(fmt.Sprintf("%v/%v", c, dt), func(t *testing.T) {
				in := c.inputs(dt)
				w := randT(dt, 9, -1, 1, c.shape...)
				halves := func(fused bool) ([2]map[string][]float64, [2]int) {
					var out [2]map[string][]float64
					var errs [2]error
					a, b := newPair()
					a2, b2 := newPair()
					reds := [2][2]StatReducer{{a, a2}, {b, b2}}
					var wg sync.WaitGroup
					for r := 0; r < 2; r++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							lo, hi := r*c.shape[0]/2, (r+1)*c.shape[0]/2
							rin := []*tensor.Dense{rows(in[0], lo, hi), rows(in[1], lo, hi)}
							rin = append(rin, in[2:]...)
							rw := rows(w, lo, hi)
							rw.Reshape(rw.Shape().TotalSize())
							out[r], errs[r] = c.run(fused, rin, rw, reds[r])
						}()
					}
					wg.Wait()
					for _, err := range errs {
						if err != nil {
							t.Fatal(err)
						}
					}
					return out, [2]int{a.calls + a2.calls, b.calls + b2.calls}
				}
				want, wantCalls := halves(false)
				got, calls := halves(true)
				if calls != wantCalls || calls[0] == 0 {
					t.Fatalf("reductions per replica %v, the separate ops make %v", calls, wantCalls)
				}
				gtol := 1e-10
				if dt == tensor.Float32 {
					gtol = 1e-4
				}
				for r := range got {
					compareRuns(t, got[r], want[r], gtol)
				}
			})
		}
	}
}

func TestBatchNormAddReLUErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(2, 3, 4, 4), G.WithName("x"))
	s := G.NewTensor(g, tensor.Float32, 4, G.WithShape(2, 3, 2, 2), G.WithName("s"))
	s64 := G.NewTensor(g, tensor.Float64, 4, G.WithShape(2, 3, 4, 4), G.WithName("s64"))
	st := newBNState(tensor.Float32, 3).stats()
	bn := BatchNormArgs{X: x, Stats: st, Opts: BatchNormOpts{Training: true}}
	relu := bn
	relu.Opts.ReLU = true
	other := bn
	other.X = s
	for _, c := range []struct {
		what string
		err  func() error
		want string
	}{
		{"relu", func() error { _, err := BatchNormAddReLU(relu, x); return err },
			"BatchNormAddReLU has Opts.ReLU set: the ReLU follows the sum, leave it false"},
		{"shortcut shape", func() error { _, err := BatchNormAddReLU(bn, s); return err },
			"BatchNormAddReLU input has shape (2, 3, 4, 4) and shortcut (2, 3, 2, 2): they must be equal"},
		{"shortcut dtype", func() error { _, err := BatchNormAddReLU(bn, s64); return err },
			"BatchNormAddReLU shortcut has dtype float64 but the input has float32"},
		{"nil shortcut", func() error { _, err := BatchNormAddReLU(bn, nil); return err },
			"BatchNormAddReLU needs a shortcut node: use BatchNormAddBatchNormReLU for a normalised one"},
		{"second shape", func() error { _, err := BatchNormAddBatchNormReLU(bn, other); return err },
			"BatchNormAddBatchNormReLU inputs have shapes (2, 3, 4, 4) and (2, 3, 2, 2): they must be equal"},
		{"second relu", func() error { _, err := BatchNormAddBatchNormReLU(bn, relu); return err },
			"BatchNormAddBatchNormReLU BatchNorm 2 has Opts.ReLU set"},
		{"no stats", func() error { _, err := BatchNormAddReLU(BatchNormArgs{X: x}, x); return err },
			"BatchNormAddReLU running mean is nil"},
	} {
		err := c.err()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.what, err, c.want)
		}
	}
}

// The masked-gradient op given its output gradient as two summands
// (DoSum, what an executor folds Gorgonia's gradient Add into) computes
// what Do computes from their sum, bit for bit: the masked gradient and
// every BatchNorm's sums; for BatchNorm+ReLU and both block ends, in
// training and eval, serial and split.
func TestBatchNormMaskDoSumMatchesDo(t *testing.T) {
	defer func(g int, w func() int) { parallelGrain, maxWorkers = g, w }(parallelGrain, maxWorkers)
	for _, par := range []bool{false, true} {
		parallelGrain, maxWorkers = 1<<30, func() int { return 1 }
		if par {
			parallelGrain, maxWorkers = 1, func() int { return 3 }
		}
		for _, dt := range dtypes {
			for _, c := range []resEnd{{[]int{3, 2, 5, 7}, true, true, false}, {[]int{3, 2, 5, 7}, false, true, true}, {[]int{4, 3}, true, false, true}} {
				for _, plain := range []bool{false, true} { // plain: BatchNorm+ReLU
					g := G.NewGraph()
					var in []*G.Node
					for i, x := range c.inputs(dt) {
						in = append(in, node(g, x, fmt.Sprintf("in%d", i)))
					}
					st := [2]bnState{newBNState(dt, c.shape[1]), newBNState(dt, c.shape[1])}
					var y *G.Node
					var err error
					if plain {
						o := BatchNormOpts{Training: c.training, ReLU: true}
						if c.affine {
							y, err = BatchNorm(in[0], in[2], in[3], st[0].stats(), o)
						} else {
							y, err = BatchNorm(in[0], nil, nil, st[0].stats(), o)
						}
					} else {
						y, err = c.build(true, in, st, [2]StatReducer{})
					}
					if err != nil {
						t.Fatal(err)
					}
					var fv []G.Value // the forward op's inputs
					for it := g.From(y.ID()); it.Next(); {
						fv = append(fv, it.Node().(*G.Node).Value())
					}
					out, err := y.Op().Do(fv...)
					if err != nil {
						t.Fatal(err)
					}
					mask := &bnMaskOp{base: newBase("mask"), bns: bnsOf(y.Op())}
					n := tensor.Shape(c.shape).TotalSize()
					a, b := randT(dt, 21, -1, 1, c.shape...), randT(dt, 22, -1, 1, c.shape...)
					sum := tensor.New(tensor.Of(dt), tensor.WithShape(c.shape...))
					if dt == tensor.Float32 {
						add(data[float32](a), data[float32](b), data[float32](sum))
					} else {
						add(data[float64](a), data[float64](b), data[float64](sum))
					}
					v := []G.Value{out, sum, fv[0]}
					if len(mask.bns) > 1 {
						v = append(v, fv[mask.bns[0].Arity()])
					}
					name := fmt.Sprintf("%v/plain=%v/parallel=%v/%v", c, plain, par, dt)
					results := func(out G.Value, err error) []float64 {
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						r := append([]float64(nil), vals(out)...)
						for _, bn := range mask.bns {
							r = append(append(r, bn.sumDy...), bn.sumDyXh...)
						}
						return r
					}
					want := results(mask.Do(v...))
					v[1] = nil // not read
					got := results(mask.DoSum(a, b, v...))
					if len(got) != len(want) || len(got) < n+2*c.shape[1] {
						t.Fatalf("%s: %d and %d values", name, len(got), len(want))
					}
					for i := range want {
						if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
							t.Fatalf("%s: DoSum value %d = %v, Do of the sum %v", name, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// bnsOf is the BatchNorms of a BatchNorm or block-end op.
func bnsOf(op G.Op) []*bnOp {
	if bn, ok := op.(*bnOp); ok {
		return []*bnOp{bn}
	}
	return op.(*bnAddOp).bns
}

// At resnet8's third stage (64x64x7x7, 200K elements a pass), the loops
// split at the default grain while the pool polls (parallelGrain), and
// the fused block end and BatchNorm+ReLU, forward and backward (every
// output, gradient and running statistic), give the bits of one worker on
// 2, 3 and 4, fused and as separate ops, in training and eval.
func TestStage3LoopsSplitMatchSerial(t *testing.T) {
	defer func(w func() int) { maxWorkers = w }(maxWorkers)
	defer contended.Store(contended.Load())
	shape := []int{64, 64, 7, 7}
	for _, c := range []resEnd{{shape, true, true, true}, {shape, true, true, false}, {shape, false, true, true}} {
		in := c.inputs(tensor.Float32)
		w := randT(tensor.Float32, 9, -1, 1, tensor.Shape(c.shape).TotalSize())
		for _, fused := range []bool{true, false} {
			var want map[string][]float64
			for _, nw := range []int{1, 2, 3, 4} {
				maxWorkers = func() int { return nw }
				contended.Store(false) // a polling pool, as in training
				if nw > 1 && workers(64*64, 49) < 2 {
					t.Fatalf("%d workers: a %v pass does not split", nw, shape)
				}
				got, err := c.run(fused, in, w, [2]StatReducer{})
				if err != nil {
					t.Fatal(err)
				}
				if nw == 1 {
					want = got
					continue
				}
				if len(got) != len(want) {
					t.Fatalf("%v fused=%v workers=%d: %d values, want %d", c, fused, nw, len(got), len(want))
				}
				for k, v := range want {
					sameBits(t, fmt.Sprintf("%v fused=%v workers=%d %s", c, fused, nw, k), got[k], v)
				}
			}
		}
	}
}
