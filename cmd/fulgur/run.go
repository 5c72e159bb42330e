package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// runRun is "fulgur run": a torchrun-style launcher for one machine that
// starts NPROC copies of a training program as the ranks of a ddp job and
// restarts them from the last checkpoint when one fails.
func runRun(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fulgur run", flag.ContinueOnError)
	// Parse's own message and the whole usage are left out: the error
	// says what was wrong, and -h prints the usage.
	fs.SetOutput(io.Discard)
	nproc := fs.String("nproc", "2", "ranks to start on this machine: N, or MIN:MAX to let restarts go on with fewer ranks, down to MIN (as torchrun's --nnodes MIN:MAX)")
	defRestarts, err := envRestarts()
	if err != nil {
		return err
	}
	restarts := fs.Int("max-restarts", defRestarts, "times the job is restarted from its last checkpoint after a rank fails (as torchrun's --max-restarts; default $"+launch.EnvMaxRestarts+" or 0)")
	nnodes := fs.Int("nnodes", 1, "machines that run the job (as torchrun's --nnodes): start \"fulgur run\" on each with the same -nnodes, -nproc, -master-addr, -master-port and $"+launch.EnvToken+" and its own -node-rank")
	nodeRank := fs.Int("node-rank", 0, "this machine's place among -nnodes, 0 to NNODES-1 (as torchrun's --node-rank); node 0 runs rank 0")
	masterAddr := fs.String("master-addr", "127.0.0.1", "the address of node 0 as every machine reaches it (as torchrun's --master-addr); with -nnodes above 1")
	masterPort := fs.Int("master-port", 0, "the port of the rendezvous on node 0 (as torchrun's --master-port); 0: a free one on one machine, 29500 on several")
	grace := fs.Duration("grace", launch.DefaultGrace, "how long the other ranks get to stop after one failed, before they are killed (after the first 5s they are sent SIGTERM)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: fulgur run [flags] PROGRAM [ARGS...]\n\n"+
			"Starts NPROC copies of PROGRAM on this machine as the ranks of one job, with\n"+
			"torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,\n"+
			"FULGUR_TOKEN). When a rank fails, the others are stopped and the job is started\n"+
			"again, up to -max-restarts times; a fulgur Trainer resumes from the run's newest\n"+
			"checkpoint and goes on in the same run directory. With -nproc MIN:MAX each\n"+
			"restart retires the failed rank's slot while at least MIN ranks remain.\n"+
			"A rank that fails the same way twice in a row is not restarted again.\n"+
			"On several machines, run it on each (no restarts):\n"+
			"  node0$ fulgur run -nnodes 2 -node-rank 0 -nproc 2 -master-addr node0 ./train -strategy ddp -num-nodes 2 -devices 2\n"+
			"  node1$ fulgur run -nnodes 2 -node-rank 1 -nproc 2 -master-addr node0 ./train -strategy ddp -num-nodes 2 -devices 2\n\nflags:\n")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	usage := fs.Usage
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		return runParseError(fs, args, err, usage)
	}
	min, max, err := parseNproc(*nproc)
	if err != nil {
		return err
	}
	if *grace <= 0 {
		return fmt.Errorf("run: -grace is %v: use a duration above 0, such as 30s", *grace)
	}
	if *restarts < 0 {
		return fmt.Errorf("run: -max-restarts is %d: use 0 (no restarts) or more", *restarts)
	}
	if *nnodes < 1 {
		return fmt.Errorf("run: -nnodes is %d: use 1 or more machines", *nnodes)
	}
	if *nnodes > 1 && (*nodeRank < 0 || *nodeRank >= *nnodes) {
		return fmt.Errorf("run: -node-rank is %d: use 0 to %d, this machine's place among -nnodes %d", *nodeRank, *nnodes-1, *nnodes)
	}
	if *nnodes == 1 && *nodeRank != 0 {
		return fmt.Errorf("run: -node-rank is %d but -nnodes is 1: give -nnodes, the number of machines, on every machine", *nodeRank)
	}
	if *masterPort < 0 || *masterPort > 65535 {
		return fmt.Errorf("run: -master-port is %d: use a free port 1..65535, or 0", *masterPort)
	}
	token := ""
	if *nnodes > 1 && *nodeRank > 0 && !flagSet(fs, "master-addr") {
		// On another machine the default is that machine itself: its
		// ranks would wait for a rank 0 that is not there.
		fmt.Fprintf(stderr, "fulgur: run: warning: -master-addr is not given, so the ranks look for node 0 at %s, this machine; on several machines give node 0's address (-master-addr node0)\n", *masterAddr)
	}
	if *nnodes > 1 {
		if *restarts > 0 || min != max {
			what, fix := fmt.Sprintf("-max-restarts %d", *restarts), "use -max-restarts 0"
			if *restarts > 0 && !flagSet(fs, "max-restarts") {
				// The user never gave the flag: name what they did set.
				what = fmt.Sprintf("$%s=%d", launch.EnvMaxRestarts, *restarts)
				fix = fmt.Sprintf("unset %s (or give -max-restarts 0)", launch.EnvMaxRestarts)
			}
			return fmt.Errorf("run: -nnodes %d with %s and -nproc %s: restarts do not cross machines; %s and a fixed -nproc, and restart the job with your scheduler (SLURM's --requeue), or by hand from its last checkpoint", *nnodes, what, *nproc, fix)
		}
		if *masterPort == 0 {
			*masterPort = 29500
		}
		if token = os.Getenv(launch.EnvToken); token == "" {
			return fmt.Errorf("run: -nnodes %d: %s is not set: export the same secret on every machine (export %s=$(openssl rand -hex 16)) so strangers cannot join the job", *nnodes, launch.EnvToken, launch.EnvToken)
		}
	}
	if *masterPort != 0 && *nodeRank == 0 {
		if err := portFree(*nnodes, *masterPort); err != nil {
			return err
		}
	}
	if fs.NArg() == 0 {
		usage()
		return errors.New("run: no PROGRAM given: pass the training program and its arguments, such as: fulgur run -nproc 2 -max-restarts 3 ./train -strategy ddp -devices 2")
	}
	prog, err := exec.LookPath(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("run: PROGRAM %q: %w", fs.Arg(0), err)
	}
	// Ctrl-C stops the job (its ranks save and end) rather than counting as
	// a failure; a repeat after launch.DuplicateSignalWindow ends this
	// process at once.
	ctx, stop := launch.StopOnSignal(context.Background())
	// The launcher's log and the ranks' lines meet on stderr from several
	// goroutines.
	stderr = &syncWriter{w: stderr}
	log := zerolog.New(zerolog.ConsoleWriter{Out: stderr, NoColor: true, TimeFormat: "15:04:05"}).With().Timestamp().Logger()
	_, err = launch.RunElastic(ctx, launch.Elastic{
		Program: prog, Args: fs.Args()[1:], World: max, MinWorld: min, MaxRestarts: *restarts, Grace: *grace,
		Nodes: *nnodes, NodeRank: *nodeRank, MasterAddr: *masterAddr, MasterPort: *masterPort, Token: token,
		Stdout: stdout, Stderr: stderr, Log: log,
		Command: launch.Command("fulgur", append([]string{"run"}, args[:len(args)-fs.NArg()]...)...),
	})
	if status := stop(); status != 0 {
		// Stopped by the user: exit as a rank does (130 for SIGINT, 143
		// for SIGTERM), not as a failed job.
		fmt.Fprintf(stderr, "fulgur: run: stopped by %s; the ranks were asked to save and end\n", signalName(status))
		return exitStatus(status)
	}
	var stopped *launch.StoppedError
	if errors.As(err, &stopped) {
		// Another machine's launcher or rank was interrupted: end as it
		// does (130, 143), not as a failed job.
		fmt.Fprintf(stderr, "fulgur: run: %v\n", err)
		return exitStatus(stopped.Status)
	}
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	return nil
}

// portFree checks that -master-port can be bound where this machine's rank
// 0 will listen (loopback on one machine, every interface on node 0 of
// several), so that a taken port is reported by the flag the user gave.
func portFree(nnodes, port int) error {
	host := "127.0.0.1"
	if nnodes > 1 {
		host = ""
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("run: -master-port %d: the rendezvous cannot listen there (%v): is another job using it? pick a free port, or leave -master-port out to let fulgur pick one on one machine (29500 on several)", port, err)
	}
	return ln.Close()
}

// flagSet reports whether the command line gave the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// syncWriter writes from one goroutine at a time.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// exitStatus is an exit status other than 2 for main to use, with nothing
// more to print.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func signalName(status int) string {
	if status == 128+int(syscall.SIGTERM) {
		return "SIGTERM"
	}
	return "SIGINT"
}

// parseNproc reads "N" or "MIN:MAX".
func parseNproc(v string) (min, max int, err error) {
	lo, hi, ranged := strings.Cut(v, ":")
	max, err1 := strconv.Atoi(strings.TrimSpace(hi))
	min, err2 := strconv.Atoi(strings.TrimSpace(lo))
	if !ranged {
		max, err1 = min, err2
	}
	if err1 != nil || err2 != nil || min < 1 || max < min {
		return 0, 0, fmt.Errorf("run: -nproc %q: use a number of ranks such as 2, or MIN:MAX such as 2:3 (1 ≤ MIN ≤ MAX)", v)
	}
	return min, max, nil
}

// envRestarts is FULGUR_MAX_RESTARTS, the default of -max-restarts.
func envRestarts() (int, error) {
	v := strings.TrimSpace(os.Getenv(launch.EnvMaxRestarts))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("run: %s=%q: use the number of restarts, 0 or more, or unset it", launch.EnvMaxRestarts, v)
	}
	return n, nil
}
