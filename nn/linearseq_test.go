package nn_test

import (
	"context"
	"fmt"
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
	for _, dt := range dtypes {
		ref := torchSeqEngineRefs[dt.String()]
		for _, tape := range []bool{false, true} {
			m := &embLinear{}
			b := module.NewBuilder(dt)
			if err := m.Configure(b); err != nil {
				t.Fatal(err)
			}
			specs, _ := b.Specs()
			st, err := module.NewStore(specs, dt, 1)
			if err != nil {
				t.Fatal(err)
			}
			for k, name := range []string{"emb.weight", "fc.weight", "fc.bias"} {
				d, err := st.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				v := fill(d.Shape().TotalSize(), 10+k)
				set(d, func(i int) float64 { return v[i] })
			}
			fields := []data.Field{{Name: "x", Shape: []int{4}}, {Name: "r", Shape: []int{4, 4}}}
			batch := &data.Batch{Size: 3, Fields: fields}
			r := fill(48, 2)
			if dt == tensor.Float64 {
				batch.Data64 = [][]float64{torchSeqIDs, r}
			} else {
				batch.Data = [][]float32{make([]float32, 12), make([]float32, 48)}
				for i, v := range torchSeqIDs {
					batch.Data[0][i] = float32(v)
				}
				for i, v := range r {
					batch.Data[1][i] = float32(v)
				}
			}
			e := engine.New(m, st, fields, 1)
			e.Tape = tape
			res, err := e.Run(context.Background(), module.Train, batch, false, 1)
			name := dt.String()
			if tape {
				name += "/tape"
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			tol := tolFor(dt)
			closeTo(t, name+" loss", []float64{res.Loss}, ref.Out, tol)
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
