package replica

import (
	"context"
	"sync"

	"github.com/rs/zerolog"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
)

// buildMu serialises the runs that build a graph. Gorgonia v0.9.17 keeps
// unsynchronised package state while graphs are built (the group counter of
// Rectify and friends), so replicas in one process (DP, in-process DDP
// ranks) must not build graphs at the same time; later runs of a built graph
// are independent and run in parallel.
var buildMu sync.Mutex

type graphKey struct {
	mode module.Mode
	rows int
}

// Graphs is an engine and the graphs it has already built, which mirror the
// engine's own cache (one graph per mode and batch size). Every replica in
// the process builds its graphs through one, so builds never overlap.
type Graphs struct {
	Eng   *engine.Engine
	built map[graphKey]bool
}

// NewGraphs returns e with no graph built yet.
func NewGraphs(e *engine.Engine) *Graphs {
	return &Graphs{Eng: e, built: map[graphKey]bool{}}
}

// Rebind runs m over the replica's parameters from now on; its graphs are
// built again.
func (r *Graphs) Rebind(m module.Module) {
	r.Eng.Rebind(m)
	clear(r.built)
}

// Run runs the graph for mode and b's size, building it first (under the
// process-wide build lock) if it is new.
func (r *Graphs) Run(ctx context.Context, mode module.Mode, b *data.Batch, accumulate bool, scale float64) (engine.Result, error) {
	k := graphKey{mode, b.Size}
	if !r.built[k] {
		// Build under the lock, run outside it: a graph that reduces across
		// replicas while it runs (SyncBatchNorm) would otherwise wait for a
		// replica blocked on the lock.
		buildMu.Lock()
		err := r.Eng.Compile(mode, b)
		buildMu.Unlock()
		if err != nil {
			return engine.Result{}, err
		}
		r.built[k] = true
	}
	return r.Eng.Run(ctx, mode, b, accumulate, scale)
}

// RunOn is Run on dev (in dev.Do).
func (r *Graphs) RunOn(ctx context.Context, dev device.Device, mode module.Mode, b *data.Batch, accumulate bool, scale float64) (engine.Result, error) {
	var res engine.Result
	err := dev.Do(ctx, func() error {
		var err error
		res, err = r.Run(ctx, mode, b, accumulate, scale)
		return err
	})
	return res, err
}

// Steps are a strategy's step for each mode.
type Steps struct {
	Train   func(ctx context.Context, b *data.Batch, o strategy.TrainOptions) (float64, []module.Metric, error)
	Eval    func(ctx context.Context, mode module.Mode, b *data.Batch) ([]module.Metric, error)
	Predict func(ctx context.Context, b *data.Batch) (*tensor.Dense, error)
}

// RunStep runs s's step for mode.
func RunStep(ctx context.Context, s Steps, mode module.Mode, b *data.Batch, o strategy.TrainOptions) (strategy.StepResult, error) {
	switch mode {
	case module.Train:
		loss, ms, err := s.Train(ctx, b, o)
		return strategy.StepResult{Loss: loss, Metrics: ms}, err
	case module.Predict:
		out, err := s.Predict(ctx, b)
		return strategy.StepResult{Output: out}, err
	}
	ms, err := s.Eval(ctx, mode, b)
	return strategy.StepResult{Metrics: ms}, err
}

// Seed gives replica (or rank) i its own stream for dropout; replica 0
// keeps the run's seed so one replica behaves like Single.
func Seed(seed uint64, i int) uint64 {
	if i == 0 {
		return seed
	}
	return seed ^ (uint64(i) * 0x9e3779b97f4a7c15)
}

// StatSyncOption is the engine option giving a rank's graphs s when the job
// has more than one replica.
func StatSyncOption(s module.StatSyncer, size int, all bool) []engine.Option {
	if size < 2 {
		return nil
	}
	return []engine.Option{engine.WithStatSync(s, all)}
}

// ShareCores gives each of n processes (or in-process replicas) on this
// machine its share of the cores (blas.Plan: cores/n, split between
// goroutine workers and BLAS threads), so n ranks do not oversubscribe the
// cores; FULGUR_BLAS_THREADS and FULGUR_WORKERS still fix their counts.
// The strategy calls release at Teardown (see blas.ShareCores), so that
// the process plans for its own cores again.
//
// blas.Choose logged the process's plan ("threads: ..."); a share that
// changes it (rank 0 of a job ddp launched itself planned for one rank
// before it started the others, dp's replicas) is logged as what the
// rank trains with, beside what it replaces; one that does not (a
// launcher's ranks, planned for its local ranks from the start) logs
// nothing, so every rank's log has one line per plan it runs.
func ShareCores(log zerolog.Logger, n int) (release func()) {
	before := blas.CurrentPlan()
	_, release, err := blas.ShareCores(n)
	if err != nil {
		log.Warn().Err(err).Int("local_ranks", n).Msg("could not share the cores between local ranks")
		return func() {}
	}
	if p := blas.CurrentPlan(); p != before {
		log.Info().Msgf("threads while training: %s (the cores shared between %d local ranks; the process alone had %s)", p, n, before)
	}
	return release
}

// ProfilerOf returns p, or Nop when p is nil.
func ProfilerOf(p profiler.Profiler) profiler.Profiler {
	if p == nil {
		return profiler.Nop{}
	}
	return p
}

// Profiling reports whether p records anything.
func Profiling(p profiler.Profiler) bool {
	_, nop := p.(profiler.Nop)
	return p != nil && !nop
}

// Traced returns the wait for h; when p records anything, h is recorded on
// the communication track, named comm, from now until it is done, and the
// wait for it on the training track, named wait.
func Traced(p profiler.Profiler, h collective.Handle, comm, wait string) func() error {
	if !Profiling(p) {
		return h.Wait
	}
	sp := profiler.StartTrack(p, "comm", comm)
	go func() {
		h.Wait()
		sp.End()
	}()
	return func() error {
		sp := p.Start(wait)
		defer sp.End()
		return h.Wait()
	}
}

// StatSync sums SyncBatchNorm statistics over c (module.StatSyncer), for
// StatSyncOption.
func StatSync(c collective.Collective) module.StatSyncer { return groupStats{c} }

type groupStats struct{ c collective.Collective }

func (g groupStats) AllReduceSum(ctx context.Context, buf []float64) error {
	return g.c.AllReduce(ctx, buf, collective.Sum)
}

func (g groupStats) Size() int { return g.c.Size() }
