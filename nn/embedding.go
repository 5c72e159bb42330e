package nn

import (
	"math/rand/v2"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
)

// Embedding is a lookup table of Num rows of Dim values, PyTorch's
// nn.Embedding: Forward maps token ids [batch, ...] to [batch, ..., Dim].
// The ids come as the batch's fields do, whole numbers stored as floats
// (as class labels are); one that is not a whole number in 0..Num-1 is an
// error of the step naming it, its row and its position.
type Embedding struct {
	Name     string
	Num, Dim int
	Weight   string // full parameter name, "name.weight" [Num, Dim]
	// PaddingIdx is the row whose gradient is always 0 (and which starts
	// at 0), or -1 for none.
	PaddingIdx int
	padding    int // as given, for the error message
	hasPadding bool
}

// EmbeddingOption changes an Embedding.
type EmbeddingOption func(*Embedding)

// EmbeddingPaddingIdx is PyTorch's padding_idx: that row starts at 0 and
// gets no gradient, so a padding token contributes nothing it learns. A
// negative i counts from the end, as in PyTorch.
func EmbeddingPaddingIdx(i int) EmbeddingOption {
	return func(l *Embedding) { l.padding, l.hasPadding = i, true }
}

// NewEmbedding declares "name.weight" [num, dim] drawn from N(0, 1), as
// PyTorch's nn.Embedding does (with the padding row set to 0).
func NewEmbedding(b *module.Builder, name string, num, dim int, opts ...EmbeddingOption) *Embedding {
	sb := b.Scope(name)
	l := &Embedding{Name: b.Name(name), Num: num, Dim: dim, PaddingIdx: -1}
	for _, o := range opts {
		o(l)
	}
	if num < 1 || dim < 1 {
		b.Errorf("nn.Embedding %q has num=%d, dim=%d: both must be 1 or more", l.Name, num, dim)
		return l
	}
	if l.hasPadding {
		p := l.padding
		if p < 0 {
			p += num
		}
		if p < 0 || p >= num {
			b.Errorf("nn.Embedding %q has padding index %d for %d rows: use 0..%d, or -%d..-1 counting from the end", l.Name, l.padding, num, num-1, num)
			return l
		}
		l.PaddingIdx = p
	}
	initW := module.Normal(0, 1)
	if pad := l.PaddingIdx; pad >= 0 {
		normal := initW
		initW = func(r *rand.Rand, shape []int, out []float64) {
			normal(r, shape, out)
			clear(out[pad*dim : (pad+1)*dim])
		}
	}
	l.Weight = sb.Param("weight", []int{num, dim}, initW)
	sb.Layer("Embedding", num*dim)
	return l
}

// Forward adds the lookup to s's graph: ids [batch, ...] give [batch, ...,
// Dim].
func (l *Embedding) Forward(s *module.Step, ids *G.Node) *G.Node {
	if ids == nil {
		panic(layerError("Embedding", l.Name, "input is nil"))
	}
	if ids.Dims() < 1 {
		panic(layerError("Embedding", l.Name, "input has shape %v, want token ids [batch, ...]", ids.Shape()))
	}
	o := ops.EmbeddingOpts{PaddingIdx: l.PaddingIdx, HasPadding: l.PaddingIdx >= 0}
	return layerIO(s, l.Name, ids, must("Embedding", l.Name)(ops.Embedding(ids, s.Param(l.Weight), o)))
}
