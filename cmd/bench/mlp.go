package main

import (
	"context"
	"fmt"

	"github.com/fulgur-ml/fulgur/models"
)

func init() {
	register(&workload{
		Name: "mlp",
		Doc:  "784-256-128-10 ReLU MLP, Adam 1e-3, batch 64, 1 epoch of Fashion-MNIST through Trainer.Fit",
		Configs: func(o *Options) ([]Config, error) {
			return threadConfigs(o, Config{Workload: "mlp", Batch: orDefault(o.Batch, 64),
				Epochs: orDefault(o.Epochs, 1), Steps: o.Steps, Seed: o.Seed, Data: o.Data}), nil
		},
		Run: func(ctx context.Context, c Config) (Figures, error) {
			if c.Impl != "fulgur" {
				return nil, fmt.Errorf("mlp: implementation %q runs outside this binary", c.Impl)
			}
			return trainJob{Config: c, Module: &models.MLP{}, Strategy: "single"}.run(ctx)
		},
		Derive: peerRatios,
	})
}
