package infer_test

import (
	"context"
	"fmt"
	"io"
	"os"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Sequential2 is PyTorch's nn.Sequential(nn.Linear(in, hid), nn.ReLU(),
// nn.Linear(hid, out)), its layers named "0" and "2" as there, so that state
// dicts move between the two as they are.
type Sequential2 struct {
	In, Hid, Out int
	l0, l2       *nn.Linear
}

func (m *Sequential2) Configure(b *module.Builder) error {
	m.l0 = nn.NewLinear(b, "0", m.In, m.Hid, nn.LinearReLU())
	m.l2 = nn.NewLinear(b, "2", m.Hid, m.Out)
	return nil
}

func (m *Sequential2) Forward(s *module.Step, x *G.Node) *G.Node {
	return m.l2.Forward(s, m.l0.Forward(s, x))
}

// LitAutoEncoder is Lightning's front-page model: no labels, and a loss on
// the input itself. Its sub-modules are declared under the scopes "encoder"
// and "decoder" (tensors "encoder.0.weight", ...), PyTorch's attribute names.
type LitAutoEncoder struct{ Encoder, Decoder *Sequential2 }

func NewLitAutoEncoder() *LitAutoEncoder {
	return &LitAutoEncoder{Encoder: &Sequential2{In: 28 * 28, Hid: 64, Out: 3}, Decoder: &Sequential2{In: 3, Hid: 64, Out: 28 * 28}}
}

func (m *LitAutoEncoder) Configure(b *module.Builder) error {
	if err := m.Encoder.Configure(b.Scope("encoder")); err != nil {
		return err
	}
	return m.Decoder.Configure(b.Scope("decoder"))
}

// loss reads the batch's images only (a labelled set's "y" is left alone)
// and compares the reconstruction with the flattened input: the target of
// nn.MSELoss is the same node the encoder starts from.
func (m *LitAutoEncoder) loss(s *module.Step) *G.Node {
	x := G.Must(G.Reshape(s.Input("x"), []int{s.BatchSize(), 28 * 28})) // x.view(x.size(0), -1)
	xHat := m.Decoder.Forward(s, m.Encoder.Forward(s, x))
	return nn.MSELoss(xHat, x)
}

func (m *LitAutoEncoder) TrainingStep(s *module.Step) (*G.Node, error) {
	loss := m.loss(s)
	s.Log("train_loss", loss)
	return loss, nil
}

func (m *LitAutoEncoder) ValidationStep(s *module.Step) error {
	s.Log("val_loss", m.loss(s))
	return nil
}

// Encoder is the trained model's encoder alone, to embed images: declared
// under the same scope, it loads from the whole model's checkpoint with
// trainer.OnlyPrefix("encoder.").
type Encoder struct{ Net *Sequential2 }

func (m *Encoder) Configure(b *module.Builder) error {
	m.Net = &Sequential2{In: 28 * 28, Hid: 64, Out: 3}
	return m.Net.Configure(b.Scope("encoder"))
}

func (m *Encoder) TrainingStep(s *module.Step) (*G.Node, error) {
	return nil, fmt.Errorf("the encoder is trained inside LitAutoEncoder")
}

func (m *Encoder) PredictStep(s *module.Step) (*G.Node, error) {
	return m.Net.Forward(s, G.Must(G.Reshape(s.Input("x"), []int{s.BatchSize(), 28 * 28}))), nil
}

// Lightning's LitAutoEncoder: train it, validate it, then, as
// LitAutoEncoder.load_from_checkpoint(path).encoder(x), take the encoder
// alone out of the checkpoint and embed images in 3 dimensions.
func Example_autoencoder() {
	ctx := context.Background()
	root, _ := os.MkdirTemp("", "fulgur-autoencoder")
	defer os.RemoveAll(root)

	train, test, _ := data.EmbeddedFashionMNIST()
	loader, _ := data.NewLoader(train, data.LoaderConfig{BatchSize: 64, Shuffle: true, Seed: 1})
	val, _ := data.NewLoader(test, data.LoaderConfig{BatchSize: 250})
	tr, _ := trainer.New(trainer.Config{MaxEpochs: 3, Seed: 1, Out: io.Discard, DefaultRootDir: root})
	defer tr.Teardown(ctx)
	if err := tr.Fit(ctx, NewLitAutoEncoder(), loader, val); err != nil {
		panic(err)
	}
	// Predicting the mean image for every image has an error of the
	// pixels' variance; three numbers per image do much better.
	_, std, _ := data.MeanStd(test, "x")
	meanImage := 0.0
	for _, s := range std {
		meanImage += float64(s) * float64(s) / float64(len(std))
	}
	fmt.Println("val_loss below half the mean image's:", tr.Metrics()["val_loss"] < meanImage/2)

	ckpt, _ := trainer.ResolveCheckpoint(root, "last")
	enc, err := infer.New(&Encoder{}, infer.Config{
		Inputs:         []data.Field{{Name: "x", Shape: []int{1, 28, 28}}},
		Weights:        ckpt, // the whole model's: the decoder's tensors are ignored
		WeightsOptions: []trainer.WeightsOption{trainer.OnlyPrefix("encoder.")},
	})
	if err != nil {
		panic(err)
	}
	it := val.Iter(ctx, 0)
	defer it.Close()
	b, _ := it.Next() // a loader's batch, its labels left out
	z, err := enc.Predict(ctx, b)
	if err != nil {
		panic(err)
	}
	fmt.Println("embeddings:", z.Shape())
	// Output:
	// val_loss below half the mean image's: true
	// embeddings: (250, 3)
}
