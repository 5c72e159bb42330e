package trainer_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// BagOfWords classifies token sequences: the mean of their embeddings
// (padding, token 0, embeds to 0 and learns nothing), LayerNorm, a hidden
// layer with GELU, and the class logits.
type BagOfWords struct {
	Vocab, Dim, Hidden, Classes int

	emb  *nn.Embedding
	norm *nn.LayerNorm
	fc1  *nn.Linear
	act  *nn.GELU
	fc2  *nn.Linear
}

func (m *BagOfWords) Configure(b *module.Builder) error {
	m.emb = nn.NewEmbedding(b, "emb", m.Vocab, m.Dim, nn.EmbeddingPaddingIdx(0))
	m.norm = nn.NewLayerNorm(b, "norm", []int{m.Dim})
	m.fc1 = nn.NewLinear(b, "fc1", m.Dim, m.Hidden)
	m.act = nn.NewGELU(b, "act")
	m.fc2 = nn.NewLinear(b, "fc2", m.Hidden, m.Classes)
	return nil
}

func (m *BagOfWords) logits(s *module.Step) *G.Node {
	e := m.emb.Forward(s, s.Input("tokens")) // [batch, length, dim]
	h := nn.Mean(e, 1)                       // [batch, dim]
	h = m.act.Forward(s, m.fc1.Forward(s, m.norm.Forward(s, h)))
	return m.fc2.Forward(s, h)
}

func (m *BagOfWords) TrainingStep(s *module.Step) (*G.Node, error) {
	return nn.CrossEntropy(m.logits(s), s.Input("y")), nil
}

func (m *BagOfWords) ValidationStep(s *module.Step) error {
	z := m.logits(s)
	s.Log("val_loss", nn.CrossEntropy(z, s.Input("y")))
	s.Log("val_acc", nn.Accuracy(z, s.Input("y")))
	return nil
}

func (m *BagOfWords) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewAdam(optim.AdamConfig{LR: 0.01})
	return o, nil, err
}

// tokenData is n sequences of 8 token ids from a vocabulary of 24, each of
// one of 4 classes: class c's words are 1+5c..5+5c; a sequence is 4 to 8
// words (then padding, 0), each its class's with probability 0.6 and
// otherwise any word 1..23.
func tokenData(n int, seed uint64) (*data.InMemory, error) {
	const length = 8
	r := rand.New(rand.NewPCG(seed, 9))
	tokens, labels := make([]float32, n*length), make([]float32, n)
	for i := range n {
		c := r.IntN(4)
		labels[i] = float32(c)
		for j := range 4 + r.IntN(length-3) {
			w := 1 + r.IntN(23)
			if r.Float64() < 0.6 {
				w = 1 + 5*c + r.IntN(5)
			}
			tokens[i*length+j] = float32(w)
		}
	}
	return data.NewInMemory([]data.Field{{Name: "tokens", Shape: []int{length}}, {Name: "y"}}, [][]float32{tokens, labels})
}

func tokenLoaders(batch int) (train, val *data.Loader, err error) {
	tr, err := tokenData(1024, 1)
	if err != nil {
		return nil, nil, err
	}
	va, err := tokenData(512, 2)
	if err != nil {
		return nil, nil, err
	}
	if train, err = data.NewLoader(tr, data.LoaderConfig{BatchSize: batch}); err != nil {
		return nil, nil, err
	}
	val, err = data.NewLoader(va, data.LoaderConfig{BatchSize: 128})
	return train, val, err
}

// A text model, as a newcomer writes one: a bag-of-words classifier from
// nn.Embedding, nn.LayerNorm and nn.GELU learns what the words say (chance
// is 25% and a loss of ln 4 = 1.39).
func Example_bagOfWords() {
	train, val, err := tokenLoaders(32)
	if err != nil {
		panic(err)
	}
	root, err := os.MkdirTemp("", "fulgur-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	tr, err := trainer.New(trainer.Config{MaxEpochs: 3, Seed: 1, Out: io.Discard, DefaultRootDir: root})
	if err != nil {
		panic(err)
	}
	m := &BagOfWords{Vocab: 24, Dim: 16, Hidden: 32, Classes: 4}
	if err := tr.Fit(context.Background(), m, train, val); err != nil {
		panic(err)
	}
	res := tr.Metrics()
	fmt.Println("validation accuracy above 0.9:", res["val_acc"] > 0.9)
	fmt.Println("validation loss below 0.3:", res["val_loss"] < 0.3)
	// Output:
	// validation accuracy above 0.9: true
	// validation loss below 0.3: true
}

// The same model trained under ddp on 2 ranks of batch 16 (in-process
// collectives) ends with the weights one device reaches with batch 32,
// within float32 rounding (strategytest's tolerance, 2e-6 + 2e-5·|w|),
// and both learn.
func TestBagOfWordsDDPMatchesSingle(t *testing.T) {
	newModel := func() *BagOfWords { return &BagOfWords{Vocab: 24, Dim: 16, Hidden: 32, Classes: 4} }
	cfg := func() trainer.Config {
		return trainer.Config{MaxEpochs: 2, Seed: 4, Out: io.Discard, EnableProgressBar: trainer.Bool(false),
			DisableCheckpointing: true, DisableLogger: true, HandleSignals: trainer.Bool(false)}
	}
	train, val, err := tokenLoaders(32)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg()
	c.Strategy = "single"
	single, err := trainer.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := single.Fit(context.Background(), newModel(), train, val); err != nil {
		t.Fatal(err)
	}

	group, err := inproc.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	ranks := make([]*trainer.Trainer, 2)
	weights := make([][]float32, 2) // each rank's, before Teardown releases its store
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		s, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
		if err != nil {
			t.Fatal(err)
		}
		c := cfg()
		c.StrategyImpl = s
		if ranks[r], err = trainer.New(c); err != nil {
			t.Fatal(err)
		}
		train, val, err := tokenLoaders(16)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			errs[r] = ranks[r].Fit(context.Background(), newModel(), train, val)
			if errs[r] == nil {
				weights[r] = slices.Clone(ranks[r].Store().Data32())
			}
			if err := ranks[r].Teardown(context.Background()); err != nil && errs[r] == nil {
				errs[r] = err
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for name, tr := range map[string]*trainer.Trainer{"single": single, "ddp": ranks[0]} {
		acc, loss := tr.Metrics()["val_acc"], tr.Metrics()["val_loss"]
		t.Logf("%s: validation accuracy %.4f, loss %.4f", name, acc, loss)
		if !(acc > 0.85 && loss < 0.5) {
			t.Errorf("%s: validation accuracy %.3f and loss %.3f after 2 epochs: it did not learn (chance: 0.25 and 1.39)", name, acc, loss)
		}
	}
	a, b := single.Store().Data32(), weights[0]
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("stores of %d and %d values", len(a), len(b))
	}
	worst := 0.0
	for i := range a {
		worst = math.Max(worst, math.Abs(float64(a[i])-float64(b[i])))
		if d := math.Abs(float64(a[i]) - float64(b[i])); !(d <= 2e-6+2e-5*math.Abs(float64(a[i]))) {
			t.Fatalf("parameter value %d: single %v, ddp %v", i, a[i], b[i])
		}
	}
	t.Logf("largest difference between single and ddp after 2 epochs: %.3g", worst)
	if !slices.Equal(weights[0], weights[1]) {
		t.Error("the ddp ranks' weights differ")
	}
}

// A token id outside the table stops Fit with an error naming the id, its
// row of the batch and its position, not a panic or a silent lookup.
func TestBagOfWordsBadTokenIsAnError(t *testing.T) {
	ds, err := tokenData(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	dst := [][]float32{make([]float32, 8), make([]float32, 1)}
	cols := [][]float32{make([]float32, 64*8), make([]float32, 64)}
	for i := range 64 {
		if err := ds.Read(i, dst); err != nil {
			t.Fatal(err)
		}
		copy(cols[0][i*8:], dst[0])
		cols[1][i] = dst[1][0]
	}
	cols[0][37*8+2] = 30 // example 37: batch 1, row 5
	bad, err := data.NewInMemory(ds.Fields(), cols)
	if err != nil {
		t.Fatal(err)
	}
	train, err := data.NewLoader(bad, data.LoaderConfig{BatchSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(trainer.Config{MaxEpochs: 1, Seed: 1, Out: io.Discard, EnableProgressBar: trainer.Bool(false),
		DisableCheckpointing: true, DisableLogger: true, HandleSignals: trainer.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), &BagOfWords{Vocab: 24, Dim: 4, Hidden: 4, Classes: 4}, train, nil)
	for _, want := range []string{"epoch 0 batch 1", "index 30 at row 5, position 2 of indices (32, 8) is out of range for a table of 24 rows (0..23)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Fit: %v, want an error containing %q", err, want)
		}
	}
}
