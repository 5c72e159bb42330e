package module_test

import (
	"context"
	"fmt"
	"io"
	"os"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Line fits y = w*x + b. Configure declares its two tensors by name;
// TrainingStep builds the graph of one batch from them and the batch's
// fields. ConfigureOptimizers is one of the optional interfaces the trainer
// finds by type assertion (without it: Adam, lr 1e-3).
type Line struct{}

func (Line) Configure(b *module.Builder) error {
	b.Param("w", []int{1, 1}, module.Zeros())
	b.Param("b", []int{1}, module.Zeros())
	return nil
}

func (Line) TrainingStep(s *module.Step) (*G.Node, error) {
	pred := G.Must(G.BroadcastAdd(G.Must(G.Mul(s.Input("x"), s.Param("w"))), s.Param("b"), nil, []byte{0}))
	loss := nn.MSELoss(pred, s.Input("y"))
	s.Log("train_loss", loss)
	return loss, nil
}

func (Line) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	opt, err := optim.NewSGD(optim.SGDConfig{LR: 0.5})
	return opt, nil, err
}

func Example() {
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
	train, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8, Shuffle: true, Seed: 1})
	if err != nil {
		panic(err)
	}

	// What Configure declares, as the trainer's strategies read it.
	b := module.NewBuilder(tensor.Float32)
	if err := (Line{}).Configure(b); err != nil {
		panic(err)
	}
	specs, _ := b.Specs()
	for _, sp := range specs {
		fmt.Println("declared", sp.Name, sp.Shape)
	}

	root, err := os.MkdirTemp("", "fulgur-module-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	tr, err := trainer.New(trainer.Config{MaxEpochs: 60, Seed: 1, Out: io.Discard, DefaultRootDir: root})
	if err != nil {
		panic(err)
	}
	if err := tr.Fit(context.Background(), Line{}, train, nil); err != nil {
		panic(err)
	}
	// The weights live in the trainer's Store, not in the module.
	w, _ := tr.Store().Tensor("w")
	bias, _ := tr.Store().Tensor("b")
	fmt.Printf("w = %.2f, b = %.2f\n", w.Data().([]float32)[0], bias.Data().([]float32)[0])
	// Output:
	// declared w [1 1]
	// declared b [1]
	// w = 2.00, b = 1.00
}
