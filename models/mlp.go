// Package models holds ready modules: the mlp and resnet benchmark
// workloads (cmd/bench; bench/RESULTS.md has the figures), which
// examples/, cmd/bench and the tests train, so they all
// train exactly the same thing, and a program outside this module can too.
//
// Their hyperparameters are fields tagged for package cli (`flag:"lr"`), so
// a program hands a model to cli.App and gets them as flags and config-file
// keys; set the fields directly when building a Trainer by hand. Zero
// fields take the defaults their comments give.
//
// models imports module, nn, nn/ops and optim; nothing of trainer,
// strategy or cli (struct tags are plain strings).
package models

import (
	"fmt"
	"strconv"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
	"github.com/fulgur-ml/fulgur/optim"
)

// MLP is the mlp workload: 784-256-128-10 with ReLU, softmax cross-entropy,
// trained with Adam (lr 1e-3, betas 0.9/0.999, eps 1e-8 by default).
type MLP struct {
	// Sizes are the layer widths, input first; nil: 784, 256, 128, 10.
	Sizes []int `flag:"sizes" default:"784,256,128,10" help:"layer widths, input first"`
	// LR is Adam's learning rate; 0: 1e-3.
	LR float64 `flag:"lr" default:"1e-3" check:">0" help:"learning rate (Adam)"`
}

func (m *MLP) sizes() []int {
	if len(m.Sizes) == 0 {
		return []int{784, 256, 128, 10}
	}
	return m.Sizes
}

// Validate reports bad hyperparameters before anything is built (package
// cli calls it after parsing the flags).
func (m *MLP) Validate() error {
	sz := m.sizes()
	bad := len(sz) < 2
	for _, n := range sz {
		bad = bad || n < 1
	}
	if bad {
		return fmt.Errorf("MLP.Sizes (-sizes) is %v: give the input width and at least one layer, each 1 or more, such as 784,256,10", sz)
	}
	return nil
}

// Configure declares fc1..fcN with PyTorch's nn.Linear initialisation.
func (m *MLP) Configure(b *module.Builder) error {
	if err := m.Validate(); err != nil {
		return err
	}
	sz := m.sizes()
	for i := 0; i+1 < len(sz); i++ {
		l := b.Scope(fmt.Sprintf("fc%d", i+1))
		l.Param("weight", []int{sz[i+1], sz[i]}, module.KaimingUniform(sz[i]))
		l.Param("bias", []int{sz[i+1]}, module.KaimingUniform(sz[i]))
		l.Layer("Linear", sz[i]*sz[i+1]+sz[i+1])
	}
	return nil
}

func (m *MLP) logits(s *module.Step) (*G.Node, error) {
	sz := m.sizes()
	in := s.Input("x")
	if n := in.Shape().TotalSize() / s.BatchSize(); n != sz[0] {
		return nil, fmt.Errorf("MLP.Sizes (-sizes) is %v, whose first width is the input's, but each example's x holds %d values (the batch is %v): start the widths with %d, such as %s", sz, n, in.Shape(), n, joinInts(append([]int{n}, sz[1:]...)))
	}
	x := G.Must(G.Reshape(in, []int{s.BatchSize(), sz[0]}))
	for i := 0; i+1 < len(sz); i++ {
		name := fmt.Sprintf("fc%d", i+1)
		last := i+2 == len(sz)
		in := x
		x = must(ops.Linear(x, s.Param(name+".weight"), s.Param(name+".bias"),
			ops.LinearOpts{ReLU: !last, NoInputGrad: i == 0}))
		s.LayerIO(name, in, x) // sizes for the model summary
	}
	return x, nil
}

// joinInts writes widths as -sizes takes them: 784,256,10.
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// TrainingStep returns the mean cross-entropy and logs it with the accuracy.
func (m *MLP) TrainingStep(s *module.Step) (*G.Node, error) {
	logits, err := m.logits(s)
	if err != nil {
		return nil, err
	}
	loss := must(ops.SoftmaxCrossEntropy(logits, s.Input("y"), nil))
	s.Log("train_loss", loss, module.ProgBar(), module.OnEpoch(true))
	return loss, nil
}

// ValidationStep logs val_loss and val_acc.
func (m *MLP) ValidationStep(s *module.Step) error {
	logits, err := m.logits(s)
	if err != nil {
		return err
	}
	return evalStep(s, logits, "val")
}

// TestStep logs test_loss and test_acc.
func (m *MLP) TestStep(s *module.Step) error {
	logits, err := m.logits(s)
	if err != nil {
		return err
	}
	return evalStep(s, logits, "test")
}

// PredictStep returns the logits.
func (m *MLP) PredictStep(s *module.Step) (*G.Node, error) { return m.logits(s) }

// ConfigureOptimizers returns Adam.
func (m *MLP) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	return adam(m.LR)
}

// HParams are the hyperparameters loggers record.
func (m *MLP) HParams() map[string]any {
	return map[string]any{"model": "mlp", "sizes": fmt.Sprint(m.sizes()), "lr": lrOr(m.LR)}
}

func evalStep(s *module.Step, logits *G.Node, prefix string) error {
	y := s.Input("y")
	s.Log(prefix+"_loss", must(ops.SoftmaxCrossEntropy(logits, y, nil)), module.SyncDist())
	s.Log(prefix+"_acc", must(ops.Accuracy(logits, y, nil)), module.SyncDist(), module.ProgBar())
	return nil
}

func adam(lr float64) (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewAdam(optim.AdamConfig{LR: lrOr(lr), Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	return o, nil, err
}

func lrOr(lr float64) float64 {
	if lr == 0 {
		return 1e-3
	}
	return lr
}

// must turns an op-construction error into a panic, which the trainer
// reports as an error of the step being built.
func must(n *G.Node, err error) *G.Node {
	if err != nil {
		panic(err)
	}
	return n
}
