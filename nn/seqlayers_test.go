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

// torchSeqIDs are torch_seq.py's token ids (IDS), with repeats so that the
// table's gradient sums rows.
var torchSeqIDs = []float64{1, 3, 9, 3, 0, 3, 3, 7, 9, 9, 2, 0}

// seqCases are torch_seq.py's cases: name, input shape, input scale (0:
// the token ids), and the layer.
var seqCases = []struct {
	name  string
	shape []int
	scale float64
	layer layerBuild
}{
	{"layernorm_last", []int{3, 5}, 2, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewLayerNorm(b, "", []int{5}).Forward
	}},
	{"layernorm_2axes", []int{2, 3, 4}, 3, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewLayerNorm(b, "", []int{3, 4}).Forward
	}},
	{"layernorm_seq", []int{2, 3, 4}, 1, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewLayerNorm(b, "", []int{4}).Forward
	}},
	{"layernorm_eps_noaffine", []int{2, 3, 4}, 0.5, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewLayerNorm(b, "", []int{4}, nn.LayerNormEps(1e-3), nn.LayerNormNoAffine()).Forward
	}},
	{"gelu", []int{3, 7}, 4, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node { return nn.NewGELU(b, "act").Forward }},
	{"gelu_tanh", []int{3, 7}, 4, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewGELU(b, "act", nn.GELUTanh()).Forward
	}},
	{"tanh", []int{3, 7}, 3, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node { return nn.NewTanh(b, "act").Forward }},
	{"sigmoid", []int{3, 7}, 8, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node { return nn.NewSigmoid(b, "act").Forward }},
	{"silu", []int{3, 7}, 5, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node { return nn.NewSiLU(b, "act").Forward }},
	{"softmax_last", []int{3, 5}, 4, softmaxLayer(nn.Softmax, -1)},
	{"softmax_axis1", []int{2, 3, 4}, 4, softmaxLayer(nn.Softmax, 1)},
	{"logsoftmax_axis0", []int{3, 2, 2}, 4, softmaxLayer(nn.LogSoftmax, 0)},
	{"logsoftmax_last", []int{2, 3, 4}, 4, softmaxLayer(nn.LogSoftmax, -1)},
	{"embedding", []int{3, 4}, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewEmbedding(b, "", 10, 3).Forward
	}},
	{"embedding_padding", []int{3, 4}, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewEmbedding(b, "", 10, 3, nn.EmbeddingPaddingIdx(3)).Forward
	}},
	{"embedding_padding_neg", []int{3, 4}, 0, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewEmbedding(b, "", 10, 3, nn.EmbeddingPaddingIdx(-1)).Forward
	}},
	// PyTorch's Linear over the last axis: [2, 3, 5] -> [2, 3, 4].
	{"linear_3d", []int{2, 3, 5}, 1, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewLinear(b, "", 5, 4, nn.LinearInputGrad()).Forward
	}},
	{"linear_4d_nobias", []int{2, 2, 3, 5}, 2, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewLinear(b, "", 5, 3, nn.LinearNoBias(), nn.LinearInputGrad()).Forward
	}},
}

func softmaxLayer(f func(*G.Node, int) *G.Node, axis int) layerBuild {
	return func(*module.Builder) func(*module.Step, *G.Node) *G.Node {
		return func(_ *module.Step, x *G.Node) *G.Node { return f(x, axis) }
	}
}

// TestSequenceLayersMatchTorch runs each case of torch_seq.py in float64
// and float32 and compares the output and the gradients of the input and
// every parameter with PyTorch 1.13's, and the parameter store's names and
// shapes with torch's state_dict.
func TestSequenceLayersMatchTorch(t *testing.T) {
	for _, c := range seqCases {
		for _, dt := range dtypes {
			name := c.name + "/" + dt.String()
			ref, ok := torchSeqRefs[name]
			if !ok {
				t.Fatalf("%s: no reference: run testdata/torch_seq.py", name)
			}
			x := tensor.New(tensor.Of(dt), tensor.WithShape(c.shape...))
			v := fill(x.Shape().TotalSize(), 1)
			set(x, func(i int) float64 { return v[i] * c.scale })
			if c.scale == 0 {
				set(x, func(i int) float64 { return torchSeqIDs[i] })
			}
			checkLayerOn(t, name, ref, x, c.scale != 0, module.Train, 0, c.layer, tolFor(dt))
		}
		var got []string
		m := newModel(t, tensor.Float64, func(b *module.Builder) { c.layer(b) })
		for _, e := range m.store.Entries() {
			got = append(got, fmt.Sprintf("%s [%s]", e.Name, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(e.Shape)), ", "), "[]")))
		}
		if want := torchSeqStateDicts[c.name]; strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("%s: the store holds %q, torch's state_dict %q", c.name, got, want)
		}
	}
}
