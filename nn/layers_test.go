package nn_test

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

func TestLinear(t *testing.T) {
	for _, dt := range dtypes {
		var fc1, fc2 *nn.Linear
		m := newModel(t, dt, func(b *module.Builder) {
			fc1 = nn.NewLinear(b, "fc1", 5, 4, nn.LinearReLU())
			fc2 = nn.NewLinear(b.Scope("head"), "fc", 4, 3, nn.LinearNoBias())
		})
		if fc1.Weight != "fc1.weight" || fc1.Bias != "fc1.bias" || fc2.Weight != "head.fc.weight" || fc2.Bias != "" {
			t.Fatalf("names: %q %q %q %q", fc1.Weight, fc1.Bias, fc2.Weight, fc2.Bias)
		}
		// PyTorch's initialisation: U(±1/√in) for weight and bias.
		for _, p := range []struct {
			name string
			n    int
			in   int
		}{{"fc1.weight", 20, 5}, {"fc1.bias", 4, 5}, {"head.fc.weight", 12, 4}} {
			v := storeVals(t, m.store, p.name)
			if len(v) != p.n {
				t.Fatalf("%s has %d elements, want %d", p.name, len(v), p.n)
			}
			bound, nonzero := 1/math.Sqrt(float64(p.in)), 0
			for _, e := range v {
				if math.Abs(e) > bound {
					t.Fatalf("%s element %v outside ±%v", p.name, e, bound)
				}
				if e != 0 {
					nonzero++
				}
			}
			if nonzero < p.n-1 {
				t.Fatalf("%s is not initialised: %v", p.name, v)
			}
		}
		if got := m.b.Layers(); len(got) != 2 || !reflect.DeepEqual(got[0], module.LayerInfo{Name: "fc1", Type: "Linear", Params: 24}) || got[1].Name != "head.fc" || got[1].Params != 12 {
			t.Fatalf("layers %+v", got)
		}
		// The gradient check below was tuned (clear of ReLU kinks) on the
		// weights drawn for the old [in, out] layout: keep that function.
		transposeParam(t, m.store, "fc1.weight", 5, 4)
		transposeParam(t, m.store, "head.fc.weight", 4, 3)
		forward := func(s *module.Step, x *G.Node) *G.Node { return fc2.Forward(s, fc1.Forward(s, x)) }
		x := randT(dt, 1, -1, 1, 3, 5)
		// By hand: relu(x·W1ᵀ + b1)·W2ᵀ, W [out, in] as in PyTorch.
		w1, b1, w2, xv := storeVals(t, m.store, "fc1.weight"), storeVals(t, m.store, "fc1.bias"), storeVals(t, m.store, "head.fc.weight"), vals(x)
		var want []float64
		for r := 0; r < 3; r++ {
			h := make([]float64, 4)
			for j := range h {
				h[j] = b1[j]
				for k := 0; k < 5; k++ {
					h[j] += xv[r*5+k] * w1[j*5+k]
				}
				h[j] = math.Max(h[j], 0)
			}
			for j := 0; j < 3; j++ {
				s := 0.0
				for k := 0; k < 4; k++ {
					s += h[k] * w2[j*4+k]
				}
				want = append(want, s)
			}
		}
		closeTo(t, "output", m.run(t, module.Train, x, forward), want, 1e-5)
		m.gradcheckLayer(t, "Linear/"+dt.String(), module.Train, x, false, forward)
	}
}

// transposeParam rewrites a [cols, rows] parameter with its values read as
// [rows, cols] and transposed.
func transposeParam(t *testing.T, st *module.Store, name string, rows, cols int) {
	t.Helper()
	v := storeVals(t, st, name)
	d, err := st.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			if err := d.SetAt(cast(d.Dtype(), v[r*cols+c]), c, r); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func cast(dt tensor.Dtype, v float64) any {
	if dt == tensor.Float32 {
		return float32(v)
	}
	return v
}

func TestLinearInputGrad(t *testing.T) {
	var fc *nn.Linear
	m := newModel(t, tensor.Float64, func(b *module.Builder) { fc = nn.NewLinear(b, "fc", 3, 2, nn.LinearInputGrad()) })
	m.gradcheckLayer(t, "Linear/input", module.Train, randT(tensor.Float64, 1, -1, 1, 2, 3), true, fc.Forward)
}

func TestConv2d(t *testing.T) {
	for _, dt := range dtypes {
		for _, c := range []nn.Conv2dConfig{
			{In: 2, Out: 3, Kernel: 3, Padding: 1},
			{In: 2, Out: 2, Kernel: 3, Stride: 2, Dilation: 2, Padding: 2, NoBias: true, InputGrad: true},
			{In: 2, Out: 3, KernelHW: [2]int{1, 3}, StrideHW: [2]int{2, 1}, InputGrad: true},
		} {
			var conv *nn.Conv2d
			m := newModel(t, dt, func(b *module.Builder) { conv = nn.NewConv2d(b, "conv", c) })
			m.gradcheckLayer(t, fmt.Sprintf("Conv2d%+v/%v", c, dt), module.Train, randT(dt, 1, -1, 1, 2, 2, 5, 6), c.InputGrad, conv.Forward)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	b := module.NewBuilder(tensor.Float32)
	nn.NewLinear(b, "fc", 0, 3)
	nn.NewConv2d(b, "conv", nn.Conv2dConfig{In: 1, Out: 2})
	nn.NewBatchNorm2d(b, "bn", 0)
	nn.NewMaxPool2d(b, "pool", nn.PoolConfig{Kernel: 2, Padding: 2})
	nn.NewDropout(b, "drop", 1.5)
	nn.NewResNet(b.Scope("net"), nn.ResNetConfig{Widths: []int{16, 0}, BlocksPerStage: -1})
	_, err := b.Specs()
	if err == nil {
		t.Fatal("bad layers accepted")
	}
	for _, want := range []string{
		`nn.Linear "fc" has in=0, out=3`,
		`nn.Conv2d "conv": [kernel [0 0]: set Kernel (or KernelHW) to 1 or more]`,
		`nn.BatchNorm2d "bn" has 0 channels`,
		`nn.MaxPool2d "pool": kernel 2, stride 0, padding 2`,
		`nn.Dropout "drop" has p=1.5`,
		"Widths[1] is 0", "BlocksPerStage is -1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors %q do not mention %q", err, want)
		}
	}
}

// Shape errors at graph-build time name the layer and both shapes.
func TestForwardShapeErrors(t *testing.T) {
	var fc *nn.Linear
	var conv *nn.Conv2d
	var bn *nn.BatchNorm
	var bn1 *nn.BatchNorm
	m := newModel(t, tensor.Float32, func(b *module.Builder) {
		fc = nn.NewLinear(b.Scope("head"), "fc", 8, 2)
		conv = nn.NewConv2d(b, "conv", nn.Conv2dConfig{In: 3, Out: 4, Kernel: 5})
		bn = nn.NewBatchNorm2d(b, "bn", 4)
		bn1 = nn.NewBatchNorm1d(b, "bn1", 4)
	})
	for _, c := range []struct {
		shape []int
		f     func(s *module.Step, x *G.Node)
		want  string
	}{
		{[]int{2, 7}, func(s *module.Step, x *G.Node) { fc.Forward(s, x) }, `nn.Linear "head.fc": input has shape (2, 7), want [batch, 8]`},
		{[]int{2, 2, 2, 2}, func(s *module.Step, x *G.Node) { fc.Forward(s, x) }, "flatten it first with nn.Flatten"},
		{[]int{2, 1, 8, 8}, func(s *module.Step, x *G.Node) { conv.Forward(s, x) }, `nn.Conv2d "conv": input has shape (2, 1, 8, 8), want [batch, 3, height, width]`},
		{[]int{2, 3, 4, 4}, func(s *module.Step, x *G.Node) { conv.Forward(s, x) }, `nn.Conv2d "conv": Conv2d input (2, 3, 4, 4) is too small for a 5x5 kernel`},
		{[]int{2, 3, 4, 4}, func(s *module.Step, x *G.Node) { bn.Forward(s, x) }, `nn.BatchNorm2d "bn": input has shape (2, 3, 4, 4), want [batch, 4, height, width]`},
		{[]int{2, 4, 4, 4}, func(s *module.Step, x *G.Node) { bn1.Forward(s, x) }, `nn.BatchNorm1d "bn1": input has shape (2, 4, 4, 4), want [batch, 4] or [batch, 4, length]`},
		{[]int{1, 4}, func(s *module.Step, x *G.Node) { bn1.Forward(s, x) }, "needs more than one value per channel"},
	} {
		x := tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(c.shape...))
		got := panicOf(func() {
			s := m.step(t, G.NewGraph(), module.Train, x)
			c.f(s, s.Input("x"))
		})
		if !strings.Contains(got, c.want) {
			t.Errorf("input %v: panic %q, want it to contain %q", c.shape, got, c.want)
		}
	}
}

// Training graphs update the running statistics in the store, at every run;
// an eval graph of the same store then normalises with exactly those
// buffers: checked by hand.
func TestBatchNormTrainThenEval(t *testing.T) {
	for _, dt := range dtypes {
		var bn *nn.BatchNorm
		m := newModel(t, dt, func(b *module.Builder) { bn = nn.NewBatchNorm2d(b, "bn", 3, nn.BatchNormMomentum(0.5)) })
		m.randomize(2, 0.5, 1.5)
		if bn.Mean != "bn.running_mean" || bn.Var != "bn.running_var" || bn.Count != "bn.num_batches_tracked" {
			t.Fatalf("buffer names %q %q %q", bn.Mean, bn.Var, bn.Count)
		}
		x := randT(dt, 1, 2, 6, 4, 3, 3, 3)
		g := G.NewGraph()
		s := m.step(t, g, module.Train, x)
		bn.Forward(s, s.Input("x"))
		vm := G.NewTapeMachine(g)
		for i := 0; i < 2; i++ {
			if err := vm.RunAll(); err != nil {
				t.Fatal(err)
			}
			vm.Reset()
		}
		vm.Close()
		// Two updates with momentum 0.5 from (0, 1): running = 0.75·batch
		// (+ 0.25·1 for the variance), the variance unbiased.
		xv := vals(x)
		mean, uvar := make([]float64, 3), make([]float64, 3)
		for c := 0; c < 3; c++ {
			var s, s2 float64
			for n := 0; n < 4; n++ {
				for _, v := range xv[(n*3+c)*9 : (n*3+c+1)*9] {
					s += v
				}
			}
			mean[c] = s / 36
			for n := 0; n < 4; n++ {
				for _, v := range xv[(n*3+c)*9 : (n*3+c+1)*9] {
					s2 += (v - mean[c]) * (v - mean[c])
				}
			}
			uvar[c] = s2 / 35
		}
		wantMean, wantVar := make([]float64, 3), make([]float64, 3)
		for c := range wantMean {
			wantMean[c] = 0.75 * mean[c]
			wantVar[c] = 0.25 + 0.75*uvar[c]
		}
		tol := 1e-5
		closeTo(t, "running_mean", storeVals(t, m.store, "bn.running_mean"), wantMean, tol)
		closeTo(t, "running_var", storeVals(t, m.store, "bn.running_var"), wantVar, tol)
		closeTo(t, "num_batches_tracked", storeVals(t, m.store, "bn.num_batches_tracked"), []float64{2}, 0)

		x2 := randT(dt, 5, -1, 1, 2, 3, 2, 2)
		got := m.run(t, module.Validate, x2, bn.Forward)
		gamma, beta := storeVals(t, m.store, "bn.weight"), storeVals(t, m.store, "bn.bias")
		want := make([]float64, 0, 24)
		for i, v := range vals(x2) {
			c := (i / 4) % 3
			want = append(want, gamma[c]*(v-wantMean[c])/math.Sqrt(wantVar[c]+1e-5)+beta[c])
		}
		closeTo(t, "eval output", got, want, tol)
		closeTo(t, "eval leaves num_batches_tracked", storeVals(t, m.store, "bn.num_batches_tracked"), []float64{2}, 0)
	}
}

func TestBatchNormGrad(t *testing.T) {
	for _, dt := range dtypes {
		for _, mode := range []module.Mode{module.Train, module.Validate} {
			var bn2, bn1, bnNA *nn.BatchNorm
			m := newModel(t, dt, func(b *module.Builder) {
				bn2 = nn.NewBatchNorm2d(b, "bn2", 3)
				bn1 = nn.NewBatchNorm1d(b, "bn1", 4)
				bnNA = nn.NewBatchNorm1d(b, "bnna", 2, nn.BatchNormNoAffine(), nn.BatchNormEps(1e-3))
			})
			m.randomize(3, 0.5, 1.5)
			m.gradcheckLayer(t, fmt.Sprintf("BatchNorm2d/%v/%v", mode, dt), mode, randT(dt, 1, -2, 2, 2, 3, 3, 2), false, bn2.ForwardReLU)
			m.gradcheckLayer(t, fmt.Sprintf("BatchNorm1d/%v/%v", mode, dt), mode, randT(dt, 2, -2, 2, 5, 4), false, bn1.Forward)
			r := m.gradcheckLayer(t, fmt.Sprintf("BatchNorm1d/noaffine/%v/%v", mode, dt), mode, randT(dt, 3, -2, 2, 3, 2, 4), true, bnNA.Forward)
			if r.Checked != 24 {
				t.Errorf("no-affine BatchNorm1d checked %d elements, want the 24 of the input", r.Checked)
			}
		}
	}
}

func TestPoolsFlattenReLU(t *testing.T) {
	for _, dt := range dtypes {
		var mp, ap *nn.Pool2d
		var gap *nn.GlobalAvgPool2d
		var fl *nn.Flatten
		var relu *nn.ReLU
		m := newModel(t, dt, func(b *module.Builder) {
			mp = nn.NewMaxPool2d(b, "maxpool", nn.PoolConfig{Kernel: 3, Stride: 2, Padding: 1})
			ap = nn.NewAvgPool2d(b, "avgpool", nn.PoolConfig{Kernel: 2})
			gap = nn.NewGlobalAvgPool2d(b, "gap")
			fl = nn.NewFlatten(b, "flatten")
			relu = nn.NewReLU(b, "relu")
		})
		x := randT(dt, 1, -1, 1, 2, 2, 7, 6)
		// Each layer on its own, input gradients included.
		for _, c := range []struct {
			name string
			f    func(s *module.Step, x *G.Node) *G.Node
		}{
			{"MaxPool2d", mp.Forward}, {"AvgPool2d", ap.Forward}, {"GlobalAvgPool2d", gap.Forward},
			{"Flatten", fl.Forward}, {"ReLU", relu.Forward},
		} {
			m.gradcheckLayer(t, c.name+"/"+dt.String(), module.Train, x, true, c.f)
		}
		if got := m.b.Layers(); len(got) != 5 || got[0].Type != "MaxPool2d" || got[2].Type != "GlobalAvgPool2d" {
			t.Fatalf("layers %+v", got)
		}
	}
}

func TestDropout(t *testing.T) {
	for _, dt := range dtypes {
		var d *nn.Dropout
		m := newModel(t, dt, func(b *module.Builder) { d = nn.NewDropout(b, "drop", 0.25) })
		x := randT(dt, 1, 1, 2, 50, 40)
		g := G.NewGraph()
		s := m.step(t, g, module.Validate, x)
		if y := d.Forward(s, s.Input("x")); y != s.Input("x") {
			t.Fatalf("eval Dropout added %v to the graph: want the input itself", y)
		}
		got := m.run(t, module.Train, x, d.Forward)
		kept := 0
		for i, v := range got {
			if v != 0 {
				kept++
				closeTo(t, "kept element", []float64{v}, []float64{vals(x)[i] / 0.75}, 1e-6)
			}
		}
		if frac := float64(kept) / 2000; math.Abs(frac-0.75) > 5*math.Sqrt(0.25*0.75/2000) {
			t.Fatalf("kept %.3f of elements, want 0.75", frac)
		}
	}
}

// A layer fed from the batch (directly or through a reshape) builds no
// input-gradient op; a layer fed from another layer does.
func TestInputGradSkippedForBatchInputs(t *testing.T) {
	var fc1, fc2 *nn.Linear
	var conv *nn.Conv2d
	m := newModel(t, tensor.Float32, func(b *module.Builder) {
		conv = nn.NewConv2d(b, "conv", nn.Conv2dConfig{In: 1, Out: 2, Kernel: 3})
		fc1 = nn.NewLinear(b, "fc1", 16, 4)
		fc2 = nn.NewLinear(b, "fc2", 4, 2)
	})
	g := G.NewGraph()
	s := m.step(t, g, module.Train, randT(tensor.Float32, 1, 0, 1, 2, 1, 4, 4))
	x := s.Input("x")
	flat := must(G.Reshape(x, []int{2, 16}))
	out := fc2.Forward(s, fc1.Forward(s, flat))
	c := conv.Forward(s, x)
	loss := must(G.Add(nn.CrossEntropy(out, constLabels(g, tensor.Float32, 2)), must(G.Sum(must(G.Reshape(c, []int{16}))))))
	var params G.Nodes
	for _, p := range s.UsedParams() {
		n, _ := s.Node(p)
		params = append(params, n)
	}
	if _, err := G.Grad(loss, params...); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, n := range g.AllNodes() {
		if n.Op() != nil {
			k := n.Op().String()
			if i := strings.Index(k, "#"); i > 0 {
				kinds[k[:i]]++
			}
		}
	}
	if kinds["LinearGradInput"] != 1 || kinds["Conv2dGradInput"] != 0 || kinds["LinearGradWeight"] != 2 {
		t.Fatalf("gradient ops %v: want one LinearGradInput (fc2's), no Conv2dGradInput, two LinearGradWeight", kinds)
	}
}

func must(n *G.Node, err error) *G.Node {
	if err != nil {
		panic(err)
	}
	return n
}

// With a run key bound to the step (the trainer's epoch and batch), a
// dropout mask depends on the key alone, not on how many runs came before:
// a run resumed from a checkpoint draws the masks the uninterrupted run drew.
func TestDropoutMasksFollowTheRunKey(t *testing.T) {
	var d *nn.Dropout
	m := newModel(t, tensor.Float64, func(b *module.Builder) { d = nn.NewDropout(b, "drop", 0.5) })
	x := randT(tensor.Float64, 1, 1, 4, 16)
	g := G.NewGraph()
	s := m.step(t, g, module.Train, x)
	var key uint64
	s.SetRunKey(&key)
	var yv G.Value
	G.Read(d.Forward(s, s.Input("x")), &yv)
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	mask := func(k uint64) string {
		key = k
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		vm.Reset()
		var b strings.Builder
		for _, v := range yv.Data().([]float64) {
			if v == 0 {
				b.WriteByte('0')
			} else {
				b.WriteByte('1')
			}
		}
		return b.String()
	}
	first := mask(7)
	other := mask(8)
	mask(9)
	if again := mask(7); again != first {
		t.Fatalf("key 7 after other runs gave mask %s, first time %s", again, first)
	}
	if other == first {
		t.Fatalf("keys 7 and 8 gave the same mask %s", first)
	}
}
