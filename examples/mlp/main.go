// Command mlp trains the mlp benchmark workload (784-256-128-10,
// ReLU, Adam) on Fashion-MNIST, tests it, and prints a JSON summary as its
// last line.
//
//	go run ./examples/mlp -max-epochs 1
//	go run ./examples/mlp test -ckpt-path last
//	go run ./examples/mlp -h
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
		Name:        "mlp",
		Description: "Train, validate, test or predict with the mlp (784-256-128-10, Adam) on Fashion-MNIST.",
		Model:       &models.MLP{},
		Data:        &cli.FashionMNIST{},
		Trainer:     cli.Settings{MaxEpochs: 1, RootDir: "runs/mlp"},
	}.Main()
}
