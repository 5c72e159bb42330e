package trainer_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// SelfAttention classifies token sequences with one head of self-attention:
// each token's query is compared with every token's key (q·kᵀ/√dim), the
// softmax of the scores weighs the values, and the mean over the tokens
// goes through LayerNorm to the class logits. nn.Linear applies to the last
// axis of [batch, length, dim], as PyTorch's does.
type SelfAttention struct {
	Vocab, Dim, Classes int

	emb     *nn.Embedding
	q, k, v *nn.Linear
	norm    *nn.LayerNorm
	head    *nn.Linear

	meanOnly bool // TestSelfAttentionNeedsAttention's control: no attention
}

func (m *SelfAttention) Configure(b *module.Builder) error {
	m.emb = nn.NewEmbedding(b, "emb", m.Vocab, m.Dim)
	m.q = nn.NewLinear(b, "q", m.Dim, m.Dim)
	m.k = nn.NewLinear(b, "k", m.Dim, m.Dim, nn.LinearNoBias()) // a key bias moves every score of a query alike: softmax ignores it
	m.v = nn.NewLinear(b, "v", m.Dim, m.Dim)
	m.norm = nn.NewLayerNorm(b, "norm", []int{m.Dim})
	m.head = nn.NewLinear(b, "head", m.Dim, m.Classes)
	return nil
}

func (m *SelfAttention) logits(s *module.Step) *G.Node {
	e := m.emb.Forward(s, s.Input("tokens")) // [batch, length, dim]
	h := nn.Mean(e, 1)
	if !m.meanOnly {
		q, k, v := m.q.Forward(s, e), m.k.Forward(s, e), m.v.Forward(s, e) // [batch, length, dim]
		scores := G.Must(G.BatchedMatMul(q, k, false, true))               // q·kᵀ: [batch, length, length]
		att := nn.Softmax(G.Must(G.HadamardProd(scores, scalar(s, 1/math.Sqrt(float64(m.Dim))))), -1)
		h = nn.Mean(G.Must(G.BatchedMatMul(att, v)), 1) // [batch, dim]
	}
	return m.head.Forward(s, m.norm.Forward(s, h))
}

// scalar is v as a constant of the model's dtype (Config.Precision).
func scalar(s *module.Step, v float64) *G.Node {
	if s.Dtype() == tensor.Float32 {
		return G.NewConstant(float32(v))
	}
	return G.NewConstant(v)
}

func (m *SelfAttention) TrainingStep(s *module.Step) (*G.Node, error) {
	return nn.CrossEntropy(m.logits(s), s.Input("y")), nil
}

func (m *SelfAttention) ValidationStep(s *module.Step) error {
	z := m.logits(s)
	s.Log("val_loss", nn.CrossEntropy(z, s.Input("y")))
	s.Log("val_acc", nn.Accuracy(z, s.Input("y")))
	return nil
}

func (m *SelfAttention) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewAdam(optim.AdamConfig{LR: 0.01})
	return o, nil, err
}

// pairData is n sequences of 6 tokens: fillers 3..11, and token 1 and token
// 2 each present or not (even odds); the class is 1 when exactly one of
// the two is. The mean of the embeddings adds the two up, which cannot
// tell one from both; attention lets each token see the other.
func pairData(n int, seed uint64) (*data.InMemory, error) {
	const length = 6
	r := rand.New(rand.NewPCG(seed, 3))
	tokens, labels := make([]float32, n*length), make([]float32, n)
	for i := range n {
		for j := range length {
			tokens[i*length+j] = float32(3 + r.IntN(9))
		}
		one, two := r.IntN(2) == 1, r.IntN(2) == 1
		at := r.Perm(length)
		if one {
			tokens[i*length+at[0]] = 1
		}
		if two {
			tokens[i*length+at[1]] = 2
		}
		if one != two {
			labels[i] = 1
		}
	}
	return data.NewInMemory([]data.Field{{Name: "tokens", Shape: []int{length}}, {Name: "y"}}, [][]float32{tokens, labels})
}

func pairLoaders(batch int, shuffle bool) (train, val *data.Loader, err error) {
	tr, err := pairData(2048, 1)
	if err != nil {
		return nil, nil, err
	}
	va, err := pairData(512, 2)
	if err != nil {
		return nil, nil, err
	}
	if train, err = data.NewLoader(tr, data.LoaderConfig{BatchSize: batch, Shuffle: shuffle}); err != nil {
		return nil, nil, err
	}
	val, err = data.NewLoader(va, data.LoaderConfig{BatchSize: 128})
	return train, val, err
}

// A sequence model, as a newcomer who knows PyTorch writes one: single-head
// self-attention learns which of two tokens a sequence holds, one or both
// (chance is 50%, and the mean of the embeddings alone stays there:
// TestSelfAttentionNeedsAttention).
func Example_selfAttention() {
	train, val, err := pairLoaders(32, true)
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
	m := &SelfAttention{Vocab: 12, Dim: 16, Classes: 2}
	if err := tr.Fit(context.Background(), m, train, val); err != nil {
		panic(err)
	}
	fmt.Println("validation accuracy above 0.9:", tr.Metrics()["val_acc"] > 0.9)
	// Output:
	// validation accuracy above 0.9: true
}

func quietConfig(seed uint64) trainer.Config {
	return trainer.Config{MaxEpochs: 3, Seed: seed, Out: io.Discard, EnableProgressBar: trainer.Bool(false),
		DisableCheckpointing: true, DisableLogger: true, HandleSignals: trainer.Bool(false)}
}

// The same data without attention (the mean of the embeddings, LayerNorm,
// Linear) stays near chance: the example's accuracy is attention's.
func TestSelfAttentionNeedsAttention(t *testing.T) {
	train, val, err := pairLoaders(32, false)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(quietConfig(4)) // TestSelfAttentionDDPMatchesSingle's: 0.97 with attention
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &SelfAttention{Vocab: 12, Dim: 16, Classes: 2, meanOnly: true}, train, val); err != nil {
		t.Fatal(err)
	}
	acc := tr.Metrics()["val_acc"]
	t.Logf("without attention: validation accuracy %.4f", acc)
	if !(acc < 0.8) {
		t.Errorf("without attention: validation accuracy %.3f, want near chance (0.5): the task does not need attention", acc)
	}
}

// Under ddp on 2 ranks of batch 16 (in-process collectives) the attention
// model ends with the weights one device reaches with batch 32, within
// float32 rounding (2e-6 + 2e-5·|w|, strategytest's), and both learn.
func TestSelfAttentionDDPMatchesSingle(t *testing.T) {
	newModel := func() *SelfAttention { return &SelfAttention{Vocab: 12, Dim: 16, Classes: 2} }
	train, val, err := pairLoaders(32, false)
	if err != nil {
		t.Fatal(err)
	}
	c := quietConfig(4)
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
	weights := make([][]float32, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		s, err := ddp.NewDDP(ddp.DDPConfig{Group: group[r]})
		if err != nil {
			t.Fatal(err)
		}
		c := quietConfig(4)
		c.StrategyImpl = s
		if ranks[r], err = trainer.New(c); err != nil {
			t.Fatal(err)
		}
		train, val, err := pairLoaders(16, false)
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
		acc := tr.Metrics()["val_acc"]
		t.Logf("%s: validation accuracy %.4f", name, acc)
		if !(acc > 0.9) {
			t.Errorf("%s: validation accuracy %.3f after 3 epochs: it did not learn (chance: 0.5)", name, acc)
		}
	}
	a, b := single.Store().Data32(), weights[0]
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("stores of %d and %d values", len(a), len(b))
	}
	worst := 0.0
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		worst = math.Max(worst, d)
		if !(d <= 2e-6+2e-5*math.Abs(float64(a[i]))) {
			t.Fatalf("parameter value %d: single %v, ddp %v", i, a[i], b[i])
		}
	}
	t.Logf("largest difference between single and ddp after 3 epochs: %.3g", worst)
	if !slices.Equal(weights[0], weights[1]) {
		t.Error("the ddp ranks' weights differ")
	}
}
