package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
)

// newResNet8 makes the resnet8 workload's module (BENCHMARKS.md: conv3x3
// 1→16 + BN + ReLU, BasicBlocks 16→16 s1, 16→32 s2, 32→64 s2, global average
// pool, Linear 64→10, Adam 1e-3): models.ResNet's default configuration.
var newResNet8 = func() module.Module { return &models.ResNet{} }

func init() {
	register(&workload{
		Name: "resnet8",
		Doc:  "ResNet-8 on Fashion-MNIST through Trainer.Fit, Adam 1e-3, batch 64; test accuracy after each epoch",
		Configs: func(o *Options) ([]Config, error) {
			if newResNet8 == nil {
				return nil, errors.New("models has no ResNet8 module yet: the workload runs once it lands (set newResNet8 in cmd/bench/resnet8_model.go)")
			}
			return threadConfigs(o, Config{Workload: "resnet8", Batch: orDefault(o.Batch, 64),
				Epochs: orDefault(o.Epochs, 1), Steps: o.Steps, Seed: o.Seed, Data: o.Data}), nil
		},
		Run: func(ctx context.Context, c Config) (Figures, error) {
			if c.Impl != "fulgur" {
				return nil, fmt.Errorf("resnet8: implementation %q runs outside this binary", c.Impl)
			}
			if newResNet8 == nil {
				return nil, errors.New("models has no ResNet8 module yet")
			}
			return trainJob{Config: c, Module: newResNet8(), Strategy: "single", ValEachEpoch: c.Epochs > 1}.run(ctx)
		},
		Derive: peerRatios,
	})
}
