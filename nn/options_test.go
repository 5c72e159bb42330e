package nn_test

import (
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

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
			if _, err := G.Grad(loss, z); err != nil {
				t.Fatal(err)
			}
			vm := G.NewTapeMachine(g)
			err := vm.RunAll()
			vm.Close()
			if err != nil {
				t.Fatalf("%s %v: %v", c.name, dt, err)
			}
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
