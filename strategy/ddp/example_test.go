package ddp_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
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

// Two ranks of DDP in one process, over an in-process group: each rank
// runs its own Trainer on its half of the data, and the gradients are
// averaged across them at every step, so every rank ends with the same
// weights. A program on real devices sets trainer.Config{Strategy: "ddp",
// Devices: N} instead, and DDP starts a process per rank itself.
func Example() {
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
		trainers[rank], err = trainer.New(trainer.Config{MaxEpochs: 2, Seed: 1, Out: io.Discard, DefaultRootDir: root, StrategyImpl: strat, HandleSignals: trainer.Bool(false)})
		if err != nil {
			panic(err)
		}
		train, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8})
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
	// Output:
	// rank 0: 8 steps
	// rank 1: 8 steps
	// same weights on both ranks: true
}
