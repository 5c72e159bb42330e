package models

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/optim"
)

// ResNet is the resnet8 benchmark workload by default (conv3x3 1→16,
// BasicBlocks 16, 32 (s2), 64 (s2), global average pool, Linear 64→10),
// trained with Adam; Config gives deeper or wider variants.
type ResNet struct {
	// Config is the network. Blocks and Width fill in what it leaves zero:
	// BlocksPerStage, and Widths (Width, 2·Width, 4·Width).
	Config nn.ResNetConfig
	// Blocks is the BasicBlocks per stage; 0: 1.
	Blocks int `flag:"blocks" default:"1" check:">=1" help:"BasicBlocks per stage: 1 is resnet8, 3 is ResNet-20"`
	// Width is the first stage's channels, doubled at each later stage; 0: 16.
	Width int `flag:"width" default:"16" check:">=1" help:"channels of the first stage (doubled at each later stage)"`
	// LR is Adam's learning rate; 0: 1e-3.
	LR float64 `flag:"lr" default:"1e-3" check:">0" help:"learning rate (Adam)"`
	// CosineEpochs, when 2 or more, anneals the learning rate per epoch
	// along a cosine from LR towards 0 over that many epochs (the example
	// links it to -max-epochs); 0 keeps LR constant, as the resnet8
	// benchmark workload defines it.
	CosineEpochs int `flag:"cosine-epochs" check:">=0" help:"anneal the learning rate per epoch along a cosine over this many epochs (0 or 1: constant)"`
	net          *nn.ResNet
}

// network is Config with Blocks and Width filled in.
func (m *ResNet) network() nn.ResNetConfig {
	c := m.Config
	if c.BlocksPerStage == 0 {
		c.BlocksPerStage = max(m.Blocks, 1)
	}
	if c.Widths == nil {
		w := m.Width
		if w == 0 {
			w = 16
		}
		c.Widths = []int{w, 2 * w, 4 * w}
	}
	return c
}

// Configure declares the network.
func (m *ResNet) Configure(b *module.Builder) error {
	m.net = nn.NewResNet(b, m.network())
	return nil
}

func (m *ResNet) logits(s *module.Step) *G.Node { return m.net.Forward(s, s.Input("x")) }

// TrainingStep returns the mean cross-entropy and logs it with the accuracy.
func (m *ResNet) TrainingStep(s *module.Step) (*G.Node, error) {
	logits := m.logits(s)
	loss := nn.CrossEntropy(logits, s.Input("y"))
	s.Log("train_loss", loss, module.ProgBar(), module.OnEpoch(true))
	s.Log("train_acc", nn.Accuracy(logits, s.Input("y")), module.OnStep(false), module.OnEpoch(true))
	return loss, nil
}

// ValidationStep logs val_loss and val_acc (eval mode: BatchNorm uses its
// running statistics).
func (m *ResNet) ValidationStep(s *module.Step) error { return evalStep(s, m.logits(s), "val") }

// TestStep logs test_loss and test_acc.
func (m *ResNet) TestStep(s *module.Step) error { return evalStep(s, m.logits(s), "test") }

// PredictStep returns the logits.
func (m *ResNet) PredictStep(s *module.Step) (*G.Node, error) { return m.logits(s), nil }

// ConfigureOptimizers returns Adam.
func (m *ResNet) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, _, err := adam(m.LR)
	if err != nil || m.CosineEpochs < 2 {
		return o, nil, err
	}
	s, err := optim.NewCosineAnnealing(lrOr(m.LR), m.CosineEpochs, 0, optim.Every(optim.PerEpoch))
	return o, s, err
}

// HParams are the hyperparameters loggers record.
func (m *ResNet) HParams() map[string]any {
	c := m.network()
	return map[string]any{"model": "resnet", "widths": fmt.Sprint(c.Widths), "blocks_per_stage": c.BlocksPerStage, "lr": lrOr(m.LR)}
}
