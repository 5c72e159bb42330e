package sharded_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/trainer"
)

// twoLayers is 4 → 6 → 1 with ReLU between: 37 parameters.
type twoLayers struct{ fc1, fc2 *nn.Linear }

func (m *twoLayers) Configure(b *module.Builder) error {
	m.fc1 = nn.NewLinear(b, "fc1", 4, 6, nn.LinearReLU())
	m.fc2 = nn.NewLinear(b, "fc2", 6, 1)
	return nil
}

func (m *twoLayers) loss(s *module.Step) *G.Node {
	return nn.MSELoss(m.fc2.Forward(s, m.fc1.Forward(s, s.Input("x"))), s.Input("y"))
}

func (m *twoLayers) TrainingStep(s *module.Step) (*G.Node, error) { return m.loss(s), nil }

func (m *twoLayers) ValidationStep(s *module.Step) error {
	s.Log("val_loss", m.loss(s))
	return nil
}

// SGD with momentum keeps one value per parameter: the optimizer state
// that ZeRO shards.
func (m *twoLayers) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	opt, err := optim.NewSGD(optim.SGDConfig{LR: 0.05, Momentum: 0.9})
	return opt, nil, err
}

// rows is y = x1 + 2·x2 + 3·x3 + 4·x4 over 64 rows.
func rows() *data.InMemory {
	x := make([]float32, 64*4)
	y := make([]float32, 64)
	for i := range y {
		for j := range 4 {
			x[i*4+j] = float32((i*7+j*3)%11) / 11
			y[i] += float32(j+1) * x[i*4+j]
		}
	}
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{4}}, {Name: "y", Shape: []int{1}}}, [][]float32{x, y})
	if err != nil {
		panic(err)
	}
	return ds
}

// fit trains twoLayers for two epochs on batches of batch rows per rank
// and returns its validation loss on every row.
func fit(s strategy.Strategy, batch int) float64 {
	root, err := os.MkdirTemp("", "fulgur-sharded-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	cfg := trainer.Config{MaxEpochs: 2, Seed: 1, Out: io.Discard, DefaultRootDir: root, DisableCheckpointing: true, HandleSignals: trainer.Bool(false)}
	if s != nil {
		cfg.StrategyImpl = s
	}
	tr, err := trainer.New(cfg)
	if err != nil {
		panic(err)
	}
	train, err := data.NewLoader(rows(), data.LoaderConfig{BatchSize: batch})
	if err != nil {
		panic(err)
	}
	val, err := data.NewLoader(rows(), data.LoaderConfig{BatchSize: 16})
	if err != nil {
		panic(err)
	}
	m := &twoLayers{}
	if err := tr.Fit(context.Background(), m, train, nil); err != nil {
		panic(err)
	}
	res, err := tr.Validate(context.Background(), m, val)
	if err != nil {
		panic(err)
	}
	return res["val_loss"]
}

// Two ranks of ZeRO stage 2 in one process, over an in-process group, each
// given to its own Trainer (trainer.Config.StrategyImpl): both hold the
// whole model and end every step with the same weights, bit for bit, but
// each keeps the optimizer state of its half of the parameters only, and
// the two train as one device does on their batches together. A program on
// real devices sets trainer.Config{Strategy: "sharded", Devices: N}
// instead, and the ranks are processes.
func Example() {
	const n = 2
	group, err := inproc.NewGroup(n)
	if err != nil {
		panic(err)
	}
	ranks := make([]*sharded.Sharded, n)
	losses := make([]float64, n)
	weights := make([]string, n)
	spans := make([][]string, n)
	var wg sync.WaitGroup
	for r := range n {
		ranks[r], err = sharded.New(sharded.Config{Group: group[r]})
		if err != nil {
			panic(err)
		}
		wg.Go(func() {
			losses[r] = fit(ranks[r], 4)
			weights[r] = ranks[r].Store().SHA256()
			// What this rank holds of the optimizer's state: spans of
			// its buffers, one value per parameter element.
			sd, err := ranks[r].SaveState(context.Background(), strategy.SaveOptions{})
			if err != nil {
				panic(err)
			}
			for _, t := range sd.Tensors {
				if strings.HasPrefix(t.Name, strategy.OptimizerPrefix) {
					spans[r] = append(spans[r], fmt.Sprintf("%s [%d, %d)", t.Name, t.Lo, t.Hi))
				}
			}
			if err := ranks[r].Teardown(context.Background()); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	one := fit(nil, 4*n)

	fmt.Println("stage", ranks[0].Stage())
	fmt.Println("same weights on both ranks:", weights[0] == weights[1])
	for r := range n {
		fmt.Printf("rank %d holds %s of 37; trains as one device: %v\n", r, strings.Join(spans[r], ", "), math.Abs(losses[r]-one) <= 1e-5*one)
	}
	// Output:
	// stage 2
	// same weights on both ranks: true
	// rank 0 holds optimizer/momentum_buffer [0, 19) of 37; trains as one device: true
	// rank 1 holds optimizer/momentum_buffer [19, 37) of 37; trains as one device: true
}

// Config.Stage picks what is sharded besides the optimizer state: stage 1
// keeps the whole reduced gradient on every rank (one all-reduce per unit),
// stage 2 only the rank's shard of it (one reduce-scatter per unit).
// Memory says what a rank holds, in bytes.
func ExampleConfig() {
	const n = 2
	for _, stage := range []int{1, 2} {
		group, err := inproc.NewGroup(n)
		if err != nil {
			panic(err)
		}
		mem := make([]strategy.Memory, n)
		var wg sync.WaitGroup
		for r := range n {
			s, err := sharded.New(sharded.Config{Group: group[r], Stage: stage})
			if err != nil {
				panic(err)
			}
			wg.Go(func() {
				fit(s, 4)
				mem[r] = s.Memory()
				if err := s.Teardown(context.Background()); err != nil {
					panic(err)
				}
			})
		}
		wg.Wait()
		for r, m := range mem { // 4 bytes a float32
			fmt.Printf("stage %d, rank %d: %d of 37 parameters, %d reduced gradients, %d momentum values\n", stage, r, m.Params/4, m.ReducedGrads/4, m.OptimizerState/4)
		}
	}
	// Output:
	// stage 1, rank 0: 37 of 37 parameters, 37 reduced gradients, 19 momentum values
	// stage 1, rank 1: 37 of 37 parameters, 37 reduced gradients, 18 momentum values
	// stage 2, rank 0: 37 of 37 parameters, 19 reduced gradients, 19 momentum values
	// stage 2, rank 1: 37 of 37 parameters, 18 reduced gradients, 18 momentum values
}
