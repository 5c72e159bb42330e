package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	fs.SetOutput(stderr)
	nproc := fs.String("nproc", "2", "ranks to start on this machine: N, or MIN:MAX to let restarts go on with fewer ranks, down to MIN (as torchrun's --nnodes MIN:MAX)")
	defRestarts, err := envRestarts()
	if err != nil {
		return err
	}
	restarts := fs.Int("max-restarts", defRestarts, "times the job is restarted from its last checkpoint after a rank fails (as torchrun's --max-restarts; default $"+launch.EnvMaxRestarts+" or 0)")
	grace := fs.Duration("grace", launch.DefaultGrace, "how long the other ranks get to stop after one failed, before they are killed (after the first 5s they are sent SIGTERM)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: fulgur run [flags] PROGRAM [ARGS...]\n\n"+
			"Starts NPROC copies of PROGRAM on this machine as the ranks of one job, with\n"+
			"torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,\n"+
			"FULGUR_TOKEN). When a rank fails, the others are stopped and the job is started\n"+
			"again, up to -max-restarts times; a fulgur Trainer resumes from the run's newest\n"+
			"checkpoint and goes on in the same run directory. With -nproc MIN:MAX each\n"+
			"restart retires the failed rank's slot while at least MIN ranks remain.\n"+
			"A rank that fails the same way twice in a row is not restarted again.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
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
	if fs.NArg() == 0 {
		fs.Usage()
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
		Stdout: stdout, Stderr: stderr, Log: log,
	})
	if status := stop(); status != 0 {
		// Stopped by the user: exit as a rank does (130 for SIGINT, 143
		// for SIGTERM), not as a failed job.
		fmt.Fprintf(stderr, "fulgur: run: stopped by %s; the ranks were asked to save and end\n", signalName(status))
		return exitStatus(status)
	}
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	return nil
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
