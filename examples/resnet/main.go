// Command resnet trains a ResNet (the resnet8 workload of BENCHMARKS.md by
// default) on Fashion-MNIST, printing validation accuracy after each epoch
// and a JSON summary as its last line. With no flags it runs on the
// installed Fashion-MNIST, or on the embedded subset when nothing is
// installed.
//
//	go run ./examples/resnet
//	go run ./examples/resnet -max-epochs 3     # the benchmark run on the full set
//	go run ./examples/resnet -devices 2 -strategy ddp
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fulgur-ml/fulgur/internal/cli"
	"github.com/fulgur-ml/fulgur/internal/models"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

func main() {
	var blocks, width int
	var schedule string
	job := cli.ImageJob{
		Program: "resnet",
		NewModule: func(f *cli.Flags) module.Module {
			m := &models.ResNet{LR: f.LR, Config: nn.ResNetConfig{
				BlocksPerStage: blocks, Widths: []int{width, 2 * width, 4 * width}}}
			if schedule == "cosine" {
				m.CosineEpochs = f.MaxEpochs
			}
			return m
		},
		Defaults: cli.Flags{MaxEpochs: 1, BatchSize: 64, LR: 1e-3, RootDir: "runs/resnet"},
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&blocks, "blocks", 1, "BasicBlocks per stage: 1 is resnet8, 3 is ResNet-20")
			fs.IntVar(&width, "width", 16, "channels of the first stage (doubled at each later stage)")
			fs.StringVar(&schedule, "lr-schedule", "cosine", "cosine (anneal the learning rate per epoch over -max-epochs) or constant")
		},
	}
	job.CheckFlags = func() error {
		if schedule != "cosine" && schedule != "constant" {
			return fmt.Errorf("-lr-schedule is %q: use cosine or constant", schedule)
		}
		return nil
	}
	job.Main(os.Args[1:])
}
