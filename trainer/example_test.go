package trainer_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

// MLP is the README's model.
type MLP struct{ fc1, fc2 *nn.Linear }

func (m *MLP) Configure(b *module.Builder) error {
	m.fc1 = nn.NewLinear(b, "fc1", 784, 128, nn.LinearReLU())
	m.fc2 = nn.NewLinear(b, "fc2", 128, 10)
	return nil
}

func (m *MLP) TrainingStep(s *module.Step) (*G.Node, error) {
	x := G.Must(G.Reshape(s.Input("x"), []int{s.BatchSize(), 784})) // [batch, 1, 28, 28] -> [batch, 784]
	logits := m.fc2.Forward(s, m.fc1.Forward(s, x))
	loss := nn.CrossEntropy(logits, s.Input("y"))
	s.Log("train_loss", loss, module.ProgBar())
	return loss, nil
}

func (m *MLP) TestStep(s *module.Step) error {
	x := G.Must(G.Reshape(s.Input("x"), []int{s.BatchSize(), 784}))
	s.Log("test_acc", nn.Accuracy(m.fc2.Forward(s, m.fc1.Forward(s, x)), s.Input("y")))
	return nil
}

func Example() {
	train, test, err := data.EmbeddedFashionMNIST()
	if err != nil {
		panic(err)
	}
	loader, _ := data.NewLoader(train, data.LoaderConfig{BatchSize: 64, Shuffle: true, Seed: 1})
	testLoader, _ := data.NewLoader(test, data.LoaderConfig{BatchSize: 500})
	// Each Fit keeps its checkpoints and metrics.csv in a new
	// ROOT/lightning_logs/version_N (here ROOT is a scratch directory).
	root, err := os.MkdirTemp("", "fulgur-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	tr, err := trainer.New(trainer.Config{MaxEpochs: 1, Seed: 1, Out: io.Discard, DefaultRootDir: root})
	if err != nil {
		panic(err)
	}
	m := &MLP{}
	if err := tr.Fit(context.Background(), m, loader, nil); err != nil {
		panic(err)
	}
	res, _ := tr.Test(context.Background(), m, testLoader)
	fmt.Println("steps:", tr.Stats().GlobalStep)
	fmt.Println("test accuracy above 0.7:", res["test_acc"] > 0.7)
	last, _ := trainer.ResolveCheckpoint(root, "last")
	fmt.Println("last checkpoint:", strings.TrimPrefix(filepath.ToSlash(last), filepath.ToSlash(root)+"/"))
	// Output:
	// steps: 94
	// test accuracy above 0.7: true
	// last checkpoint: lightning_logs/version_0/checkpoints/last.ckpt
}
