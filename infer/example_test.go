package infer_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

// MLP is the README's model with a PredictStep.
type MLP struct{ fc1, fc2 *nn.Linear }

func (m *MLP) Configure(b *module.Builder) error {
	m.fc1 = nn.NewLinear(b, "fc1", 784, 128, nn.LinearReLU())
	m.fc2 = nn.NewLinear(b, "fc2", 128, 10)
	return nil
}

func (m *MLP) logits(s *module.Step) *G.Node {
	x := G.Must(G.Reshape(s.Input("x"), []int{s.BatchSize(), 784}))
	return m.fc2.Forward(s, m.fc1.Forward(s, x))
}

func (m *MLP) TrainingStep(s *module.Step) (*G.Node, error) {
	return nn.CrossEntropy(m.logits(s), s.Input("y")), nil
}

func (m *MLP) PredictStep(s *module.Step) (*G.Node, error) { return m.logits(s), nil }

// Train, export the weights as a PyTorch state dict, then load them into a
// fresh module value and predict without a Trainer.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fulgur-infer-example")
	defer os.RemoveAll(dir)
	weights := filepath.Join(dir, "mlp.safetensors")

	train, test, _ := data.EmbeddedFashionMNIST()
	loader, _ := data.NewLoader(train, data.LoaderConfig{BatchSize: 64, Shuffle: true, Seed: 1})
	tr, _ := trainer.New(trainer.Config{MaxEpochs: 1, Seed: 1, Out: io.Discard, DefaultRootDir: dir})
	if err := tr.Fit(ctx, &MLP{}, loader, nil); err != nil {
		panic(err)
	}
	// PyTorch: model.load_state_dict(load_file("mlp.safetensors"), strict=True)
	if err := infer.SaveStateDict(weights, tr.Store()); err != nil {
		panic(err)
	}

	// Inference: a new module value, the weights file (or a checkpoint,
	// or a state dict PyTorch saved), one batch.
	m, err := infer.New(&MLP{}, infer.Config{
		Inputs:  []data.Field{{Name: "x", Shape: []int{1, 28, 28}}},
		Weights: weights,
	})
	if err != nil {
		panic(err)
	}
	const n = 200
	x, labels := make([]float32, n*784), make([]float32, n)
	for i := 0; i < n; i++ {
		_ = test.Read(i, [][]float32{x[i*784 : (i+1)*784], labels[i : i+1]})
	}
	b, _ := m.Batch(n, x)
	logits, err := m.Predict(ctx, b)
	if err != nil {
		panic(err)
	}
	right := 0
	for i := 0; i < n; i++ {
		row := logits.Float32s()[i*10 : (i+1)*10]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if float32(best) == labels[i] {
			right++
		}
	}
	fmt.Println("logits:", logits.Shape())
	fmt.Println("accuracy above 0.7:", float64(right)/n > 0.7)
	// Output:
	// logits: (200, 10)
	// accuracy above 0.7: true
}
