package nn_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// PyTorch 1.13 counts for the same architecture (conv3x3 1→16, BasicBlocks
// 16-32-64 with 1x1 conv + BN shortcuts, Linear 64→10), printed once with
// sum(p.numel() for p in m.parameters()), the same over m.buffers(), and
// len(m.state_dict()).
func TestResNetLayoutMatchesTorch(t *testing.T) {
	for _, c := range []struct {
		blocks                   int
		params, buffers, tensors int
	}{{1, 77754, 681, 56}, {3, 272186, 1589, 128}} {
		var r *nn.ResNet
		m := newModel(t, tensor.Float32, func(b *module.Builder) { r = nn.NewResNet(b, nn.ResNetConfig{BlocksPerStage: c.blocks}) })
		if m.store.NumParams() != c.params || m.store.Len()-m.store.NumParams() != c.buffers || len(m.store.Entries()) != c.tensors {
			t.Errorf("blocks %d: %d params, %d buffer elements, %d tensors; PyTorch has %d, %d, %d", c.blocks,
				m.store.NumParams(), m.store.Len()-m.store.NumParams(), len(m.store.Entries()), c.params, c.buffers, c.tensors)
		}
		for _, name := range []string{"conv1.weight", "bn1.running_var", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
			"layer2.0.downsample.1.num_batches_tracked", "layer3.0.bn2.bias", "fc.weight", "fc.bias"} {
			if _, ok := m.store.Lookup(name); !ok {
				t.Errorf("blocks %d: no tensor %q", c.blocks, name)
			}
		}
		if _, ok := m.store.Lookup("layer1.0.downsample.0.weight"); ok {
			t.Error("the 16→16 stride-1 block has a projection shortcut: want identity")
		}
		if r.MinSize() != 4 {
			t.Errorf("MinSize %d, want 4", r.MinSize())
		}
	}
}

// resnetStep builds the training graph of a ResNet the way the trainer
// does: Builder → Store → Step → forward → loss → Grad → TapeMachine.
func resnetStep(t testing.TB, dt tensor.Dtype, cfg nn.ResNetConfig, batch, side int, mode module.Mode) (*module.Store, *G.ExprGraph, *G.Node, *G.Node, G.Nodes, *G.Node, *G.Node) {
	t.Helper()
	b := module.NewBuilder(dt)
	r := nn.NewResNet(b, cfg)
	specs, err := b.Specs()
	if err != nil {
		t.Fatal(err)
	}
	st, err := module.NewStore(specs, dt, 42)
	if err != nil {
		t.Fatal(err)
	}
	in := cfg.InChannels
	if in == 0 {
		in = 1
	}
	g := G.NewGraph()
	s := module.NewStep(g, mode, st, batch, []module.StepInput{{Name: "x", Shape: []int{in, side, side}}, {Name: "y", Shape: nil}}, 3)
	x := randT(dt, 1, 0, 1, batch, in, side, side)
	y := tensor.New(tensor.Of(dt), tensor.WithShape(batch))
	set(y, func(i int) float64 { return float64((3 * i) % 10) })
	if err := G.Let(s.Input("x"), x); err != nil {
		t.Fatal(err)
	}
	if err := G.Let(s.Input("y"), y); err != nil {
		t.Fatal(err)
	}
	logits := r.Forward(s, s.Input("x"))
	loss := nn.CrossEntropy(logits, s.Input("y"))
	acc := nn.Accuracy(logits, s.Input("y"))
	var grads G.Nodes
	if mode == module.Train {
		params := make(G.Nodes, 0, len(s.UsedParams()))
		for _, p := range s.UsedParams() {
			n, _ := s.Node(p)
			params = append(params, n)
		}
		if grads, err = G.Grad(loss, params...); err != nil {
			t.Fatal(err)
		}
	}
	return st, g, logits, loss, grads, acc, s.Input("x")
}

func TestResNet8ThroughModule(t *testing.T) {
	for _, dt := range dtypes {
		st, g, logits, loss, grads, acc, _ := resnetStep(t, dt, nn.ResNetConfig{}, 2, 28, module.Train)
		if !logits.Shape().Eq(tensor.Shape{2, 10}) {
			t.Fatalf("logits shape %v, want (2, 10)", logits.Shape())
		}
		if len(grads) != 29 { // every parameter tensor: 56 state tensors less 3 buffers of each of 9 BatchNorms
			t.Fatalf("%d gradients, want 29", len(grads))
		}
		vm := G.NewTapeMachine(g)
		for run := 0; run < 2; run++ {
			if err := vm.RunAll(); err != nil {
				t.Fatal(err)
			}
			l := vals(loss.Value())[0]
			// Ten classes, small random logits: the loss is near log 10.
			if math.IsNaN(l) || math.IsInf(l, 0) || l < 0.5 || l > 5 {
				t.Fatalf("%v run %d: loss %v", dt, run, l)
			}
			if a := vals(acc.Value())[0]; a < 0 || a > 1 {
				t.Fatalf("accuracy %v", a)
			}
			for i, gn := range grads {
				var norm float64
				for _, v := range vals(gn.Value()) {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						t.Fatalf("gradient %d has %v", i, v)
					}
					norm += v * v
				}
				if norm == 0 {
					t.Fatalf("gradient %d (%v) is all zero", i, gn)
				}
			}
			vm.Reset()
		}
		vm.Close()
		if n := storeVals(t, st, "layer3.0.bn2.num_batches_tracked"); n[0] != 2 {
			t.Fatalf("two training runs counted %v batches", n[0])
		}
		// The eval graph of the same store builds and runs on running stats.
		_, ge, le, _, _, _, _ := resnetStep(t, dt, nn.ResNetConfig{}, 3, 28, module.Validate)
		vm = G.NewTapeMachine(ge)
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals(le.Value()) {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("eval logits %v", vals(le.Value()))
			}
		}
		vm.Close()
	}
}

// Every parameter of a small ResNet, through BatchNorm in training mode,
// residual additions and the classifier, against central differences in
// float64. In float32, differences of a whole network cross too many ReLU
// kinks to be a sharp test (each layer has its own float32 check); there the
// symbolic gradients must instead match the verified float64 ones.
func TestResNetGrad(t *testing.T) {
	cfg := nn.ResNetConfig{InChannels: 2, NumClasses: 3, Widths: []int{2, 3}}
	grads := map[tensor.Dtype][][]float64{}
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		var r *nn.ResNet
		m := newModel(t, dt, func(b *module.Builder) { r = nn.NewResNet(b, cfg) })
		x := randT(dt, 1, -1, 1, 3, 2, 5, 4)
		if dt == tensor.Float64 {
			res := m.gradcheckLayer(t, "ResNet/"+dt.String(), module.Train, x, false, r.Forward)
			if res.Checked+res.Skipped != m.store.NumParams() {
				t.Fatalf("checked %d + skipped %d elements, the network has %d parameters", res.Checked, res.Skipped, m.store.NumParams())
			}
		}
		g := G.NewGraph()
		s := m.step(t, g, module.Train, x)
		out := r.Forward(s, s.Input("x"))
		loss := nn.CrossEntropy(out, constLabels(g, dt, 3))
		var params G.Nodes
		for _, p := range s.UsedParams() {
			n, _ := s.Node(p)
			params = append(params, n)
		}
		gn, err := G.Grad(loss, params...)
		if err != nil {
			t.Fatal(err)
		}
		vm := G.NewTapeMachine(g)
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		for _, n := range gn {
			grads[dt] = append(grads[dt], vals(n.Value()))
		}
		vm.Close()
	}
	for i := range grads[tensor.Float64] {
		want, got := grads[tensor.Float64][i], grads[tensor.Float32][i]
		scale := 0.0
		for _, v := range want {
			scale = math.Max(scale, math.Abs(v))
		}
		for j := range want {
			if math.Abs(got[j]-want[j]) > 1e-3*scale+1e-6 {
				t.Fatalf("parameter %d element %d: float32 gradient %v, float64 %v", i, j, got[j], want[j])
			}
		}
	}
}

func constLabels(g *G.ExprGraph, dt tensor.Dtype, n int) *G.Node {
	y := tensor.New(tensor.Of(dt), tensor.WithShape(n))
	set(y, func(i int) float64 { return float64(i % 3) })
	return G.NewVector(g, dt, G.WithShape(n), G.WithName("labels"), G.WithValue(y))
}

func TestBasicBlockIdentityGrad(t *testing.T) {
	var k *nn.BasicBlock
	m := newModel(t, tensor.Float64, func(b *module.Builder) { k = nn.NewBasicBlock(b, "block", 2, 2, 1) })
	m.randomize(5, 0.5, 1.5)
	m.gradcheckLayer(t, "BasicBlock", module.Train, randT(tensor.Float64, 1, -1, 1, 2, 2, 4, 3), false, k.Forward)
	if _, ok := m.store.Lookup("block.downsample.0.weight"); ok {
		t.Fatal("identity block has a projection")
	}
}

func TestResNetInputErrors(t *testing.T) {
	var r *nn.ResNet
	m := newModel(t, tensor.Float32, func(b *module.Builder) { r = nn.NewResNet(b, nn.ResNetConfig{}) })
	for _, c := range []struct {
		shape []int
		want  string
	}{
		{[]int{2, 1, 3, 8}, "nn.ResNet: input (2, 1, 3, 8) is 3x8, too small for 2 stride-2 stages: images must be at least 4x4"},
		{[]int{2, 3, 28, 28}, `input has shape (2, 3, 28, 28), want [batch, 1, height, width]`},
		{[]int{2, 784}, `input has shape (2, 784), want [batch, 1, height, width]`},
	} {
		x := tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(c.shape...))
		got := panicOf(func() {
			s := m.step(t, G.NewGraph(), module.Train, x)
			r.Forward(s, s.Input("x"))
		})
		if !strings.Contains(got, c.want) {
			t.Errorf("input %v: panic %q, want %q", c.shape, got, c.want)
		}
	}
}

// A BasicBlock fed from the batch gives its input the whole gradient: with
// the identity shortcut x has a gradient through the sum, so conv1 must
// add its part too (it used to skip it as a first layer does, and x's
// gradient held the shortcut's part alone, 40% off torch's).
func TestBasicBlockInputGradFromTheBatch(t *testing.T) {
	for _, c := range []struct{ in, out, stride int }{{2, 2, 1}, {2, 3, 2}} {
		var k *nn.BasicBlock
		m := newModel(t, tensor.Float64, func(b *module.Builder) { k = nn.NewBasicBlock(b, "block", c.in, c.out, c.stride) })
		m.randomize(5, 0.5, 1.5)
		for _, mode := range []module.Mode{module.Train, module.Validate} {
			m.gradcheckLayer(t, fmt.Sprintf("BasicBlock%v/%v", c, mode), mode, randT(tensor.Float64, 1, -1, 1, 2, c.in, 4, 3), true, k.Forward)
		}
	}
}

// ResNetConfig.InputGrad gives the input images their gradient (a
// saliency map), which the stem convolution otherwise skips.
func TestResNetInputGrad(t *testing.T) {
	var r *nn.ResNet
	m := newModel(t, tensor.Float64, func(b *module.Builder) {
		r = nn.NewResNet(b, nn.ResNetConfig{InChannels: 2, NumClasses: 3, Widths: []int{2, 3}, InputGrad: true})
	})
	for _, mode := range []module.Mode{module.Train, module.Validate} {
		m.gradcheckLayer(t, "ResNet/input/"+mode.String(), mode, randT(tensor.Float64, 1, -1, 1, 3, 2, 5, 4), true, r.Forward)
	}
}
