package optim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// refOpt is a tiny float64 reference written from the formulas in the torch
// documentation, one element at a time, independent of the kernels.
type refOpt struct {
	kind              string // "sgd", "adam", "adamw"
	lr, mom, damp, wd float64
	nesterov, amsgrad bool
	b1, b2, eps       float64
	t                 int
	buf, m, v, vmax   []float64
}

func (r *refOpt) step(p, g []float64) {
	r.t++
	if r.buf == nil {
		r.buf, r.m, r.v = make([]float64, len(p)), make([]float64, len(p)), make([]float64, len(p))
		r.vmax = make([]float64, len(p))
	}
	for i := range p {
		switch r.kind {
		case "sgd":
			d := g[i] + r.wd*p[i]
			if r.mom != 0 {
				if r.t == 1 {
					r.buf[i] = d
				} else {
					r.buf[i] = r.mom*r.buf[i] + (1-r.damp)*d
				}
				if r.nesterov {
					d += r.mom * r.buf[i]
				} else {
					d = r.buf[i]
				}
			}
			p[i] -= r.lr * d
		case "adam", "adamw":
			gi := g[i]
			if r.kind == "adamw" {
				p[i] *= 1 - r.lr*r.wd
			} else {
				gi += r.wd * p[i]
			}
			r.m[i] = r.b1*r.m[i] + (1-r.b1)*gi
			r.v[i] = r.b2*r.v[i] + (1-r.b2)*gi*gi
			mhat := r.m[i] / (1 - math.Pow(r.b1, float64(r.t)))
			r.vmax[i] = max(r.vmax[i], r.v[i])
			v := r.v[i]
			if r.amsgrad {
				v = r.vmax[i]
			}
			vhat := v / (1 - math.Pow(r.b2, float64(r.t)))
			// torch divides sqrt(v) by sqrt(bc2) before adding eps, which is
			// sqrt(vhat) + eps up to rounding.
			p[i] -= r.lr * mhat / (math.Sqrt(vhat) + r.eps)
		}
	}
}

type optCase struct {
	name string
	new  func() (Optimizer, error)
	ref  func() *refOpt
}

var optCases = []optCase{
	{"sgd", func() (Optimizer, error) { return NewSGD(SGDConfig{LR: 0.05}) },
		func() *refOpt { return &refOpt{kind: "sgd", lr: 0.05} }},
	{"sgd-wd", func() (Optimizer, error) { return NewSGD(SGDConfig{LR: 0.05, WeightDecay: 0.1}) },
		func() *refOpt { return &refOpt{kind: "sgd", lr: 0.05, wd: 0.1} }},
	{"sgd-momentum", func() (Optimizer, error) { return NewSGD(SGDConfig{LR: 0.05, Momentum: 0.9}) },
		func() *refOpt { return &refOpt{kind: "sgd", lr: 0.05, mom: 0.9} }},
	{"sgd-momentum-dampening-wd", func() (Optimizer, error) {
		return NewSGD(SGDConfig{LR: 0.05, Momentum: 0.7, Dampening: 0.3, WeightDecay: 0.02})
	}, func() *refOpt { return &refOpt{kind: "sgd", lr: 0.05, mom: 0.7, damp: 0.3, wd: 0.02} }},
	{"sgd-nesterov", func() (Optimizer, error) { return NewSGD(SGDConfig{LR: 0.05, Momentum: 0.9, Nesterov: true}) },
		func() *refOpt { return &refOpt{kind: "sgd", lr: 0.05, mom: 0.9, nesterov: true} }},
	{"adam", func() (Optimizer, error) { return NewAdam(AdamConfig{}) },
		func() *refOpt { return &refOpt{kind: "adam", lr: 1e-3, b1: 0.9, b2: 0.999, eps: 1e-8} }},
	{"adam-wd", func() (Optimizer, error) {
		return NewAdam(AdamConfig{LR: 0.02, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.05})
	}, func() *refOpt { return &refOpt{kind: "adam", lr: 0.02, b1: 0.8, b2: 0.99, eps: 1e-6, wd: 0.05} }},
	{"adamw", func() (Optimizer, error) { return NewAdamW(AdamConfig{LR: 0.02}) },
		func() *refOpt { return &refOpt{kind: "adamw", lr: 0.02, b1: 0.9, b2: 0.999, eps: 1e-8, wd: 0.01} }},
	{"adamw-amsgrad", func() (Optimizer, error) { return NewAdamW(AdamConfig{LR: 0.02, AMSGrad: true}) },
		func() *refOpt {
			return &refOpt{kind: "adamw", lr: 0.02, b1: 0.9, b2: 0.999, eps: 1e-8, wd: 0.01, amsgrad: true}
		}},
	{"adam-amsgrad-wd", func() (Optimizer, error) { return NewAdam(AdamConfig{LR: 0.02, WeightDecay: 0.05, AMSGrad: true}) },
		func() *refOpt {
			return &refOpt{kind: "adam", lr: 0.02, b1: 0.9, b2: 0.999, eps: 1e-8, wd: 0.05, amsgrad: true}
		}},
}

// data returns n parameters and steps gradient vectors, deterministic.
func data(n, steps int, seed uint64) (p []float64, gs [][]float64) {
	r := rand.New(rand.NewPCG(seed, 1))
	p = make([]float64, n)
	for i := range p {
		p[i] = r.NormFloat64()
	}
	for range steps {
		g := make([]float64, n)
		for i := range g {
			g[i] = r.NormFloat64() * math.Pow(10, float64(r.IntN(5)-3)) // spread of scales
		}
		gs = append(gs, g)
	}
	return p, gs
}

func mustNew(t testing.TB, c optCase, lo, hi int) Optimizer {
	t.Helper()
	o, err := c.new()
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Bind(lo, hi); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestMatchesReference(t *testing.T) {
	const n, steps = 37, 6
	for _, c := range optCases {
		t.Run(c.name, func(t *testing.T) {
			p0, gs := data(n, steps, 7)
			ref := c.ref()
			want := slices.Clone(p0)
			o64 := mustNew(t, c, 0, n)
			o32 := mustNew(t, c, 0, n)
			p64 := slices.Clone(p0)
			p32 := to32(p0)
			for s, g := range gs {
				ref.step(want, g)
				o64.Begin()
				o64.Update64(p64, g, 0)
				o32.Begin()
				o32.Update32(p32, to32(g), 0)
				for i := range want {
					if d := math.Abs(p64[i] - want[i]); d > 1e-13*(1+math.Abs(want[i])) {
						t.Fatalf("float64 step %d p[%d] = %.17g, reference %.17g", s+1, i, p64[i], want[i])
					}
					if d := math.Abs(float64(p32[i]) - want[i]); d > 1e-5*(1+math.Abs(want[i])) {
						t.Fatalf("float32 step %d p[%d] = %.9g, reference %.9g", s+1, i, p32[i], want[i])
					}
				}
			}
			// The parameters moved: the test compares something.
			if p64[0] == p0[0] {
				t.Fatalf("p[0] did not change")
			}
		})
	}
}

// spans splits [0, n) into 3 spans.
var spans3 = [][2]int{{0, 11}, {11, 12}, {12, 37}}

var orders3 = [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}

// The tests below run on both dtypes: each TestX runs testX[float32] and
// testX[float64].

func TestBucketsBitwiseEqualWhole(t *testing.T) {
	t.Run("float32", testBucketsBitwiseEqualWhole[float32])
	t.Run("float64", testBucketsBitwiseEqualWhole[float64])
}

func testBucketsBitwiseEqualWhole[T float](t *testing.T) {
	const n, steps = 37, 4
	for _, c := range optCases {
		p0, gs := data(n, steps, 11)
		// Whole-buffer reference.
		w := conv[T](p0)
		o := mustNew(t, c, 0, n)
		for _, g := range gs {
			o.Begin()
			update(o, w, conv[T](g), 0)
		}
		for oi, order := range orders3 {
			t.Run(fmt.Sprintf("%s/order%v", c.name, order), func(t *testing.T) {
				p := conv[T](p0)
				b := mustNew(t, c, 0, n)
				for s, g := range gs {
					gT := conv[T](g)
					b.Begin()
					// Rotate the order each step too.
					ord := orders3[(oi+s)%len(orders3)]
					for _, k := range ord {
						lo, hi := spans3[k][0], spans3[k][1]
						update(b, p[lo:hi], gT[lo:hi], lo)
					}
				}
				if !bitsEqual(p, w) {
					t.Fatalf("bucketed update differs from whole-buffer update")
				}
				if !statesEqual(b.State(), o.State()) {
					t.Fatalf("bucketed state differs from whole-buffer state")
				}
			})
		}
	}
}

func TestShardsBitwiseEqualWhole(t *testing.T) {
	t.Run("float32", testShardsBitwiseEqualWhole[float32])
	t.Run("float64", testShardsBitwiseEqualWhole[float64])
}

func testShardsBitwiseEqualWhole[T float](t *testing.T) {
	const n, k, steps = 37, 16, 4
	for _, c := range optCases {
		t.Run(c.name, func(t *testing.T) {
			p0, gs := data(n, steps, 13)
			whole := mustNew(t, c, 0, n)
			a, b := mustNew(t, c, 0, k), mustNew(t, c, k, n)
			w, s := conv[T](p0), conv[T](p0)
			for _, g := range gs {
				gT := conv[T](g)
				whole.Begin()
				update(whole, w, gT, 0)
				b.Begin() // shards begin in any order
				a.Begin()
				update(b, s[k:], gT[k:], k)
				update(a, s[:k], gT[:k], 0)
			}
			if !bitsEqual(s, w) {
				t.Fatalf("sharded params differ from whole")
			}
			ws, as, bs := whole.State(), a.State(), b.State()
			for name, buf := range ws.Buffers {
				if !bitsEqual(buf[:k], as.Buffers[name]) || !bitsEqual(buf[k:], bs.Buffers[name]) {
					t.Fatalf("sharded state %q differs from whole", name)
				}
			}
			if as.Lo != 0 || as.Hi != k || bs.Lo != k || bs.Hi != n {
				t.Fatalf("shard spans = [%d,%d) [%d,%d)", as.Lo, as.Hi, bs.Lo, bs.Hi)
			}
		})
	}
}

// Concurrent updates of disjoint buckets, including the very first (which
// allocates the state), give the sequential result. Run with -race.
func TestConcurrentBuckets(t *testing.T) {
	t.Run("float32", testConcurrentBuckets[float32])
	t.Run("float64", testConcurrentBuckets[float64])
}

func testConcurrentBuckets[T float](t *testing.T) {
	const n, steps, buckets = 1000, 3, 8
	for _, c := range optCases {
		t.Run(c.name, func(t *testing.T) {
			p0, gs := data(n, steps, 17)
			seq, par := mustNew(t, c, 0, n), mustNew(t, c, 0, n)
			ps, pp := conv[T](p0), conv[T](p0)
			for _, g := range gs {
				gT := conv[T](g)
				seq.Begin()
				update(seq, ps, gT, 0)
				par.Begin()
				var wg sync.WaitGroup
				for b := range buckets {
					lo, hi := b*n/buckets, (b+1)*n/buckets
					wg.Go(func() { update(par, pp[lo:hi], gT[lo:hi], lo) })
				}
				wg.Wait()
			}
			if !bitsEqual(pp, ps) {
				t.Fatalf("concurrent bucket updates differ from one update")
			}
		})
	}
}

func TestNoAllocations(t *testing.T) {
	t.Run("float32", testNoAllocations[float32])
	t.Run("float64", testNoAllocations[float64])
}

func testNoAllocations[T float](t *testing.T) {
	const n = 1000
	for _, c := range optCases {
		t.Run(c.name, func(t *testing.T) {
			p0, gs := data(n, 1, 19)
			o := mustNew(t, c, 0, n)
			p, g := conv[T](p0), conv[T](gs[0])
			// AllocsPerRun runs once before measuring: the first Update
			// allocates the state.
			if a := testing.AllocsPerRun(20, func() {
				o.Begin()
				update(o, p[:500], g[:500], 0)
				update(o, p[500:], g[500:], 500)
				o.SetLR(o.LR())
			}); a != 0 {
				t.Errorf("Begin+Update+SetLR: %v allocations per step", a)
			}
		})
	}
}

func TestStateRoundTrip(t *testing.T) {
	t.Run("float32", testStateRoundTrip[float32])
	t.Run("float64", testStateRoundTrip[float64])
}

func testStateRoundTrip[T float](t *testing.T) {
	const n, steps = 37, 5
	for _, c := range optCases {
		for _, early := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/loadBeforeFirstUpdate=%v", c.name, early), func(t *testing.T) {
				p0, gs := data(n, steps, 23)
				straight := mustNew(t, c, 0, n)
				want := conv[T](p0)
				for _, g := range gs {
					straight.Begin()
					update(straight, want, conv[T](g), 0)
				}
				first := mustNew(t, c, 0, n)
				got := conv[T](p0)
				for _, g := range gs[:3] {
					first.Begin()
					update(first, got, conv[T](g), 0)
				}
				saved := first.State()
				if saved.Step != 3 || saved.Scalars["lr"] != first.LR() {
					t.Fatalf("State: Step %d lr %v", saved.Step, saved.Scalars["lr"])
				}
				resumed := mustNew(t, c, 0, n)
				if !early {
					// Fix the precision first: LoadState then writes into it.
					resumed.Begin()
					update(resumed, make([]T, n), make([]T, n), 0)
				}
				if err := resumed.LoadState(saved); err != nil {
					t.Fatal(err)
				}
				if !statesEqual(resumed.State(), saved) {
					t.Fatalf("State after LoadState differs from the saved one")
				}
				for _, g := range gs[3:] {
					resumed.Begin()
					update(resumed, got, conv[T](g), 0)
				}
				if !bitsEqual(got, want) {
					t.Fatalf("resumed run differs from the straight run")
				}
			})
		}
	}
}

func TestLoadStateErrors(t *testing.T) {
	adam := func() *Adam {
		o, err := NewAdam(AdamConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	good := func() State {
		o := adam()
		if err := o.Bind(0, 4); err != nil {
			t.Fatal(err)
		}
		o.Begin()
		o.Update32(make([]float32, 4), []float32{1, 2, 3, 4}, 0)
		return o.State()
	}
	sgd, err := NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	if err := sgd.Bind(0, 4); err != nil {
		t.Fatal(err)
	}
	sgd.Begin()
	sgd.Update64(make([]float64, 4), make([]float64, 4), 0)
	sgdState := sgd.State()

	cases := []struct {
		name   string
		bind   bool
		edit   func(*State)
		wanted string
	}{
		{"not bound", false, func(*State) {}, "call Bind(lo, hi)"},
		{"other span", true, func(s *State) { s.Lo, s.Hi = 4, 8 }, "covers offsets [4, 8) but the optimizer is bound to [0, 4)"},
		{"missing buffer", true, func(s *State) { delete(s.Buffers, "exp_avg_sq") }, `no buffer "exp_avg_sq"`},
		{"short buffer", true, func(s *State) { s.Buffers["exp_avg"] = s.Buffers["exp_avg"][:3] }, `buffer "exp_avg" has 3 values but the span [0, 4) has 4`},
		{"other optimizer", true, func(s *State) { *s = sgdState }, `buffers ["momentum_buffer"] that Adam does not keep`},
		{"no lr", true, func(s *State) { delete(s.Scalars, "lr") }, `no scalar "lr"`},
		{"bad lr", true, func(s *State) { s.Scalars["lr"] = math.NaN() }, `scalar "lr" is NaN`},
		{"negative step", true, func(s *State) { s.Step = -1 }, "Step is -1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := adam()
			if tc.bind {
				if err := o.Bind(0, 4); err != nil {
					t.Fatal(err)
				}
			}
			st := good()
			tc.edit(&st)
			err := o.LoadState(st)
			if err == nil || !strings.Contains(err.Error(), tc.wanted) {
				t.Fatalf("LoadState error = %v, want one containing %q", err, tc.wanted)
			}
			if o.Step() != 0 || o.LR() != 1e-3 {
				t.Fatalf("a failed LoadState changed the optimizer: step %d lr %v", o.Step(), o.LR())
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		new  func() error
		want []string
	}{
		{"adam beta1", func() error { _, err := NewAdam(AdamConfig{Beta1: 1.5}); return err },
			[]string{"AdamConfig.Beta1 is 1.5: use a value in [0, 1)"}},
		{"adam all at once", func() error {
			_, err := NewAdam(AdamConfig{LR: -1, Beta2: 1, Eps: math.NaN(), WeightDecay: -0.1})
			return err
		}, []string{"AdamConfig.LR is -1", "AdamConfig.Beta2 is 1:", "AdamConfig.Eps is NaN", "AdamConfig.WeightDecay is -0.1"}},
		{"adamw", func() error { _, err := NewAdamW(AdamConfig{WeightDecay: math.Inf(1)}); return err },
			[]string{"AdamConfig.WeightDecay is +Inf: use a value >= 0"}},
		{"sgd no lr", func() error { _, err := NewSGD(SGDConfig{}); return err },
			[]string{"SGDConfig.LR is 0: set a learning rate > 0"}},
		{"sgd all at once", func() error {
			_, err := NewSGD(SGDConfig{LR: 0.1, Momentum: 1, Dampening: 2, WeightDecay: -1})
			return err
		}, []string{"SGDConfig.Momentum is 1: use a value in [0, 1)", "SGDConfig.Dampening is 2", "SGDConfig.WeightDecay is -1"}},
		{"sgd nesterov", func() error { _, err := NewSGD(SGDConfig{LR: 0.1, Nesterov: true}); return err },
			[]string{"SGDConfig.Nesterov is true with Momentum 0 and Dampening 0: Nesterov momentum needs Momentum > 0 and Dampening 0"}},
		{"lookup", func() error { _, err := Lookup("rmsprop", 0.1); return err },
			[]string{`optimizer "rmsprop" is unknown: use one of adam, adamw, sgd`}},
		{"lookup bad lr", func() error { _, err := Lookup("sgd", -1); return err },
			[]string{"SGDConfig.LR is -1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestDefaultsAndLookup(t *testing.T) {
	a, err := NewAdam(AdamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.Config(), (AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}); got != want {
		t.Errorf("Adam defaults = %+v, want %+v", got, want)
	}
	w, err := NewAdamW(AdamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Config().WeightDecay != 0.01 || w.Name() != "adamw" {
		t.Errorf("AdamW: name %q weight decay %v", w.Name(), w.Config().WeightDecay)
	}
	if o, err := Lookup("adam", -1); o != nil || err == nil {
		t.Errorf("Lookup(adam, -1) = %v, %v: want a nil Optimizer and an error", o, err)
	}
	for _, name := range []string{"sgd", "adam", "AdamW"} {
		o, err := Lookup(name, 0.5)
		if err != nil {
			t.Fatal(err)
		}
		if o.Name() != strings.ToLower(name) || o.LR() != 0.5 {
			t.Errorf("Lookup(%q) = %s lr %v", name, o.Name(), o.LR())
		}
	}
}

func TestProgrammingErrorsPanicClearly(t *testing.T) {
	newAdam := func(bind bool) *Adam {
		o, _ := NewAdam(AdamConfig{})
		if bind {
			if err := o.Bind(10, 20); err != nil {
				t.Fatal(err)
			}
		}
		return o
	}
	cases := []struct {
		name string
		f    func()
		want string
	}{
		{"unbound", func() { o := newAdam(false); o.Begin(); o.Update32(make([]float32, 2), make([]float32, 2), 0) }, "not bound"},
		{"no Begin", func() { newAdam(true).Update32(make([]float32, 2), make([]float32, 2), 10) }, "call Begin"},
		{"outside span", func() { o := newAdam(true); o.Begin(); o.Update32(make([]float32, 2), make([]float32, 2), 19) }, "offsets [19, 21) lie outside the bound span [10, 20)"},
		{"length mismatch", func() { o := newAdam(true); o.Begin(); o.Update64(make([]float64, 2), make([]float64, 3), 10) }, "2 params but 3 grads"},
		{"mixed dtypes", func() {
			o := newAdam(true)
			o.Begin()
			o.Update32(make([]float32, 2), make([]float32, 2), 10)
			o.Update64(make([]float64, 2), make([]float64, 2), 12)
		}, "the state is float32"},
		{"bad lr", func() { newAdam(false).SetLR(math.NaN()) }, "Adam.SetLR(NaN)"},
		{"clip", func() { ClipGradNorm32(nil, 0) }, "ClipGradNorm[float32]: maxNorm is 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, tc.want) {
					t.Fatalf("panic %v, want one containing %q", r, tc.want)
				}
			}()
			tc.f()
		})
	}
	o := newAdam(true)
	if err := o.Bind(0, 1); err == nil || !strings.Contains(err.Error(), "already bound to [10, 20)") {
		t.Errorf("second Bind: %v", err)
	}
	if err := newAdam(false).Bind(5, 2); err == nil {
		t.Errorf("Bind(5, 2) gave no error")
	}
}

// bitsEqual says whether a and b hold the same bits (NaNs included).
func bitsEqual[T float](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if bits(a[i]) != bits(b[i]) {
			return false
		}
	}
	return true
}

func bits[T float](x T) uint64 {
	if x, ok := any(x).(float32); ok {
		return uint64(math.Float32bits(x))
	}
	return math.Float64bits(float64(x))
}

// conv returns x converted to T, in a new slice.
func conv[T float](x []float64) []T {
	y := make([]T, len(x))
	narrow(y, x)
	return y
}

// update calls Update32 or Update64, whichever takes T.
func update[T float](o Optimizer, p, g []T, off int) {
	switch p := any(p).(type) {
	case []float32:
		o.Update32(p, any(g).([]float32), off)
	case []float64:
		o.Update64(p, any(g).([]float64), off)
	}
}

func statesEqual(a, b State) bool {
	if a.Step != b.Step || a.Lo != b.Lo || a.Hi != b.Hi || len(a.Buffers) != len(b.Buffers) || len(a.Scalars) != len(b.Scalars) {
		return false
	}
	for k, v := range a.Scalars {
		if w, ok := b.Scalars[k]; !ok || w != v {
			return false
		}
	}
	for k, v := range a.Buffers {
		if !bitsEqual(v, b.Buffers[k]) {
			return false
		}
	}
	return true
}
