// Command mlp trains the mlp workload of BENCHMARKS.md (784-256-128-10,
// ReLU, Adam) on Fashion-MNIST and prints a JSON summary as its last line.
//
//	go run ./examples/mlp -max-epochs 1
package main

import (
	"os"

	"github.com/fulgur-ml/fulgur/internal/cli"
	"github.com/fulgur-ml/fulgur/internal/models"
	"github.com/fulgur-ml/fulgur/module"
)

func main() {
	cli.ImageJob{
		Program:   "mlp",
		NewModule: func(f *cli.Flags) module.Module { return &models.MLP{LR: f.LR} },
		Defaults:  cli.Flags{MaxEpochs: 1, BatchSize: 64, LR: 1e-3, RootDir: "runs/mlp"},
	}.Main(os.Args[1:])
}
