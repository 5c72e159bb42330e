package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Variables an elastic job (RunElastic) sets for every rank, besides those
// of Local.RankEnv. They play the part of torchrun's
// TORCHELASTIC_RESTART_COUNT and TORCHELASTIC_MAX_RESTARTS.
const (
	// EnvRestartCount is how many times the job was restarted before this
	// attempt: 0 on the first. A trainer that reads n ≥ 1 resumes from the
	// run's newest checkpoint (trainer.ElasticResume).
	EnvRestartCount = "FULGUR_RESTART_COUNT"
	// EnvMaxRestarts is Elastic.MaxRestarts.
	EnvMaxRestarts = "FULGUR_MAX_RESTARTS"
	// EnvElasticDir is a directory private to the job, the same in every
	// attempt: rank 0 of the first attempt records its run directory
	// there, so that the later attempts continue it.
	EnvElasticDir = "FULGUR_ELASTIC_DIR"
	// ElasticRunDirFile is the file in EnvElasticDir that holds the job's
	// run directory: written before the first attempt when Elastic.RunDir
	// is set, else by the first attempt's rank 0 at the start of its Fit.
	ElasticRunDirFile = "run_dir"
)

// DefaultGrace is how long Elastic.Grace waits by default.
const DefaultGrace = 30 * time.Second

// DefaultSettle is how long Elastic.Settle waits by default.
const DefaultSettle = 5 * time.Second

// Elastic describes a job of local ranks that RunElastic restarts from its
// last checkpoint when a rank fails, as torchrun's --max-restarts and
// --nnodes MIN:MAX and Horovod's elastic mode do.
type Elastic struct {
	// Program is the executable; "": this program (os.Executable).
	Program string
	// Args are its arguments; nil: this process's own (os.Args[1:]).
	Args []string
	// World is the number of ranks of the first attempt (MAX).
	World int
	// RunDir is the job's run directory (lightning_logs/version_N), when
	// the launcher knows it before starting the ranks: a ddp program that
	// supervises its own ranks chose it before Fit, as the program's code
	// did with trainer.VersionDir. Recorded before the first attempt
	// (ElasticRunDirFile), it is the run directory of every rank of every
	// attempt, so that ranks started together and naming their own with
	// VersionDir name the same one. "": the first attempt's rank 0 picks it.
	RunDir string
	// MinWorld is the fewest ranks a restart may run with (MIN); 0 means
	// World, a fixed size. While the world stays at or above it, the
	// slot of the rank that failed first is retired at a restart, as
	// Horovod's elastic mode blacklists a failed host: the job goes on
	// with World-1, World-2, ... ranks.
	MinWorld int
	// MaxRestarts is how many times the job is started again after a rank
	// failed (K). 0: never; the first failure ends the job.
	MaxRestarts int
	// Env is extra environment of each rank of each attempt (nil: none).
	Env func(rank int) []string
	// Stdout and Stderr receive every rank's output, whole lines at a
	// time: each line on stderr, and on stdout those of ranks other than
	// 0, after RankPrefix ("[rank1] "). A line longer than 64 KiB is
	// passed on in pieces as it comes, under one prefix. nil: this
	// process's.
	Stdout, Stderr io.Writer
	// Command is the launcher's own command line before the program,
	// quoted for a POSIX shell (see Command), given to every rank as
	// EnvLaunchCommand; "": none.
	Command string
	// Grace is how long the other ranks get to end once one has failed
	// before they are killed. 0: DefaultGrace.
	Grace time.Duration
	// Settle is the first part of Grace, in which the other ranks are left
	// to end on their own (a training rank sees its peer gone within the
	// collectives' timeout and stops with an error, its logs and
	// checkpoints whole). Those still running after it are sent SIGTERM,
	// as torchrun stops the rest of a job at once: a rank still starting
	// (waiting at the rendezvous for the rank that died) ends, and a
	// training rank finishes its step first. 0: DefaultSettle (or Grace,
	// if that is shorter).
	Settle time.Duration
	// Log receives what happened: each failure (which rank, how), each
	// restart (n of K, the new world size), the end.
	Log zerolog.Logger
	// MasterPort is the port of every attempt's rendezvous on 127.0.0.1
	// (MASTER_PORT); 0: a free one each time. With several Nodes, the
	// port at MasterAddr where the first machine's rank 0 listens.
	MasterPort int
	// Nodes is how many machines run the job (torchrun's --nnodes); 0 or
	// 1: this one only. With several, each machine runs its own launcher
	// with the same Nodes, World (its ranks per machine), MasterAddr,
	// MasterPort and Token and its own NodeRank; its ranks are
	// NodeRank×World ... NodeRank×World+World-1 of Nodes×World. Restarts
	// do not cross machines: MaxRestarts must be 0 and MinWorld World
	// (restart such a job with its scheduler, as SLURM's --requeue).
	Nodes int
	// NodeRank is this machine's place, 0 ... Nodes-1 (torchrun's
	// --node-rank); node 0 runs rank 0.
	NodeRank int
	// MasterAddr is the first machine's address, as every machine reaches
	// it (torchrun's --master-addr); used with several Nodes.
	MasterAddr string
	// Token is the job's FULGUR_TOKEN, the same on every machine; used
	// with several Nodes (one machine makes its own).
	Token string
}

// Attempt is how one start of the ranks of an elastic job ended.
type Attempt struct {
	// N counts from 0 (the first start).
	N     int
	World int
	// Failed is the rank that failed first (the cause; the others usually
	// lost their peer), with its last line of output. Nil when the
	// attempt completed.
	Failed *Exit
	Output string
	// Stopped is the exit status, 130 or 143, that every rank ended with
	// after saving (a fulgur program's answer to SIGINT or SIGTERM, which
	// the ranks agree on: one rank's signal stops them all); 0 otherwise.
	Stopped int
}

// StoppedError is RunElastic's error for a job of several machines whose
// ranks here all stopped and saved, as they do when a rank or launcher on
// another machine was interrupted: the job was stopped, not failed.
type StoppedError struct {
	// Status is the ranks' exit status: 130 (SIGINT) or 143 (SIGTERM).
	Status int
}

func (e *StoppedError) Error() string {
	return fmt.Sprintf("launch: the job was stopped: every rank on this machine saved and ended with status %d (%s reached the job, perhaps on another machine)", e.Status, SignalName(syscall.Signal(e.Status-128)))
}

// ElasticError is the error RunElastic returns when the job failed for
// good: restarts exhausted, a failure that repeats, or a world below
// MinWorld.
type ElasticError struct {
	Attempts []Attempt
	Reason   string
	// Nodes and NodeRank place this machine in a job of several machines
	// (Nodes above 1), which is never restarted: the error then names
	// the machine rather than an attempt.
	Nodes, NodeRank int
}

func (e *ElasticError) Error() string {
	last := e.Attempts[len(e.Attempts)-1]
	var s string
	if e.Nodes > 1 {
		ranks := "ranks"
		if last.World == 1 {
			ranks = "rank"
		}
		s = fmt.Sprintf("launch: the job failed: %s (%d %s of node %d of %d)", last.Failed, last.World, ranks, e.NodeRank, e.Nodes)
	} else {
		s = fmt.Sprintf("launch: elastic job failed: %s in attempt %d (%d ranks)", last.Failed, last.N+1, last.World)
	}
	if last.Output != "" {
		s += fmt.Sprintf(" (its last output: %q)", last.Output)
	}
	return s + ": " + e.Reason
}

// RunElastic runs the job to its end: it starts World ranks on this
// machine with torchrun-style variables (rank 0 gets the rendezvous port
// already bound, FULGUR_LAUNCHER=elastic), and when a rank fails it stops
// the others, then starts the ranks again, up to MaxRestarts times: the
// program resumes from its last checkpoint (EnvRestartCount tells it to).
// It gives up early, with an error naming the rank, when the same rank
// fails the same way (the same exit status and last line of output) in two
// attempts in a row: such a failure (a panic at step N, say) is the
// program's and would repeat at every restart. A rank killed by a signal
// (the OOM killer, an operator, a lost machine) is never taken for that.
func RunElastic(ctx context.Context, e Elastic) ([]Attempt, error) {
	if err := e.validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fulgur-elastic-")
	if err != nil {
		return nil, fmt.Errorf("launch: make the elastic job's state directory: %w", err)
	}
	defer os.RemoveAll(dir)
	if e.RunDir != "" {
		if err := os.WriteFile(filepath.Join(dir, ElasticRunDirFile), []byte(e.RunDir), 0o644); err != nil {
			return nil, fmt.Errorf("launch: record the elastic job's run directory: %w", err)
		}
	}
	world := e.World
	var attempts []Attempt
	for n := 0; ; n++ {
		a, err := e.attempt(ctx, n, world, dir)
		if err != nil {
			return attempts, err
		}
		attempts = append(attempts, a)
		if a.Failed == nil {
			if e.Nodes > 1 && e.NodeRank > 0 {
				// Its ranks wrote no run directory and printed no result:
				// say where they are, rather than end in silence.
				e.Log.Info().Int("node_rank", e.NodeRank).Msgf("this machine's ranks completed; a fulgur program keeps the job's run directory (checkpoints, metrics) and prints its result on node 0 (%s), where rank 0 ran", e.MasterAddr)
			}
			if n > 0 {
				e.Log.Info().Int("restarts", n).Int("world", world).Msg("elastic: the job completed after restarting")
			}
			return attempts, nil
		}
		if a.Stopped != 0 && e.Nodes > 1 {
			return attempts, &StoppedError{Status: a.Stopped}
		}
		if ctx.Err() != nil {
			// The stop this process got reached the ranks first (on a
			// loaded machine its own watcher may run after they saved and
			// exited): they ended on it, as their output says, and did not
			// fail.
			return attempts, fmt.Errorf("launch: elastic job stopped: %w", ctx.Err())
		}
		ev := e.Log.Error().Int("rank", a.Failed.Rank).Int("pid", a.Failed.Pid).Str("how", describe(a.Failed.Err)).Int("attempt", n+1).Int("world", world)
		if a.Output != "" {
			ev = ev.Str("last_output", a.Output)
		}
		ev.Msg(e.label() + ": a rank failed; the other ranks were stopped")
		if sig, ok := a.Failed.Signal(); ok && sig == syscall.SIGINT {
			// Ctrl-C reached a rank before its program handled signals;
			// this process got it too, and may not have read it yet.
			return attempts, fmt.Errorf("launch: elastic job stopped: %w", &ExitError{Failed: []Exit{*a.Failed}})
		}
		switch {
		case e.MaxRestarts == 0 && e.Nodes > 1:
			return attempts, &ElasticError{Attempts: attempts, Nodes: e.Nodes, NodeRank: e.NodeRank, Reason: fmt.Sprintf("a job on %d machines is not restarted: start every machine's launcher again with the program resuming from the run's last checkpoint (a fulgur program: -ckpt-path naming the last.ckpt that rank 0 saved in its run directory on node 0, which every machine needs at that path: a -root-dir every machine sees, or a copy), or let its scheduler restart it", e.Nodes)}
		case e.MaxRestarts == 0:
			return attempts, &ElasticError{Attempts: attempts, Reason: fmt.Sprintf("restarts are off (MaxRestarts 0: fulgur run's -max-restarts, %s)", EnvMaxRestarts)}
		case n >= e.MaxRestarts:
			return attempts, &ElasticError{Attempts: attempts, Reason: fmt.Sprintf("the job has used all %d restarts (MaxRestarts %d)", n, e.MaxRestarts)}
		}
		if n > 0 && sameFailure(attempts[n-1], a) {
			return attempts, &ElasticError{Attempts: attempts, Reason: fmt.Sprintf("it failed the same way in attempt %d, so the failure is the program's and restarting again would repeat it (restart %d of %d not done): fix the program, then resume from its last checkpoint", n, n+1, e.MaxRestarts)}
		}
		prev := world
		if world-1 >= e.MinWorld {
			world-- // the failed rank's slot is retired
		}
		e.Log.Warn().Int("restart", n+1).Int("max_restarts", e.MaxRestarts).Int("world", world).Int("previous_world", prev).Int("min_world", e.MinWorld).
			Msgf("elastic: restart %d of %d with %d ranks (was %d), from the last checkpoint", n+1, e.MaxRestarts, world, prev)
	}
}

// label starts the log lines of e: "elastic" for a job that restarts its
// ranks, "launcher" for one that only starts and watches them (fulgur run
// without -max-restarts), where "elastic" would promise restarts that never
// come.
func (e *Elastic) label() string {
	if e.MaxRestarts > 0 {
		return "elastic"
	}
	return "launcher"
}

func (e *Elastic) validate() error {
	var errs []error
	if e.World < 1 {
		errs = append(errs, fmt.Errorf("launch: Elastic.World is %d: start 1 or more ranks", e.World))
	}
	if e.MinWorld < 0 || e.MinWorld > e.World {
		errs = append(errs, fmt.Errorf("launch: Elastic.MinWorld is %d: use 1 to World (%d), or 0 for a fixed world", e.MinWorld, e.World))
	}
	if e.MaxRestarts < 0 {
		errs = append(errs, fmt.Errorf("launch: Elastic.MaxRestarts is %d: use 0 (no restarts) or more", e.MaxRestarts))
	}
	if e.Nodes < 0 {
		errs = append(errs, fmt.Errorf("launch: Elastic.Nodes is %d: use 1 or more machines", e.Nodes))
	}
	if e.Nodes > 1 {
		if e.NodeRank < 0 || e.NodeRank >= e.Nodes {
			errs = append(errs, fmt.Errorf("launch: Elastic.NodeRank is %d: use 0 to %d (Nodes is %d)", e.NodeRank, e.Nodes-1, e.Nodes))
		}
		if e.MaxRestarts > 0 || (e.MinWorld != 0 && e.MinWorld != e.World) {
			errs = append(errs, fmt.Errorf("launch: a job on %d machines is not restarted (MaxRestarts %d, MinWorld %d): use MaxRestarts 0 and a fixed world, and restart the job with its scheduler (SLURM's --requeue)", e.Nodes, e.MaxRestarts, e.MinWorld))
		}
		if strings.TrimSpace(e.MasterAddr) == "" {
			errs = append(errs, fmt.Errorf("launch: a job on %d machines needs MasterAddr, the first machine's address as the others reach it", e.Nodes))
		}
		if e.MasterPort < 1 || e.MasterPort > 65535 {
			errs = append(errs, fmt.Errorf("launch: a job on %d machines needs MasterPort, the same free port 1..65535 on every machine's launcher (it is %d)", e.Nodes, e.MasterPort))
		}
		if e.Token == "" {
			errs = append(errs, fmt.Errorf("launch: a job on %d machines needs the same %s on every machine: export %s=$(openssl rand -hex 16) and hand it to each", e.Nodes, EnvToken, EnvToken))
		}
	}
	if e.MinWorld == 0 {
		e.MinWorld = e.World
	}
	if e.Grace <= 0 {
		e.Grace = DefaultGrace
	}
	if e.Settle <= 0 {
		e.Settle = DefaultSettle
	}
	e.Settle = min(e.Settle, e.Grace)
	if e.Stdout == nil {
		e.Stdout = os.Stdout
	}
	if e.Stderr == nil {
		e.Stderr = os.Stderr
	}
	return errors.Join(errs...)
}

// sameFailure: the same rank failed the same way, on its own (an exit
// status, not a signal), with the same last line of output.
func sameFailure(a, b Attempt) bool {
	if a.Failed == nil || b.Failed == nil || a.Failed.Rank != b.Failed.Rank {
		return false
	}
	var ea, eb *exec.ExitError
	if !errors.As(a.Failed.Err, &ea) || !errors.As(b.Failed.Err, &eb) || ea.ExitCode() < 0 || ea.ExitCode() != eb.ExitCode() {
		return false // killed by a signal (ExitCode -1), or not an exit at all
	}
	return volatile.ReplaceAllString(a.Output, "#") == volatile.ReplaceAllString(b.Output, "#")
}

// volatile matches what differs between two runs of one failure: times of
// day, dates, addresses, process ids.
var volatile = regexp.MustCompile(`\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-][0-9:]+)?|\d{1,2}:\d\d(:\d\d)?(\.\d+)?(AM|PM)?|0x[0-9a-fA-F]+|pid[ =]\d+`)

// attempt starts world ranks and waits for them: all done, or the first
// failure (then the others get Grace to end before they are killed).
func (e *Elastic) attempt(ctx context.Context, n, world int, dir string) (Attempt, error) {
	a := Attempt{N: n, World: world}
	local := Local{World: world, MasterPort: e.MasterPort, Token: e.Token, MasterAddr: e.MasterAddr, Launcher: "elastic"}
	// base is the global rank of this machine's first rank; the machine of
	// several that holds none of rank 0 leaves the rendezvous to another.
	base, nodeEnv := 0, []string(nil)
	var lnFile *os.File
	if e.Nodes > 1 {
		base = e.NodeRank * world
		nodeEnv = []string{EnvWorldSize + "=" + strconv.Itoa(e.Nodes*world), EnvNodeRank + "=" + strconv.Itoa(e.NodeRank)}
	} else {
		ln, port, err := Loopback(e.MasterPort)
		if err != nil {
			return a, err
		}
		lnFile, err = ln.(interface{ File() (*os.File, error) }).File()
		ln.Close()
		if err != nil {
			return a, fmt.Errorf("launch: hand the rendezvous port to rank 0: %w", err)
		}
		defer lnFile.Close()
		if local.Token, err = NewToken(); err != nil {
			return a, err
		}
		local.MasterPort, local.MasterAddr = port, ""
	}
	ranks := make([]int, world)
	tails := make(map[int]*tail, world)
	// Every rank's line reaches the terminal whole and, on stderr, after
	// its rank; rank 0's stdout is left as the program wrote it, so that
	// its last line (a fulgur program's JSON result) can be piped on.
	stdout, stderr := &sharedOut{w: e.Stdout}, &sharedOut{w: e.Stderr}
	outs := make([]*labelled, 0, 2*world)
	for i := range ranks {
		ranks[i] = base + i
		tails[base+i] = &tail{}
	}
	defer func() {
		for _, o := range outs {
			o.Flush()
		}
	}()
	g, err := Start(context.WithoutCancel(ctx), Config{ // a stop is passed on below, not a kill
		Program: e.Program, Args: e.Args, Ranks: ranks,
		Env: func(r int) []string {
			env := append(local.RankEnv(r), EnvRestartCount+"="+strconv.Itoa(n), EnvMaxRestarts+"="+strconv.Itoa(e.MaxRestarts), EnvElasticDir+"="+dir)
			if nodeEnv != nil { // later entries win over RankEnv's one-machine values
				env = append(env, nodeEnv...)
				env = append(env, EnvLocalRank+"="+strconv.Itoa(r-base))
			}
			if e.Command != "" {
				env = append(env, EnvLaunchCommand+"="+e.Command)
			}
			if r == 0 && lnFile != nil {
				env = append(env, EnvListenerFD+"=3")
			}
			if e.Env != nil {
				env = append(env, e.Env(r)...)
			}
			return env
		},
		Files: func(r int) []*os.File {
			if r == 0 && lnFile != nil {
				return []*os.File{lnFile}
			}
			return nil
		},
		Writers: func(r int) (io.Writer, io.Writer) {
			o := &labelled{out: stdout}
			if r != 0 {
				o.prefix = []byte(RankPrefix(r))
			}
			ee := &labelled{out: stderr, prefix: []byte(RankPrefix(r))}
			outs = append(outs, o, ee)
			return io.MultiWriter(o, tails[r]), io.MultiWriter(ee, tails[r])
		},
	})
	if err != nil {
		return a, err
	}
	if lnFile != nil {
		lnFile.Close()
	}
	ev := e.Log.Info().Int("attempt", n+1).Int("world", world).Ints("pids", g.Pids()).Int("master_port", local.MasterPort)
	if e.Nodes > 1 {
		// world counts this machine's ranks: say which of the job's.
		ev = ev.Ints("ranks", ranks).Int("node_rank", e.NodeRank).Int("job_world", e.Nodes*world)
	}
	ev.Msg(e.label() + ": started the ranks")
	failed := false
	for !failed {
		select {
		case x := <-g.Exits():
			failed = x.Err != nil
		case <-g.Done():
			failed = len(g.Failed()) > 0
			if !failed {
				g.stop()
				return a, nil
			}
		case <-ctx.Done():
			// As torchrun, pass the stop on: a fulgur Trainer finishes its
			// step and saves interrupted.ckpt on SIGINT or SIGTERM (a
			// repeat of the terminal's SIGINT within 2 s counts as the same
			// request). The signal that stopped this process (StopOnSignal)
			// goes on as it came, so that a rank reached by it before the
			// terminal's own ends as the user's Ctrl-C says (130, not 143);
			// SIGTERM otherwise.
			var sig os.Signal = syscall.SIGTERM
			var ss *StopSignal
			if errors.As(context.Cause(ctx), &ss) {
				sig = ss.Signal
			}
			g.Signal(sig)
			t := time.NewTimer(e.Grace)
			select {
			case <-g.Done():
			case <-t.C:
				g.Kill()
				<-g.Done()
			}
			t.Stop()
			g.stop()
			why := "its context was cancelled"
			if ss != nil {
				why = "this process got " + SignalName(ss.Signal)
			}
			return a, &jobStopped{err: ctx.Err(), msg: fmt.Sprintf("launch: elastic job stopped (the ranks were sent %s): %s; a rank that had started training saved a checkpoint, as its output says; not restarted", SignalName(sig), why)}
		}
	}
	start := time.Now()
	t := time.NewTimer(e.Settle)
	var signalled []int // ended by the launcher: never the cause
	select {
	case <-g.Done():
	case <-t.C:
		if running := g.Running(); len(running) > 0 {
			signalled = running
			e.Log.Info().Ints("ranks", running).Stringer("settle", e.Settle).Msg(e.label() + ": ranks still ran after the first failure: sending them SIGTERM")
			g.Signal(syscall.SIGTERM)
			t.Reset(e.Grace - time.Since(start))
			select {
			case <-g.Done():
			case <-t.C:
			}
		}
	}
	t.Stop()
	failures := g.Failed() // before the launcher kills anything
	a.Stopped = stoppedStatus(g.Exited(), world)
	if running := g.Running(); len(running) > 0 {
		e.Log.Warn().Ints("ranks", running).Stringer("grace", e.Grace).Msg(e.label() + ": ranks still ran after the first failure: killing them")
		g.Kill()
		<-g.Done()
	}
	g.stop()
	failures = slices.DeleteFunc(failures, func(x Exit) bool { return slices.Contains(signalled, x.Rank) })
	first := cause(failures, tails)
	a.Failed = &first
	a.Output = tails[first.Rank].last()
	return a, nil
}

// stoppedStatus is the status, 130 or 143, that all world ranks exited
// with on their own; 0 when any ended otherwise or still ran.
func stoppedStatus(exits []Exit, world int) int {
	if len(exits) != world {
		return 0
	}
	status := 0
	for _, x := range exits {
		var ee *exec.ExitError
		if !errors.As(x.Err, &ee) {
			return 0
		}
		c := ee.ExitCode()
		if (c != 130 && c != 143) || (status != 0 && c != status) {
			return 0
		}
		status = c
	}
	return status
}

// cause picks the rank whose failure ended the attempt. The exits arrive
// in the order their reapers ran, which need not be the order the
// processes died in, and a rank that lost its peer exits on its own right
// after: so a rank killed by a signal comes first, then one whose output
// does not say it lost a peer (the collectives' "peer lost"), then the
// earliest. Ranks that failed the same way (every rank of a program
// that fails at the same line, say) name the lowest of them, whichever
// was reaped first, so that sameFailure sees such a failure repeat.
func cause(failures []Exit, tails map[int]*tail) Exit {
	best, score := failures[0], -1
	for _, x := range failures {
		s := 0
		var ee *exec.ExitError
		if errors.As(x.Err, &ee) && ee.ExitCode() < 0 {
			s = 2
		} else if !strings.Contains(tails[x.Rank].all(), "peer lost") {
			s = 1
		}
		if s > score || (s == score && x.Rank < best.Rank && sameExit(x, best, tails)) {
			best, score = x, s
		}
	}
	return best
}

// sameExit: two ranks exited with the same status and the same last line.
func sameExit(a, b Exit, tails map[int]*tail) bool {
	var ea, eb *exec.ExitError
	if !errors.As(a.Err, &ea) || !errors.As(b.Err, &eb) || ea.ExitCode() != eb.ExitCode() {
		return false
	}
	return volatile.ReplaceAllString(tails[a.Rank].last(), "#") == volatile.ReplaceAllString(tails[b.Rank].last(), "#")
}

// tail keeps the last lines a rank wrote, and its first line that reports
// a panic (Go's "panic: ", the trainer's "panicked: ").
type tail struct {
	mu          sync.Mutex
	buf         []byte
	line, panic string
	lines       []string // the last 20
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	for {
		i := strings.IndexByte(string(t.buf), '\n')
		if i < 0 {
			break
		}
		if l := strings.TrimSpace(string(t.buf[:i])); l != "" {
			t.line = l
			if t.panic == "" && (strings.HasPrefix(l, "panic: ") || strings.Contains(l, "panicked: ")) {
				t.panic = l
			}
			t.lines = append(t.lines, l)
			if len(t.lines) > 20 {
				t.lines = t.lines[1:]
			}
		}
		t.buf = t.buf[i+1:]
	}
	if len(t.buf) > 4<<10 {
		t.buf = t.buf[len(t.buf)-4<<10:]
	}
	return len(p), nil
}

func (t *tail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.panic != "" {
		return t.panic
	}
	if l := strings.TrimSpace(string(t.buf)); l != "" {
		return l
	}
	return t.line
}

// Shrunk reports whether a rank (lookup reads its environment) belongs to
// an elastic job that restarted with world ranks, fewer than the want its
// program asks for (Devices × NumNodes): RunElastic retired failed ranks'
// slots, down to its MinWorld. The first attempt starts the whole world, so
// there fewer ranks than wanted are a mismatch, not a shrink.
func Shrunk(lookup func(string) (string, bool), world, want int) bool {
	v, _ := lookup(EnvLauncher)
	n, _ := lookup(EnvRestartCount)
	restarts, err := strconv.Atoi(strings.TrimSpace(n))
	return v == "elastic" && err == nil && restarts >= 1 && world >= 1 && world < want
}

func (t *tail) all() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n") + "\n" + string(t.buf)
}

// EnvMinWorld is the fewest ranks a self-launched elastic job may restart
// with (Elastic.MinWorld), read by ElasticFromEnv.
const EnvMinWorld = "FULGUR_MIN_WORLD"

// ElasticFromEnv is the elastic job a program that starts its own world
// ranks (ddp's self-launch) runs when lookup finds FULGUR_MAX_RESTARTS
// above 0 (and FULGUR_MIN_WORLD, default world); nil when it is unset or 0.
func ElasticFromEnv(lookup func(string) (string, bool), world int, log zerolog.Logger) (*Elastic, error) {
	v, _ := lookup(EnvMaxRestarts)
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var errs []error
	k, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || k < 0 {
		errs = append(errs, fmt.Errorf("%s=%q: use the number of restarts, 0 or more", EnvMaxRestarts, v))
	}
	min := world
	if m, _ := lookup(EnvMinWorld); strings.TrimSpace(m) != "" {
		if min, err = strconv.Atoi(strings.TrimSpace(m)); err != nil || min < 1 || min > world {
			errs = append(errs, fmt.Errorf("%s=%q: use 1 to the %d ranks the job starts with", EnvMinWorld, m, world))
		}
	}
	port, err := MasterPortFromEnv(lookup)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil || k == 0 {
		return nil, err
	}
	return &Elastic{World: world, MinWorld: min, MaxRestarts: k, Log: log, MasterPort: port}, nil
}

// Supervise runs e in place of this process's own part in the job, and
// exits: status 0 when the job completed, 1 (the error printed to stderr)
// when it failed for good. This process then trains nothing: like torchrun
// it starts every rank, rank 0 included, as a copy of itself, and the code
// after Fit runs in rank 0.
//
// As torchrun's agent (and fulgur run), a SIGINT or SIGTERM stops the job
// rather than counting as a failure: the terminal's Ctrl-C reaches every
// rank too, each saves its checkpoint and ends, and restarting them would
// train on after the user asked to stop. It then exits 130 (SIGINT) or
// 143 (SIGTERM), as a rank does.
func Supervise(ctx context.Context, e Elastic) {
	e.Log.Info().Int("world", e.World).Int("min_world", max(e.MinWorld, 1)).Int("max_restarts", e.MaxRestarts).
		Msg("elastic: this process supervises the job: it starts every rank, rank 0 included, and restarts them when one fails")
	ctx, stop := StopOnSignal(ctx)
	_, err := RunElastic(ctx, e)
	status := stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		var ee *ExitError
		if errors.As(err, &ee) && status == 0 {
			if sig, ok := ee.StopSignal(); ok {
				status = 128 + int(sig) // Ctrl-C read by a rank first
			}
		}
		if status != 0 {
			os.Exit(status)
		}
		os.Exit(1)
	}
	os.Exit(0)
}

// StopOnSignal returns ctx cancelled when this process gets SIGINT or
// SIGTERM, for RunElastic in a launcher the user can stop from the
// terminal (RunElastic then stops the ranks instead of restarting them),
// and a function that releases it and returns the exit status that signal
// stands for: 130 (SIGINT), 143 (SIGTERM), or 0 when none came. Signals
// are read as WatchStopSignals reads them: repeats within
// DuplicateSignalWindow are the same request, and a signal after it ends
// this process at once (the ranks die with it, by their parent-death
// signal), for a user whose ranks take too long to save.
//
// The context's cause (context.Cause) is then a *StopSignal naming it.
func StopOnSignal(ctx context.Context) (context.Context, func() int) {
	ctx, cancel := context.WithCancelCause(ctx)
	var status atomic.Int32
	unwatch := WatchStopSignals([]os.Signal{os.Interrupt, syscall.SIGTERM}, func(s os.Signal, first bool) {
		if !first {
			return
		}
		status.Store(130)
		if s == syscall.SIGTERM {
			status.Store(143)
		}
		cancel(&StopSignal{Signal: s})
	}, nil)
	return ctx, func() int {
		unwatch()
		cancel(nil)
		return int(status.Load())
	}
}

// StopSignal is the cause of a context StopOnSignal cancelled: the signal
// that came.
type StopSignal struct{ Signal os.Signal }

// jobStopped is RunElastic's error when its context ended the job: it reads
// as why (a signal, not Go's "context canceled") and unwraps to the
// context's error.
type jobStopped struct {
	err error
	msg string
}

func (e *jobStopped) Error() string { return e.msg }
func (e *jobStopped) Unwrap() error { return e.err }

func (s *StopSignal) Error() string { return "stopped by " + SignalName(s.Signal) }
