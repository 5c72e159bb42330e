package nn_test

import (
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// NewEmbedding draws the table from N(0, 1), as torch.nn.Embedding, with
// the padding row 0; LayerNorm starts at weight 1, bias 0.
func TestSequenceLayersInit(t *testing.T) {
	const num, dim = 500, 40
	m := newModel(t, tensor.Float64, func(b *module.Builder) {
		nn.NewEmbedding(b, "emb", num, dim, nn.EmbeddingPaddingIdx(7))
		nn.NewLayerNorm(b, "ln", []int{2, 3})
	})
	w := storeVals(t, m.store, "emb.weight")
	var sum, sq float64
	for i, v := range w {
		if i/dim == 7 {
			if v != 0 {
				t.Fatalf("padding row 7 holds %v at column %d, want 0", v, i%dim)
			}
			continue
		}
		sum += v
		sq += v * v
	}
	n := float64(len(w) - dim)
	mean := sum / n
	std := math.Sqrt(sq/n - mean*mean)
	// 19960 draws: the mean's standard error is 0.007, the std's 0.005.
	if math.Abs(mean) > 0.03 || math.Abs(std-1) > 0.03 {
		t.Errorf("embedding table: mean %.4f, std %.4f, want N(0, 1)", mean, std)
	}
	for name, want := range map[string]float64{"ln.weight": 1, "ln.bias": 0} {
		v := storeVals(t, m.store, name)
		if len(v) != 6 {
			t.Fatalf("%s holds %d values, want 6", name, len(v))
		}
		for _, x := range v {
			if x != want {
				t.Fatalf("%s = %v, want all %v", name, v, want)
			}
		}
	}
}

// Settings that cannot work are build errors naming the layer and the
// value; inputs of the wrong shape panic (an error of the step, through the
// trainer) saying what to change; a bad token id is an error of the run
// naming the id, its row and its position.
func TestSequenceLayerErrors(t *testing.T) {
	for _, c := range []struct {
		build func(b *module.Builder)
		want  string
	}{
		{func(b *module.Builder) { nn.NewEmbedding(b, "emb", 0, 4) }, `nn.Embedding "emb" has num=0, dim=4: both must be 1 or more`},
		{func(b *module.Builder) { nn.NewEmbedding(b, "emb", 10, 4, nn.EmbeddingPaddingIdx(10)) }, `nn.Embedding "emb" has padding index 10 for 10 rows: use 0..9, or -10..-1`},
		{func(b *module.Builder) { nn.NewEmbedding(b, "emb", 10, 4, nn.EmbeddingPaddingIdx(-11)) }, `padding index -11 for 10 rows`},
		{func(b *module.Builder) { nn.NewLayerNorm(b, "ln", nil) }, `nn.LayerNorm "ln" has normalised shape []: give the sizes`},
		{func(b *module.Builder) { nn.NewLayerNorm(b, "ln", []int{4, 0}) }, `nn.LayerNorm "ln" has normalised shape [4 0]`},
		{func(b *module.Builder) { nn.NewLayerNorm(b, "ln", []int{4}, nn.LayerNormEps(0)) }, `nn.LayerNorm "ln" has eps=0: want a small positive value`},
	} {
		b := module.NewBuilder(tensor.Float32)
		c.build(b)
		if _, err := b.Specs(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Specs: %v, want an error containing %q", err, c.want)
		}
	}

	var ln, emb func(*module.Step, *G.Node) *G.Node
	m := newModel(t, tensor.Float32, func(b *module.Builder) {
		ln = nn.NewLayerNorm(b, "ln", []int{4}).Forward
		emb = nn.NewEmbedding(b, "emb", 10, 3).Forward
	})
	x := randT(tensor.Float32, 1, -1, 1, 2, 3, 5)
	for _, c := range []struct {
		name string
		f    func(s *module.Step, x *G.Node)
		want string
	}{
		{"layernorm", func(s *module.Step, x *G.Node) { ln(s, x) }, `nn.LayerNorm "ln": input has shape (2, 3, 5), want [..., 4]: the layer normalises its last axes, made with normalised shape [4]`},
		{"layernorm nil", func(s *module.Step, _ *G.Node) { ln(s, nil) }, `nn.LayerNorm "ln": input is nil`},
		{"embedding nil", func(s *module.Step, _ *G.Node) { emb(s, nil) }, `nn.Embedding "emb": input is nil`},
		{"softmax axis", func(_ *module.Step, x *G.Node) { nn.Softmax(x, 3) }, `nn.Softmax: axis 3 is out of range for input of shape (2, 3, 5): use 0..2, or -3..-1`},
		{"log-softmax axis", func(_ *module.Step, x *G.Node) { nn.LogSoftmax(x, -4) }, `nn.LogSoftmax: axis -4 is out of range`},
	} {
		msg := panicOf(func() {
			s := m.step(t, G.NewGraph(), module.Train, x)
			c.f(s, s.Input("x"))
		})
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: panic %q, want it to contain %q", c.name, msg, c.want)
		}
	}

	ids := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{1, 2, 3, 4, 12, 5}))
	g := G.NewGraph()
	s := m.step(t, g, module.Train, ids)
	emb(s, s.Input("x"))
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	want := "index 12 at row 1, position 1 of indices (2, 3) is out of range for a table of 10 rows (0..9): make the table with at least 13 rows"
	if err := vm.RunAll(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("token 12 of a 10-row table: %v, want an error containing %q", err, want)
	}
}
