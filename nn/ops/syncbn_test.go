package ops

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/gradcheck"
)

// pairReducer is one side of a two-replica sum: it hands a copy of its
// buffer to the peer and adds the peer's. Both sides add the same two
// numbers, so they end bit-identical, as a real collective's ranks do.
type pairReducer struct {
	out    chan<- []float64
	in     <-chan []float64
	calls  int
	weight float64 // GradWeight; 0: none (the op uses 1)
}

func (p *pairReducer) GradWeight() float64 { return p.weight }

func newPair() (*pairReducer, *pairReducer) {
	a, b := make(chan []float64, 1), make(chan []float64, 1)
	return &pairReducer{out: a, in: b}, &pairReducer{out: b, in: a}
}

func (p *pairReducer) AllReduceSum(buf []float64) error {
	p.calls++
	p.out <- append([]float64(nil), buf...)
	o := <-p.in
	if len(o) != len(buf) {
		return fmt.Errorf("peer sent %d values, this side %d", len(o), len(buf))
	}
	for i := range buf {
		buf[i] += o[i]
	}
	return nil
}

// soloReducer is a job of one replica: the sum is the buffer itself.
type soloReducer struct{ calls int }

func (s *soloReducer) AllReduceSum([]float64) error { s.calls++; return nil }

// bnRun is what one BatchNorm training run produced.
type bnRun struct {
	y, dx, dgamma, dbeta []float64
	mean, vr             []float64
}

// runBNGrad runs BatchNorm in training on x with loss Σ w·y and returns the
// output, the gradients and the running statistics after the run.
// gorgoniaBuild serialises graph building across simulated ranks.
var gorgoniaBuild sync.Mutex

func runBNGrad(x, w, gamma, beta *tensor.Dense, st bnState, o BatchNormOpts) (bnRun, error) {
	// Gorgonia v0.9.17 shares state between graphs while building them and
	// making machines (a data race between the two simulated ranks): build
	// one at a time, run concurrently (the ranks wait for each other).
	gorgoniaBuild.Lock()
	unlock := sync.OnceFunc(gorgoniaBuild.Unlock)
	defer unlock()
	g := G.NewGraph()
	xn := node(g, x, "x")
	wn := node(g, w, "w")
	var gn, bn *G.Node
	if gamma != nil {
		gn, bn = node(g, gamma, "gamma"), node(g, beta, "beta")
	}
	y, err := BatchNorm(xn, gn, bn, st.stats(), o)
	if err != nil {
		return bnRun{}, err
	}
	n := x.Shape().TotalSize()
	flat, err := G.Reshape(y, tensor.Shape{n})
	if err != nil {
		return bnRun{}, err
	}
	wf, err := G.Reshape(wn, tensor.Shape{n})
	if err != nil {
		return bnRun{}, err
	}
	prod, err := G.HadamardProd(flat, wf)
	if err != nil {
		return bnRun{}, err
	}
	loss, err := G.Sum(prod)
	if err != nil {
		return bnRun{}, err
	}
	wrt := []*G.Node{xn}
	if gn != nil {
		wrt = append(wrt, gn, bn)
	}
	grads, err := G.Grad(loss, wrt...)
	if err != nil {
		return bnRun{}, err
	}
	var r bnRun
	var yv G.Value
	G.Read(y, &yv)
	m := G.NewTapeMachine(g)
	defer m.Close()
	unlock()
	if err := m.RunAll(); err != nil {
		return bnRun{}, err
	}
	r.y = vals(yv)
	r.dx = vals(grads[0].Value())
	if gn != nil {
		r.dgamma, r.dbeta = vals(grads[1].Value()), vals(grads[2].Value())
	}
	r.mean, r.vr = vals(st.mean), vals(st.vr)
	return r, nil
}

// rows returns rows [lo, hi) of t (its first axis) as a new tensor.
func rows(t *tensor.Dense, lo, hi int) *tensor.Dense {
	s := t.Shape().Clone()
	per := s.TotalSize() / s[0]
	s[0] = hi - lo
	v := vals(t)[lo*per : hi*per]
	return fromF64(t.Dtype(), v, s...)
}

// Two replicas with Sync, each holding half of a batch, compute what one
// BatchNorm computes on the whole batch: the outputs, the input gradient,
// the running statistics; their gamma and beta gradients sum to the whole
// batch's (the strategy sums them). Without Sync the running statistics
// differ, so the comparison can fail.
func TestBatchNormSyncMatchesWholeBatch(t *testing.T) {
	type tc struct {
		shape        []int
		affine, relu bool
		split        int        // rows of replica 0; 0: half
		weights      [2]float64 // of each replica's loss in the whole one; zero: 1 each
	}
	cases := []tc{{shape: []int{4, 3, 2, 2}, affine: true}, {shape: []int{4, 3, 2, 2}, affine: true, relu: true}, {shape: []int{6, 3}},
		{shape: []int{4, 2, 5}, affine: true, relu: true},
		// DP's uneven batch: 2 and 3 rows, each replica's mean loss
		// weighted by its share.
		{shape: []int{5, 3, 2, 2}, affine: true, relu: true, split: 2, weights: [2]float64{0.4, 0.6}},
		{shape: []int{5, 3}, split: 3, weights: [2]float64{0.6, 0.4}}}
	for _, dt := range dtypes {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%v/affine=%v/relu=%v/split=%d/%v", c.shape, c.affine, c.relu, c.split, dt), func(t *testing.T) {
				ch := c.shape[1]
				// An offset per half and a large mean: the merge of the
				// replicas' statistics must not cancel.
				x := spreadT(dt, 5, 2, 6, c.shape...)
				n := c.shape[0]
				split := c.split
				if split == 0 {
					split = n / 2
				}
				bounds := [3]int{0, split, n}
				wt := c.weights
				if wt == [2]float64{} {
					wt = [2]float64{1, 1}
				}
				setAll(x, func(i int) float64 {
					v := vals(x)[i]
					if i >= x.Shape().TotalSize()/2 {
						v += 1.5
					}
					return v + 40
				})
				w := randT(dt, 6, -1, 1, c.shape...)
				var gamma, beta *tensor.Dense
				if c.affine {
					gamma, beta = randT(dt, 7, 0.5, 1.5, ch), randT(dt, 8, -0.5, 0.5, ch)
				}
				// The whole loss is Σ_r wt_r·(Σ w·y over replica r's rows).
				per := x.Shape().TotalSize() / n
				ww := fromF64(dt, vals(w), c.shape...)
				setAll(ww, func(i int) float64 {
					r := 0
					if i >= split*per {
						r = 1
					}
					return wt[r] * vals(w)[i]
				})
				whole, err := runBNGrad(x, ww, gamma, beta, newBNState(dt, ch), BatchNormOpts{Training: true, ReLU: c.relu})
				if err != nil {
					t.Fatal(err)
				}
				halves := func(synced bool) ([2]bnRun, [2]int) {
					var out [2]bnRun
					var errs [2]error
					a, b := newPair()
					if c.weights != [2]float64{} {
						a.weight, b.weight = c.weights[0], c.weights[1]
					}
					red := [2]*pairReducer{a, b}
					var wg sync.WaitGroup
					for r := 0; r < 2; r++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							lo, hi := bounds[r], bounds[r+1]
							o := BatchNormOpts{Training: true, ReLU: c.relu}
							if synced {
								o.Sync = red[r]
							}
							out[r], errs[r] = runBNGrad(rows(x, lo, hi), rows(w, lo, hi), gamma, beta, newBNState(dt, ch), o)
						}()
					}
					wg.Wait()
					for _, err := range errs {
						if err != nil {
							t.Fatal(err)
						}
					}
					return out, [2]int{a.calls, b.calls}
				}
				got, calls := halves(true)
				if calls != [2]int{2, 2} {
					t.Fatalf("reductions per replica %v, want 2 each (statistics, gradient sums)", calls)
				}
				ftol, gtol := tol(dt), 1e-10
				if dt == tensor.Float32 {
					gtol = 1e-4
				}
				assertClose(t, "output", append(got[0].y, got[1].y...), whole.y, 10*ftol)
				// Each replica's gradients get multiplied by its weight
				// before the strategy sums them.
				scaled := func(v []float64, k float64) []float64 {
					o := make([]float64, len(v))
					for i := range v {
						o[i] = k * v[i]
					}
					return o
				}
				assertClose(t, "input gradient", append(scaled(got[0].dx, wt[0]), scaled(got[1].dx, wt[1])...), whole.dx, gtol)
				for r := 0; r < 2; r++ {
					assertClose(t, fmt.Sprintf("replica %d running mean", r), got[r].mean, whole.mean, ftol)
					assertClose(t, fmt.Sprintf("replica %d running var", r), got[r].vr, whole.vr, ftol)
				}
				if c.affine {
					sum := func(a, b []float64) []float64 {
						o := make([]float64, len(a))
						for i := range a {
							o[i] = a[i] + b[i]
						}
						return o
					}
					assertClose(t, "gamma gradient (sum of replicas)", sum(scaled(got[0].dgamma, wt[0]), scaled(got[1].dgamma, wt[1])), whole.dgamma, gtol)
					assertClose(t, "beta gradient (sum of replicas)", sum(scaled(got[0].dbeta, wt[0]), scaled(got[1].dbeta, wt[1])), whole.dbeta, gtol)
				}
				local, calls := halves(false)
				if calls != [2]int{0, 0} {
					t.Fatalf("reductions without Sync %v, want none", calls)
				}
				if d := maxDiff(local[0].mean, whole.mean); d < 0.01 {
					t.Fatalf("unsynced running mean is within %g of the whole batch's: the halves do not tell sync apart", d)
				}
			})
		}
	}
}

func maxDiff(a, b []float64) float64 {
	d := 0.0
	for i := range a {
		d = max(d, abs(a[i]-b[i]))
	}
	return d
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// The synced op's own gradients, checked numerically on one replica (the
// reduction is the identity): the code path with Sync set is differentiated
// correctly, ReLU and affine included.
func TestBatchNormSyncGrad(t *testing.T) {
	for _, dt := range dtypes {
		for _, c := range []bnCase{{[]int{3, 2, 3, 2}, true, true, false}, {[]int{3, 2, 3, 2}, true, true, true}, {[]int{4, 3}, true, false, false}} {
			ch := c.shape[1]
			st := newBNState(dt, ch)
			ins := []*tensor.Dense{spreadT(dt, 1, -2, 2, c.shape...)}
			if c.affine {
				ins = append(ins, randT(dt, 2, 0.5, 1.5, ch), randT(dt, 3, -0.5, 0.5, ch))
			}
			red := &soloReducer{}
			gc := gradcheck.Case{Name: fmt.Sprintf("SyncBatchNorm%v/affine=%v/relu=%v/%v", c.shape, c.affine, c.relu, dt), Inputs: ins, Seed: 11,
				Build: func(g *G.ExprGraph, in []*G.Node) (*G.Node, error) {
					o := BatchNormOpts{Training: true, ReLU: c.relu, Sync: red}
					if c.affine {
						return BatchNorm(in[0], in[1], in[2], st.stats(), o)
					}
					return BatchNorm(in[0], nil, nil, st.stats(), o)
				}}
			if dt == tensor.Float32 {
				gc.Eps = 1e-2
			}
			check(t, gc)
			if red.calls == 0 {
				t.Fatalf("%s: the reducer was never called", gc.Name)
			}
		}
	}
}

// A failing reduction is the run's error, naming SyncBatchNorm.
func TestBatchNormSyncError(t *testing.T) {
	x := spreadT(tensor.Float64, 1, -2, 2, 4, 3)
	_, err := runBNGrad(x, x, nil, nil, newBNState(tensor.Float64, 3), BatchNormOpts{Training: true, Sync: failReducer{}})
	if err == nil || !strings.Contains(err.Error(), "SyncBatchNorm: reduce batch statistics") || !strings.Contains(err.Error(), "peer 1 is gone") {
		t.Fatalf("error %v, want one naming SyncBatchNorm and the cause", err)
	}
}

type failReducer struct{}

func (failReducer) AllReduceSum([]float64) error { return errors.New("peer 1 is gone") }
