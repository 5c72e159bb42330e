package nn_test

import (
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// torchLayerRef is what PyTorch 1.13 computed for one layer configuration
// (torchref_data_test.go, written by testdata/torch_layers.py): the output,
// the gradients of Σ out·fill(out, 2) with respect to the input ("x") and
// each parameter, and the buffers after the run.
type torchLayerRef struct {
	Out     []float64
	Grads   map[string][]float64
	Buffers map[string][]float64
}

// fill is torch_layers.py's: every input, parameter, buffer and output
// gradient of the references, exact in float64.
func fill(n, k int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64((i*7919+31*k)%200)/100 - 1
	}
	return v
}

// TestLayersMatchTorch runs each layer configuration of torch_layers.py on
// the same values as PyTorch and compares the output, every gradient and
// the BatchNorm buffers, in float64: the conventions a self-written
// reference can share with the code (rectangular kernels, strides and
// dilations, count_include_pad, the unbiased running variance, momentum (0
// included) and the cumulative average, BatchNorm1d over [N, C, L]) are PyTorch's.
func TestLayersMatchTorch(t *testing.T) {
	for _, c := range []struct {
		name   string
		shape  []int
		mode   module.Mode
		before int // runs before the measured one
		layer  func(b *module.Builder) func(*module.Step, *G.Node) *G.Node
	}{
		{"conv_rect", []int{2, 2, 5, 6}, module.Train, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewConv2d(b, "", nn.Conv2dConfig{In: 2, Out: 3, KernelHW: [2]int{3, 2}, StrideHW: [2]int{2, 1}, PaddingHW: [2]int{1, 0}, DilationHW: [2]int{1, 2}, InputGrad: true}).Forward
		}},
		{"conv_s2p1_nobias", []int{1, 2, 5, 5}, module.Train, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewConv2d(b, "", nn.Conv2dConfig{In: 2, Out: 2, Kernel: 3, Stride: 2, Padding: 1, NoBias: true, InputGrad: true}).Forward
		}},
		{"conv_d2p2", []int{1, 1, 4, 5}, module.Train, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewConv2d(b, "", nn.Conv2dConfig{In: 1, Out: 2, Kernel: 3, Padding: 2, Dilation: 2, InputGrad: true}).Forward
		}},
		// Grouped: depthwise with a depth multiplier of 2 and stride 2,
		// and 2 channels a group with a rectangular dilated kernel (the
		// direct path of nn/ops, conv_direct.go).
		{"conv_dw_x2_s2", []int{2, 3, 5, 6}, module.Train, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewConv2d(b, "", nn.Conv2dConfig{In: 3, Out: 6, Kernel: 3, Stride: 2, Padding: 1, Groups: 3, InputGrad: true}).Forward
		}},
		{"conv_g2_d2_5x5", []int{2, 4, 6, 5}, module.Train, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewConv2d(b, "", nn.Conv2dConfig{In: 4, Out: 6, KernelHW: [2]int{5, 3}, PaddingHW: [2]int{4, 1}, DilationHW: [2]int{2, 1}, Groups: 2, NoBias: true, InputGrad: true}).Forward
		}},
		{"maxpool_k3s2p1", []int{1, 2, 5, 5}, module.Train, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewMaxPool2d(b, "pool", nn.PoolConfig{Kernel: 3, Stride: 2, Padding: 1}).Forward
		}},
		{"avgpool_k3s2p1_incl", []int{1, 2, 5, 5}, module.Train, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewAvgPool2d(b, "pool", nn.PoolConfig{Kernel: 3, Stride: 2, Padding: 1}).Forward
		}},
		{"avgpool_k3s2p1_excl", []int{1, 2, 5, 5}, module.Train, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewAvgPool2d(b, "pool", nn.PoolConfig{Kernel: 3, Stride: 2, Padding: 1, ExcludePad: true}).Forward
		}},
		{"avgpool_k2", []int{1, 1, 5, 4}, module.Train, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewAvgPool2d(b, "pool", nn.PoolConfig{Kernel: 2}).Forward
		}},
		{"bn2d_train_m0.3", []int{3, 2, 2, 3}, module.Train, 1, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewBatchNorm2d(b, "", 2, nn.BatchNormMomentum(0.3)).Forward
		}},
		{"bn2d_momentum0", []int{3, 2, 2, 3}, module.Train, 1, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewBatchNorm2d(b, "", 2, nn.BatchNormMomentum(0)).Forward
		}},
		{"bn2d_cumulative", []int{3, 2, 2, 3}, module.Train, 2, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewBatchNorm2d(b, "", 2, nn.BatchNormCumulative()).Forward
		}},
		{"bn1d_len_train", []int{2, 3, 4}, module.Train, 1, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewBatchNorm1d(b, "", 3).Forward
		}},
		{"bn1d_eval", []int{4, 3}, module.Validate, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
			return nn.NewBatchNorm1d(b, "", 3, nn.BatchNormEps(1e-3)).Forward
		}},
	} {
		ref, ok := torchLayerRefs[c.name]
		if !ok {
			t.Fatalf("%s: no reference: run testdata/torch_layers.py", c.name)
		}
		checkLayer(t, c.name, ref, tensor.Float64, c.shape, c.mode, c.before, c.layer, 1e-12)
		if strings.HasPrefix(c.name, "conv_") {
			// float32 runs the AVX-512 kernels where the CPU has them.
			checkLayer(t, c.name+"/float32", ref, tensor.Float32, c.shape, c.mode, c.before, c.layer, 1e-5)
		}
	}
}

// checkLayer runs the layer that build declares, in dtype dt and mode, on
// torch_layers.py's values (fill: input k=1, weight k=10, bias k=11, γ
// times 1.5, running_mean k=20, running_var k=21 + 1.5,
// num_batches_tracked 2), before+1 times, and compares the output, the
// gradients of Σ out·fill(out, 2) and the buffers with ref within tol.
func checkLayer(t *testing.T, name string, ref torchLayerRef, dt tensor.Dtype, shape []int, mode module.Mode, before int,
	build func(b *module.Builder) func(*module.Step, *G.Node) *G.Node, tol float64) {
	t.Helper()
	x := tensor.New(tensor.Of(dt), tensor.WithShape(shape...))
	v := fill(x.Shape().TotalSize(), 1)
	set(x, func(i int) float64 { return v[i] })
	checkLayerOn(t, name, ref, x, true, mode, before, build, tol)
}

// checkLayerOn is checkLayer on the input x, whose gradient is compared
// only when inputGrad (token ids have none).
func checkLayerOn(t *testing.T, name string, ref torchLayerRef, x *tensor.Dense, inputGrad bool, mode module.Mode, before int,
	build func(b *module.Builder) func(*module.Step, *G.Node) *G.Node, tol float64) {
	t.Helper()
	dt := x.Dtype()
	var forward func(*module.Step, *G.Node) *G.Node
	m := newModel(t, dt, func(b *module.Builder) { forward = build(b) })
	setFill := func(d *tensor.Dense, k int, f func(float64) float64) {
		v := fill(d.Shape().TotalSize(), k)
		set(d, func(i int) float64 { return f(v[i]) })
	}
	same := func(x float64) float64 { return x }
	// torch_layers.py's values, in PyTorch's declaration order (weight
	// then bias; the buffers).
	for k, pname := range []string{"weight", "bias"} {
		if d, err := m.store.Tensor(pname); err == nil {
			f := same
			if pname == "weight" && d.Dims() == 1 { // BatchNorm's γ
				f = func(x float64) float64 { return x * 1.5 }
			}
			setFill(d, 10+k, f)
		}
	}
	if d, err := m.store.Tensor("running_mean"); err == nil {
		setFill(d, 20, same)
		v, _ := m.store.Tensor("running_var")
		setFill(v, 21, func(x float64) float64 { return x + 1.5 })
		n, _ := m.store.Tensor("num_batches_tracked")
		set(n, func(int) float64 { return 2 })
	}
	g := G.NewGraph()
	s := m.step(t, g, mode, x)
	out := forward(s, s.Input("x"))
	r := tensor.New(tensor.Of(dt), tensor.WithShape(out.Shape()...))
	setFill(r, 2, same)
	rn := G.NewTensor(g, dt, out.Dims(), G.WithShape(out.Shape()...), G.WithName("r"), G.WithValue(r))
	var wrt []*G.Node
	var names []string
	if inputGrad {
		wrt, names = append(wrt, s.Input("x")), append(names, "x")
	}
	for _, p := range s.UsedParams() {
		n, _ := s.Node(p)
		wrt, names = append(wrt, n), append(names, p)
	}
	if _, err := G.Grad(G.Must(G.Sum(G.Must(G.HadamardProd(out, rn)))), wrt...); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	for i := 0; i <= before; i++ {
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	closeTo(t, name+" output", vals(out.Value()), ref.Out, tol)
	if len(names) != len(ref.Grads) {
		t.Errorf("%s: gradients of %v, PyTorch's of %d tensors", name, names, len(ref.Grads))
	}
	for i, n := range wrt {
		gv, err := n.Grad()
		if err != nil {
			t.Fatalf("%s: gradient of %s: %v", name, names[i], err)
		}
		closeTo(t, name+" gradient of "+names[i], vals(gv), ref.Grads[names[i]], tol)
	}
	for bname, want := range ref.Buffers {
		closeTo(t, name+" "+bname, storeVals(t, m.store, bname), want, tol)
	}
}
