package dp_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/dp"
	"github.com/fulgur-ml/fulgur/trainer"
)

type regressor struct{ fc *nn.Linear }

func (m *regressor) Configure(b *module.Builder) error {
	m.fc = nn.NewLinear(b, "fc", 4, 1)
	return nil
}

// SGD steps in proportion to the gradient, so a gradient summed over the
// replicas instead of averaged would show in the weights.
func (m *regressor) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	opt, err := optim.NewSGD(optim.SGDConfig{LR: 0.1})
	return opt, nil, err
}

func (m *regressor) TrainingStep(s *module.Step) (*G.Node, error) {
	return nn.MSELoss(m.fc.Forward(s, s.Input("x")), s.Input("y")), nil
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

// fit trains a regressor for two epochs on batches of 8 and returns its
// trained weights.
func fit(cfg trainer.Config) []float32 {
	root, err := os.MkdirTemp("", "fulgur-dp-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	cfg.MaxEpochs, cfg.Seed, cfg.Out, cfg.DefaultRootDir, cfg.DisableCheckpointing = 2, 1, io.Discard, root, true
	tr, err := trainer.New(cfg)
	if err != nil {
		panic(err)
	}
	// Teardown gives back the share of the cores dp's replicas took.
	defer tr.Teardown(context.Background())
	train, err := data.NewLoader(rows(), data.LoaderConfig{BatchSize: 8})
	if err != nil {
		panic(err)
	}
	if err := tr.Fit(context.Background(), &regressor{}, train, nil); err != nil {
		panic(err)
	}
	return append([]float32(nil), tr.Store().Data32()...)
}

// A Trainer with Strategy "dp" and two devices cuts every batch of 8 into
// two halves of 4, one per replica, and steps on the mean of their
// gradients: it trains as one device does on the whole batch, within
// float32 rounding.
func Example() {
	two := fit(trainer.Config{Strategy: "dp", Devices: 2})
	one := fit(trainer.Config{Strategy: "single"})
	worst := 0.0
	for i := range one {
		worst = max(worst, math.Abs(float64(two[i]-one[i])))
	}
	fmt.Println("parameters:", len(two))
	fmt.Println("dp on 2 devices trains as 1 device:", worst < 1e-6)
	// Output:
	// parameters: 5
	// dp on 2 devices trains as 1 device: true
}

// A program that picks the devices itself builds DP with NewDP and hands
// it to the trainer as StrategyImpl. After training, every replica holds
// the same weights, bit for bit: replica 0 takes the optimizer step and
// its weights are copied to the others.
func ExampleNewDP() {
	devices, err := device.Open("cpu", 3)
	if err != nil {
		panic(err)
	}
	d, err := dp.NewDP(dp.DPConfig{Devices: devices})
	if err != nil {
		panic(err)
	}
	fit(trainer.Config{StrategyImpl: d})
	stores := d.ReplicaStores()
	fmt.Println("replicas:", len(stores))
	for i, st := range stores[1:] {
		fmt.Printf("replica %d has replica 0's weights: %v\n", i+1, st.SHA256() == stores[0].SHA256())
	}
	// Output:
	// replicas: 3
	// replica 1 has replica 0's weights: true
	// replica 2 has replica 0's weights: true
}
