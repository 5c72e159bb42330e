package ddp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/launch"
)

var (
	_ strategy.FitRunner = (*DDPSpawn)(nil)
	_ strategy.Rebinder  = (*DDPSpawn)(nil)
	_ strategy.Replica   = (*DDPSpawn)(nil)
	_ strategy.FitRunner = (*spawnWorker)(nil)
	_ strategy.Launcher  = (*spawnWorker)(nil)
)

// DDPSpawn is the launching side of DDP-spawn: it holds one local replica
// (the strategy registered as "single", package strategy/single); RunFit starts one worker process per device (ranks 0..N-1,
// copies of this program that run DDP), waits for them, and loads the
// parameters and buffers rank 0 reports at the end of its Fit into the
// replica. After Fit this process holds the trained model and carries on
// (Test, Predict, saving) as rank 0 of a world of one; the workers never
// run the code after Fit. With FULGUR_MAX_RESTARTS set, the workers are an
// elastic job (launch.RunElastic): when one fails, all are started again
// and resume from the run's last checkpoint, up to that many times.
type DDPSpawn struct {
	local
	world   int
	log     zerolog.Logger
	setup   bool
	elastic *launch.Elastic
	// masterPort is the workers' rendezvous port (MASTER_PORT; 0: a free one).
	masterPort int
}

// local is what DDPSpawn needs of the one-replica strategy it wraps.
type local interface {
	strategy.Strategy
	strategy.Replica
	strategy.Rebinder
}

func newSpawnParent(o strategy.Options, world int) (*DDPSpawn, error) {
	if world < 1 {
		return nil, fmt.Errorf("strategy \"ddp_spawn\": %s is %d: use 1 or more", o.Name("Devices"), world)
	}
	if !strategy.Known("single") {
		return nil, errors.New("strategy \"ddp_spawn\" holds its trained replica in strategy \"single\", which is not registered: import _ \"github.com/fulgur-ml/fulgur/strategy/single\"")
	}
	s, err := strategy.New("single", strategy.Options{Lookup: o.Lookup, Log: o.Log})
	if err != nil {
		return nil, err
	}
	l, ok := s.(local)
	if !ok {
		return nil, fmt.Errorf("strategy \"ddp_spawn\": the strategy registered as \"single\" (%T) has no Store or Rebind", s)
	}
	port, err := launch.MasterPortFromEnv(o.Lookup)
	if err != nil {
		return nil, fmt.Errorf("strategy \"ddp_spawn\": %w", err)
	}
	e, err := launch.ElasticFromEnv(o.Lookup, world, o.Log)
	if err != nil {
		return nil, fmt.Errorf("strategy \"ddp_spawn\": %w", err)
	}
	return &DDPSpawn{local: l, world: world, log: o.Log, elastic: e, masterPort: port}, nil
}

func (s *DDPSpawn) Info() strategy.Info {
	i := s.local.Info()
	i.Name = "ddp_spawn"
	return i
}

// Setup sets up the local replica.
func (s *DDPSpawn) Setup(ctx context.Context, su strategy.Setup) error {
	if err := s.local.Setup(ctx, su); err != nil {
		return err
	}
	s.setup = true
	return nil
}

// RunFit runs the whole training in the workers, without calling fit, and
// loads rank 0's weights.
func (s *DDPSpawn) RunFit(ctx context.Context, fit func(context.Context) (strategy.FitResult, error)) (strategy.FitResult, bool, error) {
	if !s.setup {
		return strategy.FitResult{}, false, errors.New("ddp_spawn: RunFit before Setup")
	}
	res, err := s.spawn(ctx)
	var stopped *strategy.FitInterrupted
	if ctx.Err() != nil && errors.As(err, &stopped) {
		stopped.Signal = 0 // spawn's SIGTERM stood for the cancelled context
	}
	if res != nil {
		if fi := interruption(res); fi != nil {
			if ctx.Err() != nil {
				fi.Signal = 0
			}
			// The workers were stopped and saved: the weights they had
			// then, and how to resume.
			if lerr := s.load(res); lerr != nil {
				return strategy.FitResult{}, false, errors.Join(fi, lerr)
			}
			return fi.Result, true, fi
		}
	}
	if err != nil {
		return strategy.FitResult{}, false, err
	}
	if err := s.load(res); err != nil {
		return strategy.FitResult{}, false, err
	}
	return fitResultFrom(res), true, nil
}

// spawn starts the workers, waits for them and reads rank 0's result.
func (s *DDPSpawn) spawn(ctx context.Context) (*launch.Result, error) {
	dir, err := os.MkdirTemp("", "fulgur-spawn-")
	if err != nil {
		return nil, fmt.Errorf("make a directory for the workers' result: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "result")
	if s.elastic != nil {
		e := *s.elastic
		// Each attempt's ranks are ddp_spawn workers (the later value of
		// a variable wins): rank 0 writes the result read below.
		e.Env = func(int) []string {
			return []string{launch.EnvLauncher + "=ddp_spawn", launch.EnvResult + "=" + path}
		}
		s.log.Info().Int("world", s.world).Int("max_restarts", e.MaxRestarts).Msg("ddp_spawn: starting the workers as an elastic job")
		// Ctrl-C reaches the workers too: each saves its checkpoint and
		// ends, and the job stops rather than restarting them. So does
		// Fit's cancelled context (RunElastic sends them SIGTERM).
		sctx, stop := launch.StopOnSignal(ctx)
		_, err := launch.RunElastic(sctx, e)
		status := stop()
		res, err := s.result(path, err)
		if err != nil && res == nil && (status > 128 || ctx.Err() != nil) {
			// Stopped before the workers had saved anything (still
			// starting): interrupted, with nothing to resume. A cancelled
			// context used to return "ddp_spawn workers failed" here,
			// where the job without restarts returns the interruption.
			sig := syscall.SIGTERM // what RunElastic sent for the context
			if status > 128 {
				sig = syscall.Signal(status - 128)
			}
			return nil, &strategy.FitInterrupted{Signal: sig}
		}
		return res, err
	}
	ln, port, err := launch.Loopback(s.masterPort)
	if err != nil {
		return nil, err
	}
	lnFile, err := ln.(interface{ File() (*os.File, error) }).File()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("hand the rendezvous port to rank 0: %w", err)
	}
	defer lnFile.Close()
	token, err := launch.NewToken()
	if err != nil {
		return nil, err
	}
	local := launch.Local{World: s.world, MasterPort: port, Token: token, Launcher: "ddp_spawn", ResultPath: path}
	ranks := make([]int, s.world)
	for i := range ranks {
		ranks[i] = i
	}
	// Not ended by ctx, which would kill them mid-step: a cancelled
	// context stops them as SIGTERM does, below.
	g, err := launch.Start(context.WithoutCancel(ctx), launch.Config{
		Ranks: ranks,
		Env: func(r int) []string {
			env := local.RankEnv(r)
			if r == 0 {
				env = append(env, launch.EnvListenerFD+"=3")
			}
			return env
		},
		Files: func(r int) []*os.File {
			if r == 0 {
				return []*os.File{lnFile}
			}
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	lnFile.Close()
	// SIGINT and SIGTERM are the workers' to act on (the terminal's Ctrl-C
	// reaches them too): each finishes its step and saves, and this process
	// waits for that rather than dying of the signal (which took the
	// workers with it before they had saved).
	stop := forwardSignals(g)
	// A cancelled context asks the workers to stop as SIGTERM does: each
	// finishes its step and saves, and RunFit reports the cancellation.
	// They used to be killed mid-step, with nothing saved, and Fit
	// returned "ddp_spawn workers failed".
	stopOnCancel := context.AfterFunc(ctx, func() { g.Signal(syscall.SIGTERM) })
	s.log.Info().Int("world", s.world).Ints("pids", g.Pids()).Msg("ddp_spawn: started workers")
	err = g.Wait(context.WithoutCancel(ctx))
	stopOnCancel()
	stop()
	return s.result(path, err)
}

// result reads rank 0's result once the workers ended with err: a result
// the workers wrote when a signal stopped them is returned with err.
func (s *DDPSpawn) result(path string, err error) (*launch.Result, error) {
	if err == nil {
		return launch.ReadResult(path)
	}
	err = fmt.Errorf("ddp_spawn workers failed (their output is above): %w", err)
	if res, rerr := launch.ReadResult(path); rerr == nil && interruption(res) != nil {
		return res, err
	}
	// Ctrl-C while the workers were starting killed them before they could
	// save: the run was interrupted, not failed, with nothing to resume.
	var ee *launch.ExitError
	if errors.As(err, &ee) {
		if sig, ok := ee.StopSignal(); ok {
			return nil, &strategy.FitInterrupted{Signal: sig}
		}
	}
	return nil, err
}

// forwardSignals passes SIGINT and SIGTERM this process gets on to g's
// ranks: the first, and repeats within strategy.DuplicateSignalWindow, are
// one request to stop after the step (the ranks save); a repeat after it
// is the user asking to exit at once, as the trainer takes it: the ranks
// are killed and this process ends by the signal. The function it returns
// stops forwarding.
func forwardSignals(g *launch.Group) func() {
	return strategy.WatchStopSignals([]os.Signal{os.Interrupt, syscall.SIGTERM},
		func(s os.Signal, _ bool) { g.Signal(s) },
		func(os.Signal) { g.Kill() })
}

// load copies the workers' parameters and buffers into the local replica.
func (s *DDPSpawn) load(res *launch.Result) error {
	st := s.local.Store()
	if got := layoutOf(st); !slices.Equal(got, res.Layout) {
		return fmt.Errorf("ddp_spawn: the workers trained a model laid out as %v, this process built %v: the program must build the same module in every process", res.Layout, got)
	}
	switch {
	case st.Data32() != nil && len(res.Data32) == len(st.Data32()):
		copy(st.Data32(), res.Data32)
	case st.Data64() != nil && len(res.Data64) == len(st.Data64()):
		copy(st.Data64(), res.Data64)
	default:
		return fmt.Errorf("ddp_spawn: the workers' result holds %d float32 and %d float64 values, the store %d: the precision differs", len(res.Data32), len(res.Data64), st.Len())
	}
	if h := st.SHA256(); h != res.SHA256 {
		return fmt.Errorf("ddp_spawn: the loaded parameters hash to %s, rank 0 reported %s: the result file is damaged", h, res.SHA256)
	}
	return nil
}

// spawnWorker is one rank of a DDP-spawn job: DDP, plus handing the result
// back and exiting once Fit is done.
type spawnWorker struct {
	*DDP
	resultPath string
}

// exitProcess ends a worker after Finish (a variable for tests).
var exitProcess = os.Exit

func (w *spawnWorker) Launch(ctx context.Context) (bool, error) { return true, nil }

// RunFit trains here; once fit succeeded (its loggers closed), rank 0 hands
// the result and its parameters and buffers to the launching process, and
// the worker exits with status 0.
func (w *spawnWorker) RunFit(ctx context.Context, fit func(context.Context) (strategy.FitResult, error)) (strategy.FitResult, bool, error) {
	r, err := fit(ctx)
	var fi *strategy.FitInterrupted
	if errors.As(err, &fi) {
		// Stopped by a signal, every rank saved: rank 0 hands the
		// checkpoint to the launching process, which says how to resume
		// and exits as the signal asks.
		return r, false, w.finish(ctx, fi.Result, fi)
	}
	if err != nil {
		return r, false, err
	}
	return r, false, w.finish(ctx, r, nil)
}

// Notes of a launch.Result from a Fit a signal stopped.
const (
	noteInterruptedCheckpoint = "interrupted_checkpoint"
	noteInterruptedSignal     = "interrupted_signal"
)

// finish writes rank 0's result (and how it was interrupted, when fi is not
// nil), tears down and exits: status 0, or fi's exit code.
func (w *spawnWorker) finish(ctx context.Context, r strategy.FitResult, fi *strategy.FitInterrupted) error {
	if w.rank == 0 {
		if w.resultPath == "" {
			return fmt.Errorf("ddp_spawn worker: %s is not set: the launching process did not say where to write the result", launch.EnvResult)
		}
		st := w.Store()
		res := &launch.Result{Layout: layoutOf(st), Metrics: r.Metrics, SHA256: st.SHA256(), Notes: map[string]string{}, Stats: map[string]float64{
			"epochs": float64(r.Epochs), "global_step": float64(r.GlobalStep), "train_samples": float64(r.TrainSamples),
			"train_seconds": r.TrainSeconds, "train_samples_per_s": r.TrainSamplesPerS, "last_train_loss": r.LastTrainLoss,
			"world_size": float64(r.WorldSize),
		}}
		if r.StoppedEarly != "" {
			res.Notes["stopped_early"] = r.StoppedEarly
		}
		if r.LogDir != "" {
			res.Notes["log_dir"] = r.LogDir
		}
		if fi != nil {
			res.Notes[noteInterruptedCheckpoint] = fi.Checkpoint
			res.Notes[noteInterruptedSignal] = strconv.Itoa(int(fi.Signal))
			res.Stats["global_step"] = float64(fi.GlobalStep)
		}
		res.Callbacks = r.Callbacks
		res.Data32, res.Data64 = st.Data32(), st.Data64()
		if err := launch.WriteResult(w.resultPath, res); err != nil {
			return fmt.Errorf("rank 0: hand the result back: %w", err)
		}
	}
	if err := w.Teardown(ctx); err != nil {
		return err
	}
	if fi != nil {
		exitProcess(fi.ExitCode())
		return fi
	}
	exitProcess(0)
	return nil
}

// interruption is the FitInterrupted a result from interrupted workers
// holds, or nil.
func interruption(res *launch.Result) *strategy.FitInterrupted {
	ckpt, ok := res.Notes[noteInterruptedCheckpoint]
	if !ok {
		return nil
	}
	sig, _ := strconv.Atoi(res.Notes[noteInterruptedSignal])
	r := fitResultFrom(res)
	return &strategy.FitInterrupted{Signal: syscall.Signal(sig), GlobalStep: r.GlobalStep, Checkpoint: ckpt, Result: r}
}

func fitResultFrom(res *launch.Result) strategy.FitResult {
	st := res.Stats
	r := strategy.FitResult{
		Metrics: res.Metrics, Epochs: int(st["epochs"]), GlobalStep: int(st["global_step"]), TrainSamples: int(st["train_samples"]),
		TrainSeconds: st["train_seconds"], TrainSamplesPerS: st["train_samples_per_s"], LastTrainLoss: st["last_train_loss"],
		WorldSize: int(st["world_size"]), StoppedEarly: res.Notes["stopped_early"], Callbacks: res.Callbacks,
		LogDir: res.Notes["log_dir"],
	}
	if r.Metrics == nil {
		r.Metrics = map[string]float64{}
	}
	return r
}

func layoutOf(st *module.Store) []string {
	out := make([]string, len(st.Entries()))
	for i, e := range st.Entries() {
		out[i] = e.Name + ":" + strconv.Itoa(e.Offset) + ":" + strconv.Itoa(e.Len)
	}
	return out
}
