// Command fulgur is the framework's tool box. plot redraws the charts of
// logged runs from their metrics.csv:
//
//	go run ./cmd/fulgur plot runs/mlp/lightning_logs/version_0
//	go run ./cmd/fulgur plot -o compare runs/mlp runs/resnet
//
// run is a torchrun-style launcher for one machine that restarts a failed
// job from its last checkpoint (elastic restarts):
//
//	fulgur run -nproc 2:3 -max-restarts 3 ./train -strategy ddp -devices 3
//
// and, on each of several machines (no restarts), as torchrun's --nnodes:
//
//	fulgur run -nnodes 2 -node-rank 0 -nproc 2 -master-addr node0 ./train -strategy ddp -num-nodes 2 -devices 2
//
// torchrun's spellings (--nproc-per-node, --node_rank, --rdzv-endpoint,
// --standalone...) are not flags of run: each is answered with the flag
// to type, or what to do where run has none, and the command line to copy.
//
// A RUN_DIR is a directory holding metrics.csv, the file itself, or a root
// directory with lightning_logs/version_N inside (the newest is used).
// Several runs are drawn on the same charts, one colour per run.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `usage: fulgur COMMAND [flags] [args]

commands:
  plot RUN_DIR [RUN_DIR...]   draw charts of logged runs from their metrics.csv
  run [flags] PROGRAM [ARGS]  start PROGRAM as the ranks of a job, restarting them
                              from the last checkpoint when one fails

"fulgur COMMAND -h" describes a command's flags.
`

func main() {
	os.Exit(exitCode(run(os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

// exitCode is the exit status for run's error, which it prints: 0 for none
// and for -h (which asked for the usage run printed, as "fulgur -h" does),
// a stop's signal status (130, 143), and 2 for any other error.
func exitCode(err error, stderr io.Writer) int {
	var st exitStatus
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &st):
		return int(st)
	}
	fmt.Fprintf(stderr, "fulgur: %v\n", err)
	return 2
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given: use plot or run")
	}
	switch args[0] {
	case "plot":
		return runPlot(args[1:], stdout, stderr)
	case "run":
		return runRun(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q: use plot or run", args[0])
}
