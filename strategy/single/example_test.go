package single_test

import (
	"context"
	"fmt"
	"io"
	"os"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/trainer"
)

type line struct{ fc *nn.Linear }

func (m *line) Configure(b *module.Builder) error {
	m.fc = nn.NewLinear(b, "fc", 1, 1)
	return nil
}

func (m *line) TrainingStep(s *module.Step) (*G.Node, error) {
	return nn.MSELoss(m.fc.Forward(s, s.Input("x")), s.Input("y")), nil
}

func (m *line) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	opt, err := optim.NewSGD(optim.SGDConfig{LR: 0.5})
	return opt, nil, err
}

// Single trains one replica in this process: what the trainer runs for
// Strategy "single", or "auto" on one device. Built with NewSingle and
// given as StrategyImpl, it is the program's to read afterwards: Store
// holds the trained parameters by name.
func ExampleNewSingle() {
	// 32 points of y = 2x + 1, x in [0, 1).
	var xs, ys []float32
	for i := range 32 {
		x := float32(i) / 32
		xs, ys = append(xs, x), append(ys, 2*x+1)
	}
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{1}}, {Name: "y", Shape: []int{1}}}, [][]float32{xs, ys})
	if err != nil {
		panic(err)
	}
	train, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8})
	if err != nil {
		panic(err)
	}
	root, err := os.MkdirTemp("", "fulgur-single-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)

	s := single.NewSingle()
	tr, err := trainer.New(trainer.Config{StrategyImpl: s, MaxEpochs: 60, Seed: 1, Out: io.Discard, DefaultRootDir: root, DisableCheckpointing: true})
	if err != nil {
		panic(err)
	}
	if err := tr.Fit(context.Background(), &line{}, train, nil); err != nil {
		panic(err)
	}
	info := s.Info()
	fmt.Printf("%s: rank %d of %d\n", info.Name, info.Rank, info.WorldSize)
	w, err := s.Store().Tensor("fc.weight")
	if err != nil {
		panic(err)
	}
	b, err := s.Store().Tensor("fc.bias")
	if err != nil {
		panic(err)
	}
	fmt.Printf("y = %.2fx + %.2f\n", w.Data().([]float32)[0], b.Data().([]float32)[0])
	// Output:
	// single: rank 0 of 1
	// y = 2.00x + 1.00
}
