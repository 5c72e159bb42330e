package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Variables set for every started rank.
const (
	EnvRank           = "RANK"
	EnvWorldSize      = "WORLD_SIZE"
	EnvLocalRank      = "LOCAL_RANK"
	EnvLocalWorldSize = "LOCAL_WORLD_SIZE"
	EnvNodeRank       = "NODE_RANK"
	EnvGroupRank      = "GROUP_RANK"
	EnvMasterAddr     = "MASTER_ADDR"
	EnvMasterPort     = "MASTER_PORT"
	// EnvToken carries the shared secret of the rendezvous (rendezvous.TokenEnv).
	EnvToken = "FULGUR_TOKEN"
	// EnvLauncher marks a process started by this package ("ddp" or
	// "ddp_spawn"), so a worker knows it must not launch again.
	EnvLauncher = "FULGUR_LAUNCHER"
	// EnvResult is where rank 0 of a ddp_spawn job writes its result.
	EnvResult = "FULGUR_SPAWN_RESULT"
	// EnvRunDir is the run directory the launching process chose (where
	// the ranks' rank_N.log go), so that a rank's program that computes
	// its run directory finds the same one rather than the next version.
	EnvRunDir = "FULGUR_RUN_DIR"
	// EnvParentFD is the file descriptor of a pipe from the launching
	// process to a rank started with Config.Linger: it reads end of file
	// once the launching process is gone (see WatchParent).
	EnvParentFD = "FULGUR_PARENT_FD"
	// EnvListenerFD is the file descriptor of an already-bound rendezvous
	// listener handed to rank 0 (ddp_spawn), so that no other program can
	// take the port between its choice and its use.
	EnvListenerFD = "FULGUR_RENDEZVOUS_FD"
	// EnvLaunchCommand is the launcher's own command line before the
	// program, quoted for a POSIX shell ("fulgur run -nproc 2"), which
	// fulgur run gives its ranks (Elastic.Command): a rank that says how to
	// resume puts it before its own command line.
	EnvLaunchCommand = "FULGUR_LAUNCH_COMMAND"
)

// launchVars are removed from the inherited environment before a rank's own
// are added, so a stale value can never win.
var launchVars = []string{EnvRank, EnvWorldSize, EnvLocalRank, EnvLocalWorldSize, EnvNodeRank, EnvGroupRank,
	EnvMasterAddr, EnvMasterPort, EnvToken, EnvLauncher, EnvResult, EnvListenerFD, EnvParentFD, EnvRunDir, EnvLaunchCommand, "NNODES"}

// Local describes a job of World ranks on this machine.
type Local struct {
	World      int
	MasterAddr string // default 127.0.0.1
	MasterPort int
	Token      string
	Launcher   string // value of EnvLauncher
	ResultPath string // ddp_spawn only
	RunDir     string // value of EnvRunDir ("": not set)
}

// RankEnv is the environment a rank of the job gets on top of the parent's.
func (l Local) RankEnv(rank int) []string {
	addr := l.MasterAddr
	if addr == "" {
		addr = "127.0.0.1"
	}
	env := []string{
		EnvRank + "=" + strconv.Itoa(rank),
		EnvWorldSize + "=" + strconv.Itoa(l.World),
		EnvLocalRank + "=" + strconv.Itoa(rank),
		EnvLocalWorldSize + "=" + strconv.Itoa(l.World),
		EnvNodeRank + "=0",
		EnvMasterAddr + "=" + addr,
		EnvMasterPort + "=" + strconv.Itoa(l.MasterPort),
		EnvToken + "=" + l.Token,
		EnvLauncher + "=" + l.Launcher,
	}
	if l.ResultPath != "" {
		env = append(env, EnvResult+"="+l.ResultPath)
	}
	if l.RunDir != "" {
		env = append(env, EnvRunDir+"="+l.RunDir)
	}
	return env
}

// Config describes the processes Start runs.
type Config struct {
	// Program is the executable; "": this program (os.Executable).
	Program string
	// Args are its arguments; nil: this process's own (os.Args[1:]).
	Args []string
	// Ranks are the ranks to start, one process each.
	Ranks []int
	// Env is the extra environment of each rank, added to this process's
	// (where it replaces the launch variables).
	Env func(rank int) []string
	// Files are extra open files of each rank, from descriptor 3 on (nil:
	// none).
	Files func(rank int) []*os.File
	// Stdout and Stderr receive the children's output. nil: this process's.
	Stdout, Stderr io.Writer
	// Writers, when set, gives each rank its own stdout and stderr
	// (instead of Stdout and Stderr).
	Writers func(rank int) (stdout, stderr io.Writer)
	// Output, when set, opens the file that receives a rank's stdout and
	// stderr instead (Start closes its own copy once the rank started).
	Output func(rank int) (*os.File, error)
	// Linger, when positive, lets the ranks outlive this process instead of
	// dying with it: each gets a pipe from this process (EnvParentFD) and,
	// calling WatchParent, exits Linger after this process is gone if its
	// program has not ended by then. A rank that is in a collective with
	// this process fails at once anyway. 0: the ranks die with this process
	// (PDEATHSIG on Linux).
	Linger time.Duration
}

// Exit is how one rank's process ended.
type Exit struct {
	Rank int
	Pid  int
	Err  error // nil when it exited with status 0
	At   time.Time
}

func (e Exit) String() string {
	if e.Err == nil {
		return fmt.Sprintf("rank %d (pid %d) exited normally", e.Rank, e.Pid)
	}
	return fmt.Sprintf("rank %d (pid %d) %v", e.Rank, e.Pid, describe(e.Err))
}

// Signal is the signal that killed the rank, if one did (known on Linux
// only).
func (e Exit) Signal() (syscall.Signal, bool) {
	var ee *exec.ExitError
	if !errors.As(e.Err, &ee) {
		return 0, false
	}
	return killedBy(ee)
}

func describe(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := waitStatus(ee); ok {
			return ws
		}
		return "exited with status " + strconv.Itoa(ee.ExitCode())
	}
	return "failed: " + err.Error()
}

// Group is a set of started rank processes.
type Group struct {
	cmds   []*exec.Cmd
	ranks  []int
	exits  chan Exit
	mu     sync.Mutex
	done   []Exit
	allOut chan struct{}
	once   sync.Once
	stop   context.CancelFunc
	alive  *os.File // write end of the Linger pipe, held until this process ends
}

// Start starts one process per rank. It returns once every process has
// started (or none has: on error, the started ones are killed).
func Start(ctx context.Context, cfg Config) (*Group, error) {
	if len(cfg.Ranks) == 0 {
		return nil, errors.New("launch: no ranks to start")
	}
	prog := cfg.Program
	if prog == "" {
		p, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("launch: find this program to start its other ranks: %w", err)
		}
		prog = p
	}
	args := cfg.Args
	if args == nil {
		args = os.Args[1:]
	}
	base := withoutVars(os.Environ(), launchVars)
	ctx, stop := context.WithCancel(ctx)
	g := &Group{ranks: slices.Clone(cfg.Ranks), exits: make(chan Exit, len(cfg.Ranks)), allOut: make(chan struct{}), stop: stop}
	var aliveR *os.File
	if cfg.Linger > 0 {
		r, w, err := os.Pipe() // close-on-exec: only the ranks' ExtraFiles carry r
		if err != nil {
			stop()
			return nil, fmt.Errorf("launch: make the pipe that tells ranks this process is gone: %w", err)
		}
		aliveR, g.alive = r, w
		defer aliveR.Close()
	}
	for _, r := range cfg.Ranks {
		cmd := exec.Command(prog, args...)
		cmd.Env = append(slices.Clone(base), cfg.Env(r)...)
		cmd.Stdin = nil
		cmd.Stdout, cmd.Stderr = cfg.Stdout, cfg.Stderr
		if cmd.Stdout == nil {
			cmd.Stdout = os.Stdout
		}
		if cmd.Stderr == nil {
			cmd.Stderr = os.Stderr
		}
		if cfg.Writers != nil {
			cmd.Stdout, cmd.Stderr = cfg.Writers(r)
		}
		if cfg.Output != nil {
			f, err := cfg.Output(r)
			if err != nil {
				closeOutputs(g.cmds)
				stop()
				return nil, fmt.Errorf("launch: rank %d's output: %w", r, err)
			}
			cmd.Stdout, cmd.Stderr = f, f
		}
		if cfg.Files != nil {
			cmd.ExtraFiles = cfg.Files(r)
		}
		cmd.SysProcAttr = sysProcAttr()
		if aliveR != nil {
			cmd.Env = append(cmd.Env, EnvParentFD+"="+strconv.Itoa(3+len(cmd.ExtraFiles)))
			cmd.ExtraFiles = append(cmd.ExtraFiles, aliveR)
			cmd.SysProcAttr = nil
		}
		g.cmds = append(g.cmds, cmd)
	}
	started := make(chan error, 1)
	// One goroutine locked to one OS thread starts every child and stays
	// until they have all exited: PDEATHSIG fires when the thread that
	// started a child ends, so that thread must live as long as the parent
	// needs the child.
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for i, cmd := range g.cmds {
			if err := cmd.Start(); err != nil {
				for _, c := range g.cmds[:i] {
					c.Process.Kill()
					c.Wait()
				}
				started <- fmt.Errorf("launch: start rank %d (%s): %w", g.ranks[i], prog, err)
				return
			}
		}
		started <- nil
		var wg sync.WaitGroup
		for i, cmd := range g.cmds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := cmd.Wait()
				e := Exit{Rank: g.ranks[i], Pid: cmd.Process.Pid, Err: err, At: time.Now()}
				g.mu.Lock()
				g.done = append(g.done, e)
				g.mu.Unlock()
				g.exits <- e
			}()
		}
		go func() {
			select {
			case <-ctx.Done():
				g.Kill()
			case <-g.allOut:
			}
		}()
		wg.Wait()
		close(g.allOut)
	}()
	err := <-started
	closeOutputs(g.cmds) // the children hold their own descriptors
	if err != nil {
		stop()
		return nil, err
	}
	return g, nil
}

func closeOutputs(cmds []*exec.Cmd) {
	for _, c := range cmds {
		if f, ok := c.Stdout.(*os.File); ok && f != os.Stdout && f != os.Stderr {
			f.Close()
		}
	}
}

func withoutVars(env, drop []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(drop, k) {
			out = append(out, kv)
		}
	}
	return out
}

// Pids returns the process ids, in the order of Config.Ranks.
func (g *Group) Pids() []int {
	out := make([]int, len(g.cmds))
	for i, c := range g.cmds {
		out[i] = c.Process.Pid
	}
	return out
}

// Running returns the ranks whose process has not exited yet.
func (g *Group) Running() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []int
	for _, r := range g.ranks {
		if !slices.ContainsFunc(g.done, func(e Exit) bool { return e.Rank == r }) {
			out = append(out, r)
		}
	}
	return out
}

// Exits delivers each process's exit as it happens.
func (g *Group) Exits() <-chan Exit { return g.exits }

// Done is closed once every process has exited.
func (g *Group) Done() <-chan struct{} { return g.allOut }

// Kill kills every process still running.
func (g *Group) Kill() {
	for _, c := range g.cmds {
		c.Process.Kill() // ErrProcessDone for those already reaped
	}
}

// Signal sends sig to every process still running.
func (g *Group) Signal(sig os.Signal) {
	for _, c := range g.cmds {
		c.Process.Signal(sig) // ErrProcessDone for those already reaped
	}
}

// KillRank kills the process of one rank, if this group started it: the
// launching rank ends a rank that stopped answering (a stopped or wedged
// process cannot run its own Linger watch and would outlive the job).
func (g *Group) KillRank(rank int) {
	for i, r := range g.ranks {
		if r == rank {
			g.cmds[i].Process.Kill()
		}
	}
}

// Wait waits for every process. It returns nil when all exited with status
// 0, and otherwise an error naming each failed rank, earliest first (the
// first to fail is usually the cause; the others lost their peer). When ctx
// ends first, the processes are killed.
func (g *Group) Wait(ctx context.Context) error {
	select {
	case <-g.allOut:
	case <-ctx.Done():
		g.Kill()
		<-g.allOut
		g.stop()
		return fmt.Errorf("launch: stopped the ranks: %w", ctx.Err())
	}
	g.stop()
	return g.Err()
}

// Failed returns the ranks that have exited with an error so far, earliest
// first.
func (g *Group) Failed() []Exit {
	done := g.Exited()
	out := done[:0]
	for _, e := range done {
		if e.Err != nil {
			out = append(out, e)
		}
	}
	return out
}

// Exited returns the ranks that have exited so far, with an error or not,
// earliest first.
func (g *Group) Exited() []Exit {
	g.mu.Lock()
	done := slices.Clone(g.done)
	g.mu.Unlock()
	sort.SliceStable(done, func(i, j int) bool { return done[i].At.Before(done[j].At) })
	return done
}

// Err is the error Wait returns, for the processes that have exited so far:
// nil, or an *ExitError.
func (g *Group) Err() error {
	if f := g.Failed(); len(f) > 0 {
		return &ExitError{Failed: f}
	}
	return nil
}

// ExitError is the error of ranks that failed: Failed lists them, earliest
// first. RunElastic returns one, wrapped, for a rank SIGINT killed: Ctrl-C
// stops an elastic job, also when it reaches a rank first.
type ExitError struct {
	Failed []Exit
}

func (e *ExitError) Error() string {
	msgs := make([]string, len(e.Failed))
	for i, x := range e.Failed {
		msgs[i] = x.String()
	}
	return "launch: " + strings.Join(msgs, "; ")
}

// StopSignal is the signal that asks a run to stop (SIGINT or SIGTERM)
// which killed the earliest failed rank, if one did: a rank that had not
// set up its handlers yet when Ctrl-C reached it (or its launcher
// forwarded it) dies of the signal instead of saving.
func (e *ExitError) StopSignal() (syscall.Signal, bool) {
	if len(e.Failed) == 0 {
		return 0, false
	}
	sig, ok := e.Failed[0].Signal()
	if !ok || (sig != syscall.SIGINT && sig != syscall.SIGTERM) {
		return 0, false
	}
	return sig, true
}

// WatchParent is called in a rank started with Config.Linger (lookup
// reads its environment): once the launching process is gone, the rank's
// program gets linger more to end on its own before the rank exits with
// status 1, printing why to stderr. It does nothing in other processes.
func WatchParent(lookup func(string) (string, bool), linger time.Duration) {
	watchOnce.Do(func() { watchParent(lookup, linger) })
}

var watchOnce sync.Once

func watchParent(lookup func(string) (string, bool), linger time.Duration) {
	v, ok := lookup(EnvParentFD)
	if !ok {
		return
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return
	}
	f := os.NewFile(uintptr(fd), "launching process")
	if f == nil {
		return
	}
	go func() {
		var b [1]byte
		for {
			if _, err := f.Read(b[:]); err != nil {
				break // EOF: the launching process is gone
			}
		}
		f.Close()
		time.Sleep(linger)
		rank, _ := lookup(EnvRank)
		fmt.Fprintf(os.Stderr, "rank %s: the launching process (rank 0) ended %v ago and this rank's program is still running: exiting\n", rank, linger)
		os.Exit(1)
	}()
}

// Loopback reserves a TCP port on 127.0.0.1 for rank 0's rendezvous: port,
// or a free one when port is 0. The caller keeps the listener
// (tcp.Config.Listener), so no other program can take the port between
// choosing it and using it. A port another process holds is an error naming
// it and MASTER_PORT (where launchers take port from: MasterPortFromEnv).
func Loopback(port int) (net.Listener, int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if port != 0 {
			return nil, 0, fmt.Errorf("launch: %s=%d: listen on 127.0.0.1:%d for the rendezvous: %w: set %s to a free port, or unset it to let fulgur pick one", EnvMasterPort, port, port, err, EnvMasterPort)
		}
		return nil, 0, fmt.Errorf("launch: reserve a loopback port for the rendezvous: %w", err)
	}
	return ln, ln.Addr().(*net.TCPAddr).Port, nil
}

// MasterPortFromEnv returns MASTER_PORT for a job this process launches on
// its own host (0 when unset: Loopback picks a free port), as Lightning's
// and torch's spawn launchers honour it.
func MasterPortFromEnv(lookup func(string) (string, bool)) (int, error) {
	v, _ := lookup(EnvMasterPort)
	if v = strings.TrimSpace(v); v == "" {
		return 0, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("%s=%q: use a port in 1..65535, or unset it to let fulgur pick a free one", EnvMasterPort, v)
	}
	return p, nil
}

// NewToken returns a random 128-bit secret, hex encoded.
func NewToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("launch: make a rendezvous token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// InheritedListener is the rendezvous listener a launcher handed rank 0 as
// the descriptor in EnvListenerFD (lookup reads the environment:
// os.LookupEnv), or nil when none was handed over.
func InheritedListener(lookup func(string) (string, bool)) (net.Listener, error) {
	fd, ok := lookup(EnvListenerFD)
	if !ok {
		return nil, nil
	}
	n, err := strconv.Atoi(fd)
	if err != nil {
		return nil, fmt.Errorf("%s=%q is not a file descriptor", EnvListenerFD, fd)
	}
	f := os.NewFile(uintptr(n), "rendezvous")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("the rendezvous listener handed over as descriptor %d: %w", n, err)
	}
	return ln, nil
}
