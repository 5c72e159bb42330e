package ddp_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sync"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

type regressor struct{ fc *nn.Linear }

func (m *regressor) Configure(b *module.Builder) error {
	m.fc = nn.NewLinear(b, "fc", 4, 1)
	return nil
}

func (m *regressor) TrainingStep(s *module.Step) (*G.Node, error) {
	return nn.MSELoss(m.fc.Forward(s, s.Input("x")), s.Input("y")), nil
}

// Plain SGD moves each weight by the learning rate times its gradient, so
// the weights show whether the ranks' gradients are averaged: summed, they
// would take steps twice as long. (Adam, the default, divides each step by
// the gradient's own size and would hide it.)
func (m *regressor) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	opt, err := optim.NewSGD(optim.SGDConfig{LR: 0.1})
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

// newTrainer trains for two epochs on s (nil: one device).
func newTrainer(root string, s *ddp.DDP) *trainer.Trainer {
	cfg := trainer.Config{MaxEpochs: 2, Seed: 1, Out: io.Discard, DefaultRootDir: root, DisableCheckpointing: true, HandleSignals: trainer.Bool(false)}
	if s != nil {
		cfg.StrategyImpl = s
	}
	tr, err := trainer.New(cfg)
	if err != nil {
		panic(err)
	}
	return tr
}

// Two ranks of DDP in one process, over an in-process group: each rank
// runs its own Trainer on its half of the data, and the gradients are
// averaged across them at every step, so every rank ends with the same
// weights, those one device reaches on the two ranks' batches together. A
// program on real devices sets trainer.Config{Strategy: "ddp", Devices: N}
// instead, and DDP starts a process per rank itself.
func Example() {
	root, err := os.MkdirTemp("", "fulgur-ddp-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)

	group, err := inproc.NewGroup(2)
	if err != nil {
		panic(err)
	}
	trainers := make([]*trainer.Trainer, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for rank := range 2 {
		strat, err := ddp.NewDDP(ddp.DDPConfig{Group: group[rank]})
		if err != nil {
			panic(err)
		}
		trainers[rank] = newTrainer(root, strat)
		// Each rank reads its own half of the rows (the trainer shards
		// the data across the ranks), 8 rows a step.
		train, err := data.NewLoader(rows(), data.LoaderConfig{BatchSize: 8})
		if err != nil {
			panic(err)
		}
		wg.Go(func() { errs[rank] = trainers[rank].Fit(context.Background(), &regressor{}, train, nil) })
	}
	wg.Wait()
	for rank, tr := range trainers {
		if errs[rank] != nil {
			panic(errs[rank])
		}
		fmt.Printf("rank %d: %d steps\n", rank, tr.Stats().GlobalStep)
	}
	fmt.Println("same weights on both ranks:", trainers[0].Store().SHA256() == trainers[1].Store().SHA256())

	// One device, 16 rows a step: the two ranks' batches together.
	one := newTrainer(root, nil)
	train, err := data.NewLoader(rows(), data.LoaderConfig{BatchSize: 16})
	if err != nil {
		panic(err)
	}
	if err := one.Fit(context.Background(), &regressor{}, train, nil); err != nil {
		panic(err)
	}
	fmt.Printf("one device: %d steps\n", one.Stats().GlobalStep)
	want, got := one.Store().Data32(), trainers[0].Store().Data32()
	same := len(got) == len(want)
	for i := range want {
		same = same && math.Abs(float64(got[i]-want[i])) <= 1e-5*(1+math.Abs(float64(want[i])))
	}
	fmt.Println("the ranks' weights are one device's:", same)
	// Output:
	// rank 0: 8 steps
	// rank 1: 8 steps
	// same weights on both ranks: true
	// one device: 8 steps
	// the ranks' weights are one device's: true
}
