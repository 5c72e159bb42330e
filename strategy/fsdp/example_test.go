package fsdp_test

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
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// twoLayers is 4 → 6 → 1 with ReLU between: 30 + 7 = 37 parameters in
// two layers.
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

// SGD with momentum keeps one value per parameter: state that fsdp shards
// with the parameters.
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
	root, err := os.MkdirTemp("", "fulgur-fsdp-example")
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

// Two ranks of FSDP in one process, over an in-process group, each given
// to its own Trainer (trainer.Config.StrategyImpl): each rank keeps half of
// every layer's parameters, and half of the optimizer's state over them, yet the two
// train as one device does on their batches together. A program on real
// devices sets trainer.Config{Strategy: "fsdp", Devices: N} instead, and
// the ranks are processes.
func Example() {
	const n = 2
	group, err := inproc.NewGroup(n)
	if err != nil {
		panic(err)
	}
	ranks := make([]*fsdp.FSDP, n)
	losses := make([]float64, n)
	states := make([]*strategy.StateDict, n)
	var wg sync.WaitGroup
	for r := range n {
		ranks[r], err = fsdp.New(fsdp.Config{Group: group[r]})
		if err != nil {
			panic(err)
		}
		wg.Go(func() {
			losses[r] = fit(ranks[r], 4)
			// What this rank holds: its spans of every tensor.
			var err error
			if states[r], err = ranks[r].SaveState(context.Background(), strategy.SaveOptions{}); err != nil {
				panic(err)
			}
			// The last barrier, and the group closed.
			if err := ranks[r].Teardown(context.Background()); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	one := fit(nil, 4*n)

	fmt.Println("units:", len(ranks[0].Units()))
	for r, sd := range states {
		params, momentum := 0, 0
		for _, t := range sd.Tensors {
			if strings.HasPrefix(t.Name, strategy.OptimizerPrefix) {
				momentum += t.Hi - t.Lo
			} else {
				params += t.Hi - t.Lo
			}
		}
		fmt.Printf("rank %d holds %d of 37 parameters and %d momentum values\n", r, params, momentum)
		fmt.Printf("rank %d trains as one device: %v\n", r, math.Abs(losses[r]-one) <= 1e-5*one)
	}
	// Output:
	// units: 2
	// rank 0 holds 19 of 37 parameters and 19 momentum values
	// rank 0 trains as one device: true
	// rank 1 holds 18 of 37 parameters and 18 momentum values
	// rank 1 trains as one device: true
}

// HybridShard (PyTorch's HYBRID_SHARD) shards within a node and replicates
// across nodes: four ranks on two nodes of two (NodeSize) hold half of the
// model each, rank r the same half as rank r+2, and gather it over the
// node's links only. Built by name, "fsdp_hybrid_shard" (or
// FULGUR_FSDP_SHARDING=hybrid_shard) takes the node from the launcher.
func ExampleSharding() {
	sharding, err := fsdp.ParseSharding("hybrid_shard")
	if err != nil {
		panic(err)
	}
	const n = 4
	group, err := inproc.NewGroup(n)
	if err != nil {
		panic(err)
	}
	ranks := make([]*fsdp.FSDP, n)
	losses := make([]float64, n)
	spans := make([][]string, n)
	var wg sync.WaitGroup
	for r := range n {
		ranks[r], err = fsdp.New(fsdp.Config{Group: group[r], Sharding: sharding, NodeSize: 2})
		if err != nil {
			panic(err)
		}
		wg.Go(func() {
			losses[r] = fit(ranks[r], 2)
			sd, err := ranks[r].SaveState(context.Background(), strategy.SaveOptions{})
			if err != nil {
				panic(err)
			}
			for _, t := range sd.Tensors {
				if t.Name == "fc1.weight" {
					spans[r] = append(spans[r], fmt.Sprintf("[%d, %d)", t.Lo, t.Hi))
				}
			}
			if err := ranks[r].Teardown(context.Background()); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	one := fit(nil, 2*n)
	fmt.Println(sharding)
	for r := range n {
		fmt.Printf("rank %d holds fc1.weight %s of 24; trains as one device: %v\n", r, strings.Join(spans[r], " "), math.Abs(losses[r]-one) <= 1e-5*one)
	}
	// Output:
	// hybrid_shard
	// rank 0 holds fc1.weight [0, 15) of 24; trains as one device: true
	// rank 1 holds fc1.weight [15, 24) of 24; trains as one device: true
	// rank 2 holds fc1.weight [0, 15) of 24; trains as one device: true
	// rank 3 holds fc1.weight [15, 24) of 24; trains as one device: true
}
