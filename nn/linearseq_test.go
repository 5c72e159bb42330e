package nn_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
)

// embLinear is torch_seq.py's engine case: Embedding(10, 5) then Linear(5,
// 4) over [batch, length, 5], loss Σ out·r with r a batch field.
type embLinear struct {
	emb *nn.Embedding
	fc  *nn.Linear
}

func (m *embLinear) Configure(b *module.Builder) error {
	m.emb = nn.NewEmbedding(b, "emb", 10, 5)
	m.fc = nn.NewLinear(b, "fc", 5, 4)
	return nil
}

func (m *embLinear) TrainingStep(s *module.Step) (*G.Node, error) {
	y := m.fc.Forward(s, m.emb.Forward(s, s.Input("x")))
	if got := y.Shape(); !got.Eq(tensor.Shape{s.BatchSize(), 4, 4}) {
		return nil, fmt.Errorf("Linear's output has shape %v, want [batch, 4, 4]", got)
	}
	return G.Sum(G.Must(G.HadamardProd(y, s.Input("r"))))
}

// A Linear over the last axis of [batch, length, dim] trains on the
// engine's executor and on its TapeMachine (Engine.Tape) as in PyTorch
// 1.13: the loss and the gradients of the Linear and, through the Linear's
// reshapes, of the embedding table, in both dtypes.
func TestLinearSequenceOnEngine(t *testing.T) {
	r := fill(48, 2)
	fields := []data.Field{{Name: "x", Shape: []int{4}}, {Name: "r", Shape: []int{4, 4}}}
	checkOnEngine(t, func() module.Module { return &embLinear{} }, fields, [][]float64{torchSeqIDs, r}, torchSeqEngineRefs)
}

// selfAttention is torch_seq.py's Attention: a single-head self-attention
// classifier as a PyTorch user writes one, from nn's layers and Gorgonia's
// BatchedMatMul.
type selfAttention struct {
	dim     int
	emb     *nn.Embedding
	q, k, v *nn.Linear
	norm    *nn.LayerNorm
	head    *nn.Linear
}

func (m *selfAttention) Configure(b *module.Builder) error {
	m.emb = nn.NewEmbedding(b, "emb", 10, m.dim)
	m.q = nn.NewLinear(b, "q", m.dim, m.dim)
	m.k = nn.NewLinear(b, "k", m.dim, m.dim)
	m.v = nn.NewLinear(b, "v", m.dim, m.dim)
	m.norm = nn.NewLayerNorm(b, "norm", []int{m.dim})
	m.head = nn.NewLinear(b, "head", m.dim, 3)
	return nil
}

func (m *selfAttention) TrainingStep(s *module.Step) (*G.Node, error) {
	e := m.emb.Forward(s, s.Input("x"))                                // [batch, length, dim]
	q, k, v := m.q.Forward(s, e), m.k.Forward(s, e), m.v.Forward(s, e) // the same
	scores, err := G.BatchedMatMul(q, k, false, true)                  // q·kᵀ: [batch, length, length]
	if err != nil {
		return nil, err
	}
	scale := 1 / math.Sqrt(float64(m.dim))
	c := G.NewConstant(scale)
	if s.Dtype() == tensor.Float32 {
		c = G.NewConstant(float32(scale))
	}
	att := nn.Softmax(G.Must(G.HadamardProd(scores, c)), -1)
	h := nn.Mean(G.Must(G.BatchedMatMul(att, v)), 1) // [batch, dim]
	return nn.CrossEntropy(m.head.Forward(s, m.norm.Forward(s, h)), s.Input("y")), nil
}

// A single-head self-attention classifier's loss and the gradient of every
// parameter after one batch are PyTorch's, on the engine's executor and
// TapeMachine, in both dtypes: Linear over [batch, length, dim], the
// batched q·kᵀ and att·v, Softmax over the last axis and Mean over the
// tokens together.
func TestSelfAttentionMatchesTorch(t *testing.T) {
	fields := []data.Field{{Name: "x", Shape: []int{4}}, {Name: "y"}}
	checkOnEngine(t, func() module.Module { return &selfAttention{dim: 4} }, fields, [][]float64{torchSeqIDs, {0, 2, 1}}, torchSeqAttentionRefs)
}

// checkOnEngine runs one training batch of three rows (the fields' values
// cols) through a new engine of newModel with its parameters set to fill(n,
// 10+k) in declaration order, on the executor and on the TapeMachine, in
// both dtypes, and compares the loss and every gradient with refs (by
// dtype).
func checkOnEngine(t *testing.T, newModel func() module.Module, fields []data.Field, cols [][]float64, refs map[string]torchLayerRef) {
	t.Helper()
	for _, dt := range dtypes {
		ref, ok := refs[dt.String()]
		if !ok {
			t.Fatalf("%v: no reference: run testdata/torch_seq.py", dt)
		}
		for _, tape := range []bool{false, true} {
			name := dt.String()
			if tape {
				name += "/tape"
			}
			m := newModel()
			b := module.NewBuilder(dt)
			if err := m.Configure(b); err != nil {
				t.Fatal(err)
			}
			specs, _ := b.Specs()
			st, err := module.NewStore(specs, dt, 1)
			if err != nil {
				t.Fatal(err)
			}
			for k, e := range st.Entries() {
				d, err := st.Tensor(e.Name)
				if err != nil {
					t.Fatal(err)
				}
				v := fill(d.Shape().TotalSize(), 10+k)
				set(d, func(i int) float64 { return v[i] })
			}
			batch := &data.Batch{Size: 3, Fields: fields}
			if dt == tensor.Float64 {
				batch.Data64 = cols
			} else {
				for _, c := range cols {
					c32 := make([]float32, len(c))
					for i, v := range c {
						c32[i] = float32(v)
					}
					batch.Data = append(batch.Data, c32)
				}
			}
			e := engine.New(m, st, fields, 1)
			e.Tape = tape
			res, err := e.Run(context.Background(), module.Train, batch, false, 1)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			tol := tolFor(dt)
			closeTo(t, name+" loss", []float64{res.Loss}, ref.Out, tol)
			if len(ref.Grads) != len(st.Entries()) {
				t.Errorf("%s: %d parameters, PyTorch's %d", name, len(st.Entries()), len(ref.Grads))
			}
			for pname, want := range ref.Grads {
				g, err := st.GradTensor(pname)
				if err != nil {
					t.Fatal(err)
				}
				closeTo(t, name+" gradient of "+pname, vals(g), want, tol)
			}
		}
	}
}

// trLin is a Linear(3, 2) over the last axis of its input x, transposed
// first when transpose is set (PyTorch's fc(x.transpose(1, 2))), with loss
// Σ out·r.
type trLin struct {
	transpose bool
	fc        *nn.Linear
}

func (m *trLin) Configure(b *module.Builder) error {
	m.fc = nn.NewLinear(b, "fc", 3, 2)
	return nil
}

func (m *trLin) TrainingStep(s *module.Step) (*G.Node, error) {
	x := s.Input("x") // [B, 3, 4] or [B, 4, 3]
	if m.transpose {
		x = G.Must(G.Transpose(x, 0, 2, 1))
	}
	y := m.fc.Forward(s, x)
	return G.Sum(G.Must(G.HadamardProd(y, s.Input("r"))))
}

// A Linear of a transposed input (a view whose reshape must copy) gives
// the loss and gradients of the same Linear of the data laid out
// transposed, on the executor and on the TapeMachine.
func TestLinearOfTransposedInput(t *testing.T) {
	const B = 2
	xs := fill(B*12, 5)
	xt := make([]float32, B*12) // [B,4,3] from [B,3,4]
	x32 := make([]float32, B*12)
	for b := 0; b < B; b++ {
		for i := 0; i < 3; i++ {
			for j := 0; j < 4; j++ {
				x32[b*12+i*4+j] = float32(xs[b*12+i*4+j])
				xt[b*12+j*3+i] = float32(xs[b*12+i*4+j])
			}
		}
	}
	r := make([]float32, B*8)
	for i, v := range fill(B*8, 2) {
		r[i] = float32(v)
	}
	run := func(transpose, tape bool) (float64, []float32) {
		m := &trLin{transpose: transpose}
		b := module.NewBuilder(tensor.Float32)
		if err := m.Configure(b); err != nil {
			t.Fatal(err)
		}
		specs, _ := b.Specs()
		st, err := module.NewStore(specs, tensor.Float32, 1)
		if err != nil {
			t.Fatal(err)
		}
		shape, x := []int{4, 3}, xt
		if transpose {
			shape, x = []int{3, 4}, x32
		}
		fields := []data.Field{{Name: "x", Shape: shape}, {Name: "r", Shape: []int{4, 2}}}
		e := engine.New(m, st, fields, 1)
		e.Tape = tape
		res, err := e.Run(context.Background(), module.Train, &data.Batch{Size: B, Fields: fields, Data: [][]float32{x, r}}, false, 1)
		if err != nil {
			t.Fatal(err)
		}
		return res.Loss, append([]float32(nil), st.Grad32()...)
	}
	l0, g0 := run(false, false)
	for _, tape := range []bool{false, true} {
		l1, g1 := run(true, tape)
		if l1 != l0 || !slices.Equal(g1, g0) {
			t.Errorf("tape %v: loss %v and gradients %v of the transposed input, %v and %v of the data transposed", tape, l1, g1, l0, g0)
		}
	}
}
