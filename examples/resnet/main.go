// Command resnet trains a ResNet (the resnet8 benchmark workload by
// default) on Fashion-MNIST, printing validation accuracy after each epoch
// and a JSON summary as its last line. With no flags it runs on the
// installed Fashion-MNIST, or on the embedded subset when nothing is
// installed.
//
//	go run ./examples/resnet
//	go run ./examples/resnet -max-epochs 3     # the benchmark run on the full set
//	go run ./examples/resnet -devices 2 -strategy ddp
//	go run ./examples/resnet -blocks 3         # ResNet-20
//	go run ./examples/resnet test -ckpt-path best
//
// It imports public packages only: copy this directory into your own
// module and it builds.
package main

import (
	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/models"
)

func main() {
	cli.App{
		Name:        "resnet",
		Description: "Train, validate, test or predict with a ResNet (resnet8 by default) on Fashion-MNIST.",
		Model:       &models.ResNet{},
		Data:        &cli.FashionMNIST{},
		Trainer:     cli.Settings{MaxEpochs: 1, RootDir: "runs/resnet"},
		// The learning rate anneals per epoch over the whole run unless
		// -cosine-epochs says otherwise (0: constant, the benchmark's).
		Links: []cli.Link{{From: "max-epochs", To: "cosine-epochs"}},
	}.Main()
}
