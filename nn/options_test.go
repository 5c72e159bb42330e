package nn_test

import (
	"fmt"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// refFor returns torch_options.py's reference for name in dtype dt.
func refFor(t *testing.T, name string, dt tensor.Dtype) torchLayerRef {
	t.Helper()
	ref, ok := torchOptionRefs[name+"/"+dt.String()]
	if !ok {
		t.Fatalf("%s/%v: no reference: run testdata/torch_options.py", name, dt)
	}
	return ref
}

// tolFor is the comparison tolerance against torch: float32 results are
// torch's float32 ones, computed in a different order.
func tolFor(dt tensor.Dtype) float64 {
	if dt == tensor.Float32 {
		return 2e-6
	}
	return 1e-13
}

// TestCrossEntropyLabelSmoothingMatchesTorch compares the loss and the
// logits' gradient with F.cross_entropy(weight=, ignore_index=-100,
// label_smoothing=) of torch 1.13 (torch_options.py), ignore_index given
// as row weight 0: among them a batch with rows whose class weighs 0,
// whose smoothing term torch keeps in the numerator but not the divisor.
func TestCrossEntropyLabelSmoothingMatchesTorch(t *testing.T) {
	w := nn.ClassWeights(2.0, 0.5, 0.0, 1.5, 3.0)
	for _, c := range []struct {
		name   string
		labels []float64
		opts   []nn.CrossEntropyOption
	}{
		{"ce_ls0.1", []float64{3, 0, 1, 4}, []nn.CrossEntropyOption{nn.LabelSmoothing(0.1)}},
		{"ce_ls1", []float64{3, 0, 1, 4}, []nn.CrossEntropyOption{nn.LabelSmoothing(1)}},
		{"ce_ls0.2_weight", []float64{3, 0, 1, 4}, []nn.CrossEntropyOption{nn.LabelSmoothing(0.2), w}},
		{"ce_ls0.3_weight_zero_class", []float64{3, 2, 1, 2}, []nn.CrossEntropyOption{w, nn.LabelSmoothing(0.3)}},
		{"ce_ls0.25_weight_ignore", []float64{3, -100, 1, 0}, []nn.CrossEntropyOption{nn.LabelSmoothing(0.25), w}},
		{"ce_ls0.15_ignore", []float64{-100, 0, 1, 4}, []nn.CrossEntropyOption{nn.LabelSmoothing(0.15)}},
	} {
		for _, dt := range dtypes {
			ref := refFor(t, c.name, dt)
			g := G.NewGraph()
			node := func(name string, f func(int) float64, shape ...int) *G.Node {
				d := tensor.New(tensor.Of(dt), tensor.WithShape(shape...))
				set(d, f)
				return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(d))
			}
			z0 := fill(20, 1)
			z := node("z", func(i int) float64 { return 3 * z0[i] }, 4, 5)
			labels := node("labels", func(i int) float64 { return c.labels[i] }, 4)
			var loss *G.Node
			if ignore := strings.Contains(c.name, "ignore"); ignore {
				rows := node("rows", func(i int) float64 {
					if c.labels[i] == -100 {
						return 0
					}
					return 1
				}, 4)
				loss = nn.CrossEntropyWeighted(z, labels, rows, c.opts...)
			} else {
				loss = nn.CrossEntropy(z, labels, c.opts...)
			}
			gradAndRun(t, c.name+" "+dt.String(), g, loss, z)
			closeTo(t, c.name+" "+dt.String()+" loss", vals(loss.Value()), ref.Out, tolFor(dt))
			gz, _ := z.Grad()
			closeTo(t, c.name+" "+dt.String()+" gradient", vals(gz), ref.Grads["x"], tolFor(dt))
		}
	}
}

// TestCrossEntropyOptionErrors: a smoothing outside [0, 1], class weights
// of the wrong count or sign, and a batch whose classes all weigh 0 are
// errors that name the value.
func TestCrossEntropyOptionErrors(t *testing.T) {
	for _, c := range []struct {
		opts   []nn.CrossEntropyOption
		labels []float64
		want   string
	}{
		{[]nn.CrossEntropyOption{nn.LabelSmoothing(1.5)}, []float64{0, 1}, "label smoothing is 1.5: want a value in [0, 1]"},
		{[]nn.CrossEntropyOption{nn.LabelSmoothing(-0.1)}, []float64{0, 1}, "label smoothing is -0.1"},
		{[]nn.CrossEntropyOption{nn.ClassWeights(1, 2)}, []float64{0, 1}, "2 class weights for logits (2, 3) of 3 classes"},
		{[]nn.CrossEntropyOption{nn.ClassWeights(1, -2, 1)}, []float64{0, 1}, "class weight -2 of class 1: want a finite weight ≥ 0"},
		{[]nn.CrossEntropyOption{nn.ClassWeights(1, 0, 0), nn.LabelSmoothing(0.1)}, []float64{1, 2}, "every kept row's class has class weight 0"},
	} {
		g := G.NewGraph()
		z := G.NewTensor(g, tensor.Float64, 2, G.WithShape(2, 3), G.WithName("z"),
			G.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{1, 2, 3, 3, 2, 1}))))
		l := G.NewTensor(g, tensor.Float64, 1, G.WithShape(2), G.WithName("l"),
			G.WithValue(tensor.New(tensor.WithShape(2), tensor.WithBacking(c.labels))))
		msg := panicOf(func() {
			loss := nn.CrossEntropy(z, l, c.opts...)
			vm := G.NewTapeMachine(g)
			defer vm.Close()
			if err := vm.RunAll(); err != nil {
				panic(err)
			}
			t.Errorf("%q: loss %v, no error", c.want, loss.Value())
		})
		if !strings.Contains(msg, c.want) {
			t.Errorf("got %q, want it to contain %q", msg, c.want)
		}
	}
}

type layerBuild = func(b *module.Builder) func(*module.Step, *G.Node) *G.Node

// layerOptionCases are torch_options.py's layer cases.
var layerOptionCases = []struct {
	name   string
	shape  []int
	mode   module.Mode
	before int
	layer  layerBuild
}{
	{"bn2d_notrack_train", []int{3, 2, 2, 3}, module.Train, 1, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewBatchNorm2d(b, "", 2, nn.BatchNormNoRunningStats()).Forward
	}},
	{"bn2d_notrack_eval", []int{3, 2, 2, 3}, module.Validate, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewBatchNorm2d(b, "", 2, nn.BatchNormNoRunningStats()).Forward
	}},
	{"bn1d_notrack_noaffine_eval", []int{4, 3}, module.Validate, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewBatchNorm1d(b, "", 3, nn.BatchNormNoAffine(), nn.BatchNormNoRunningStats()).Forward
	}},
	{"bn1d_notrack_len_eval", []int{2, 3, 4}, module.Validate, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewBatchNorm1d(b, "", 3, nn.BatchNormEps(1e-3), nn.BatchNormNoRunningStats()).Forward
	}},
	{"maxpool_k3s2_ceil", []int{1, 2, 6, 6}, module.Train, 0, pool(true, nn.PoolConfig{Kernel: 3, Stride: 2, CeilMode: true})},
	// ceil gives 4 windows, the last starting at the far padding: torch drops it.
	{"maxpool_k2s2p1_ceil", []int{1, 1, 5, 5}, module.Train, 0, pool(true, nn.PoolConfig{Kernel: 2, Stride: 2, Padding: 1, CeilMode: true})},
	{"avgpool_k3s2p1_ceil_incl", []int{1, 2, 6, 6}, module.Train, 0, pool(false, nn.PoolConfig{Kernel: 3, Stride: 2, Padding: 1, CeilMode: true})},
	{"avgpool_k3s2p1_ceil_excl", []int{1, 2, 6, 6}, module.Train, 0, pool(false, nn.PoolConfig{Kernel: 3, Stride: 2, Padding: 1, CeilMode: true, ExcludePad: true})},
	{"avgpool_k2_ceil", []int{1, 1, 5, 5}, module.Train, 0, pool(false, nn.PoolConfig{Kernel: 2, CeilMode: true})},
	{"avgpool_k2s2p1_ceil_incl", []int{1, 1, 5, 5}, module.Train, 0, pool(false, nn.PoolConfig{Kernel: 2, Stride: 2, Padding: 1, CeilMode: true})},
	{"conv_g2", []int{2, 4, 5, 5}, module.Train, 0, conv(nn.Conv2dConfig{In: 4, Out: 6, Kernel: 3, Padding: 1, Groups: 2})},
	{"conv_depthwise_s2", []int{1, 3, 6, 6}, module.Train, 0, conv(nn.Conv2dConfig{In: 3, Out: 3, Kernel: 3, Stride: 2, Padding: 1, Groups: 3, NoBias: true})},
	{"conv_dw_mult2_rect", []int{1, 2, 5, 6}, module.Train, 0, conv(nn.Conv2dConfig{In: 2, Out: 4, KernelHW: [2]int{3, 2}, DilationHW: [2]int{1, 2}, Groups: 2})},
}

func conv(c nn.Conv2dConfig) layerBuild {
	c.InputGrad = true
	return func(b *module.Builder) func(*module.Step, *G.Node) *G.Node { return nn.NewConv2d(b, "", c).Forward }
}

func pool(isMax bool, c nn.PoolConfig) layerBuild {
	return func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		if isMax {
			return nn.NewMaxPool2d(b, "pool", c).Forward
		}
		return nn.NewAvgPool2d(b, "pool", c).Forward
	}
}

// TestLayerOptionsMatchTorch runs each layer case of torch_options.py in
// float64 and float32 and compares the output, the gradients of the input
// and every parameter, the buffers, and the names and shapes of the
// parameter store's tensors with torch's state_dict.
func TestLayerOptionsMatchTorch(t *testing.T) {
	for _, c := range layerOptionCases {
		for _, dt := range dtypes {
			checkLayer(t, c.name+"/"+dt.String(), refFor(t, c.name, dt), dt, c.shape, c.mode, c.before, c.layer, tolFor(dt))
		}
		var got []string
		m := newModel(t, tensor.Float64, func(b *module.Builder) { c.layer(b) })
		for _, e := range m.store.Entries() {
			got = append(got, fmt.Sprintf("%s [%s]", e.Name, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(e.Shape)), ", "), "[]")))
		}
		if want := torchStateDicts[c.name]; strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("%s: the store holds %q, torch's state_dict %q", c.name, got, want)
		}
	}
}

// TestBatchNormNoRunningStatsErrors: combined with settings of running
// statistics it is a build error naming them, and a batch of one value per
// channel in eval is an error (it normalises with the batch's statistics).
func TestBatchNormNoRunningStatsErrors(t *testing.T) {
	for _, opt := range []nn.BatchNormOption{nn.BatchNormCumulative(), nn.BatchNormMomentum(0)} {
		b := module.NewBuilder(tensor.Float64)
		nn.NewBatchNorm2d(b, "bn", 2, nn.BatchNormNoRunningStats(), opt)
		if _, err := b.Specs(); err == nil || !strings.Contains(err.Error(), "BatchNormNoRunningStats is given with BatchNormMomentum(0) or BatchNormCumulative") {
			t.Errorf("Specs: %v", err)
		}
	}
	var forward func(*module.Step, *G.Node) *G.Node
	m := newModel(t, tensor.Float64, func(b *module.Builder) {
		forward = nn.NewBatchNorm1d(b, "bn", 3, nn.BatchNormNoRunningStats()).Forward
	})
	x := tensor.New(tensor.WithShape(1, 3), tensor.WithBacking([]float64{1, 2, 3}))
	msg := panicOf(func() { forward(m.step(t, G.NewGraph(), module.Validate, x), nil) })
	if msg == "" {
		t.Fatal("nil input: no panic")
	}
	msg = panicOf(func() {
		s := m.step(t, G.NewGraph(), module.Validate, x)
		forward(s, s.Input("x"))
	})
	if !strings.Contains(msg, "without running statistics normalises with the batch's in every mode and needs more than one value per channel") {
		t.Errorf("batch of 1 in eval: %q", msg)
	}
}

// TestConv2dGroupsErrors: groups that do not divide the channels, or are
// negative, are build errors naming the values.
func TestConv2dGroupsErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  nn.Conv2dConfig
		want string
	}{
		{nn.Conv2dConfig{In: 6, Out: 4, Kernel: 3, Groups: 4}, "Groups=4 with In=6, Out=4: In and Out must both be multiples of Groups"},
		{nn.Conv2dConfig{In: 4, Out: 6, Kernel: 3, Groups: 4}, "Groups=4 with In=4, Out=6"},
		{nn.Conv2dConfig{In: 4, Out: 4, Kernel: 3, Groups: -2}, "Groups=-2: use 1 or more"},
	} {
		b := module.NewBuilder(tensor.Float32)
		nn.NewConv2d(b, "conv", c.cfg)
		if _, err := b.Specs(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
}
