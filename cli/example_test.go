package cli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/models"
)

// A module's hyperparameters are its tagged fields; -print-config shows
// every setting of a command line as a config file for -config.
func Example() {
	type Model struct {
		models.MLP
		Dropout float64 `flag:"dropout" default:"0.1" check:"<1" help:"dropout probability"`
	}
	m := &Model{}
	app := cli.App{Name: "mine", Model: m, Data: &cli.FashionMNIST{}, Stdout: os.Stdout}
	// In a program: app.Main(), which reads os.Args.
	if err := app.Run(context.Background(), []string{"-dropout", "0.3", "-lr", "0.01", "-print-config"}); err != nil {
		fmt.Println(err)
	}
	fmt.Println("parsed:", m.Dropout, m.LR)
	// Output:
	// data:
	//   batch_size: 64
	//   data: ""
	//   drop_last: false
	// model:
	//   dropout: 0.3
	//   lr: 0.01
	//   sizes: 784,256,128,10
	// trainer:
	//   accelerator: cpu
	//   accumulate_grad_batches: 1
	//   check_val_every_n_epoch: 1
	//   ckpt_every_n_steps: 0
	//   ckpt_mode: min
	//   ckpt_monitor: ""
	//   ckpt_path: ""
	//   ckpt_top_k: 1
	//   detect_anomaly: false
	//   deterministic: false
	//   devices: 1
	//   fast_dev_run: 0
	//   gradient_clip_algorithm: norm
	//   gradient_clip_val: 0
	//   limit_predict_batches: 0
	//   limit_test_batches: 0
	//   limit_train_batches: 0
	//   limit_val_batches: 0
	//   log_every_n_steps: 50
	//   log_grad_norm: false
	//   loggers: csv,tensorboard
	//   max_epochs: 0
	//   max_steps: 0
	//   max_time: 0s
	//   min_epochs: 0
	//   min_steps: 0
	//   no_checkpoint: false
	//   no_model_summary: false
	//   no_plots: false
	//   no_progress_bar: false
	//   num_nodes: 1
	//   num_sanity_val_steps: 2
	//   overfit_batches: 0
	//   precision: "32"
	//   predictions: ""
	//   profiler: ""
	//   root_dir: ""
	//   seed: 0
	//   sharded_checkpoint: false
	//   strategy: auto
	//   sync_batchnorm: false
	//   val_check_interval: 0
	//   warn_on_nan: false
	//   weights: ""
	//   weights_not_strict: false
	//   weights_only_prefix: ""
	//   weights_strip_prefix: ""
	// parsed: 0.3 0.01
}
