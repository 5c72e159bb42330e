// Command bench runs fulgur's benchmark workloads (see BENCHMARKS.md in the
// project's shared notes): each measured configuration runs in a fresh
// process, so peak RSS is per configuration, configurations are interleaved,
// every other run in reverse order (A, B, B, A, A, B, ...), and every figure
// is the median of -runs runs, with min and max.
//
//	go run ./cmd/bench -workload mlp
//	go run ./cmd/bench -workload mlp,overhead -runs 5 -json
//	go run ./cmd/bench -workload mlp -peer torch   # PyTorch side by side, with ratios
//	go run ./cmd/bench -workload scaleout          # one host against two (as root), plot in bench/
//	go run ./cmd/bench -workload scaleout -ranks 2 -plot '' -bucket-bytes 26214400,131072
//	                                               # ddp bucket caps A/B, each on both layouts in every run
//
// FULGUR_BENCH_SPANS=1 adds, to a training workload's figures, where a
// step's time goes on rank 0: every profiler span (forward+backward, the
// waits for the gradient buckets, the optimizer step) in ms a step; and on
// the other ranks, as "rank<N> ms/step ..." (who waits for whom).
// FULGUR_BENCH_TIMELINE=DIR writes every span of every step of every rank
// (and of each independent training of the scaling workload's coexist
// configuration) as the profiler's timeline, in DIR/<configuration>/, and
// adds, from the processes' compute time a step, sync_wait_pct: the share
// of it that ranks meeting every step wait for the slowest, and, for ddp,
// comm_exposed_ms_median: the communication a step waits for after every
// rank's backward pass, what overlap has not hidden (jitter.go).
//
// Workloads register themselves (one file each) with register.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// workload is one benchmark of BENCHMARKS.md.
type workload struct {
	Name string
	Doc  string
	// Configs lists the configurations to measure for the options.
	Configs func(o *Options) ([]Config, error)
	// Run measures one configuration inside a child process.
	Run func(ctx context.Context, c Config) (Figures, error)
	// Derive adds rows computed across configurations (ratios); optional.
	Derive func(o *Options, rs []*Result) []Row
	// Setup prepares what every configuration needs (the scale-out
	// layout's network namespaces) before the first one runs; release
	// undoes it, also when the measurement is interrupted. Optional.
	Setup func(ctx context.Context, o *Options) (release func() error, err error)
	// After runs once the figures are printed (the scaleout plot);
	// optional.
	After func(o *Options, rs []*Result) error
}

var workloads = map[string]*workload{}

func register(w *workload) {
	if _, dup := workloads[w.Name]; dup {
		panic("bench: workload " + w.Name + " registered twice")
	}
	workloads[w.Name] = w
}

func workloadNames() []string {
	var out []string
	for n := range workloads {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if spec, ok := os.LookupEnv(childEnv); ok {
		err = childMain(ctx, spec)
	} else {
		err = parentMain(ctx, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}
