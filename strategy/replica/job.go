package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/device"
)

// JoinerByName builds the "ddp" strategy that starts and joins the job's
// processes for strategy name (a strategy built by name that shards over
// them: "sharded", "fsdp"), found by name so that no strategy imports
// another, and checks that it can hand its group over.
func JoinerByName(o strategy.Options, name string) (strategy.Strategy, error) {
	inner, err := strategy.New("ddp", o)
	if err != nil {
		return nil, fmt.Errorf("strategy %q starts and joins its processes as \"ddp\" does: %w", name, err)
	}
	if _, ok := inner.(strategy.GroupJoiner); !ok {
		return nil, fmt.Errorf("strategy %q: the \"ddp\" strategy (%T) cannot hand its group over (strategy.GroupJoiner)", name, inner)
	}
	return inner, nil
}

// Job is one rank's hold on a job's group, as the strategies that take a
// group over hold it (sharded, fsdp): the group given in their Config, or
// joined in Setup through the joiner (strategy.GroupJoiner) they were built
// over by name; the first failure, which closes the groups so that every
// peer fails too; the reduction of logged values and barriers (Reduce);
// Launch; and Teardown's last barrier. Every method but Join and Closes
// may be called before Join.
type Job struct {
	name        string
	given       collective.Collective // Config.Group; nil: the joiner joins
	joiner      strategy.Strategy     // nil with Config.Group
	timeout     time.Duration
	c           collective.Group   // from Join on
	others      []collective.Group // closed with c
	rank, world int
	broken      error
	tornDown    bool
	reduceBuf   []float64
}

// NewJob returns the job of the strategy called name (as its errors and
// Info name it) over group g, or, g nil, over the group joiner joins in
// Join. timeout bounds Teardown's last barrier (0: collective.DefaultTimeout).
func NewJob(name string, g collective.Collective, joiner strategy.Strategy, timeout time.Duration) *Job {
	if timeout == 0 {
		timeout = collective.DefaultTimeout
	}
	j := &Job{name: name, given: g, joiner: joiner, timeout: timeout}
	switch {
	case g != nil:
		j.rank, j.world = g.Rank(), g.Size()
	case joiner != nil:
		i := joiner.Info()
		j.rank, j.world = i.Rank, i.WorldSize
	}
	return j
}

// Rank is this rank, as the group (or, before Join, the joiner) says.
func (j *Job) Rank() int { return j.rank }

// World is the number of ranks of the job.
func (j *Job) World() int { return j.world }

// Info is the strategy's Info.
func (j *Job) Info() strategy.Info {
	return strategy.Info{Name: j.name, Rank: j.rank, WorldSize: j.world, GlobalZero: j.rank == 0}
}

// Join takes the job's group over, joining it through the joiner when none
// was given, and returns it (with asynchronous operations) and the device
// to run on: dev (the strategy's Config.Device) if set, else the joiner's
// for this rank, else the CPU.
func (j *Job) Join(ctx context.Context, dev device.Device) (collective.Group, device.Device, error) {
	g := j.given
	if g == nil {
		var jdev device.Device
		var err error
		if g, jdev, err = j.joiner.(strategy.GroupJoiner).JoinGroup(ctx); err != nil {
			return nil, nil, j.Fail("join the group", err)
		}
		if dev == nil {
			dev = jdev
		}
	}
	if dev == nil {
		dev = device.NewCPU(0)
	}
	j.c = collective.WithAsync(g)
	j.rank, j.world = j.c.Rank(), j.c.Size()
	return j.c, dev, nil
}

// Closes adds groups that the job closes with its own, on the first
// failure and at Teardown (fsdp's shard and replica groups).
func (j *Job) Closes(gs ...collective.Group) { j.others = append(j.others, gs...) }

// Fail records the first failure and closes the groups, so that every peer
// fails too (and the operations queued on them), and returns err as this
// rank's failure to do what; a lost peer's error gains what the joiner's
// launcher knows of it (strategy.PeerLossExplainer: its exit, rank_N.log).
func (j *Job) Fail(what string, err error) error {
	if e, ok := j.joiner.(strategy.PeerLossExplainer); ok {
		err = e.ExplainPeerLoss(err) // the rank's exit and rank_N.log
	}
	err = fmt.Errorf("rank %d: %s: %w", j.rank, what, err)
	if j.broken == nil {
		j.broken = err
		if j.c != nil { // fails the queued operations too
			j.c.Close()
		}
		for _, g := range j.others {
			g.Close()
		}
	}
	return err
}

// Check says whether the strategy may go on: not once the job has failed,
// nor before Setup (setUp false).
func (j *Job) Check(setUp bool) error {
	if j.broken != nil {
		return fmt.Errorf("the job failed earlier: %w", j.broken)
	}
	if !setUp {
		return fmt.Errorf("%s: called before Setup", j.name)
	}
	return nil
}

// Reduce is the strategy's Reduce: the logged values reduced across ranks
// (ReduceMetrics), or, with nothing to reduce, a barrier.
func (j *Job) Reduce(ctx context.Context, sums, weights []float64, ops []module.Reduce) error {
	if j.broken != nil {
		return fmt.Errorf("the job failed earlier: %w", j.broken)
	}
	if j.c == nil {
		return fmt.Errorf("%s: Reduce before Setup", j.name)
	}
	if len(sums) == 0 && len(weights) == 0 && len(ops) == 0 {
		if err := j.c.Barrier(ctx); err != nil {
			return j.Fail("barrier", err)
		}
		return nil
	}
	if err := ReduceMetrics(ctx, j.c, &j.reduceBuf, sums, weights, ops); err != nil {
		return j.Fail("reduce logged values", err)
	}
	return nil
}

// Launch starts the job's local ranks when the strategy was built by name
// and this process launched the job (through its joiner); otherwise it
// does nothing.
func (j *Job) Launch(ctx context.Context) (bool, error) {
	if l, ok := j.joiner.(strategy.Launcher); ok {
		return l.Launch(ctx)
	}
	return false, nil
}

// StopAgreed tells the job's groups that the ranks agreed to stop
// (strategy.StopAgreer).
func (j *Job) StopAgreed() {
	if j.c != nil {
		collective.StopAgreed(j.c)
	}
	for _, o := range j.others {
		collective.StopAgreed(o)
	}
}

// Teardown waits for every rank (a last barrier, unless the job failed),
// closes the groups and, built by name, waits for the local ranks this
// process started. A second call does nothing.
func (j *Job) Teardown(ctx context.Context) error {
	if j.tornDown {
		return nil
	}
	j.tornDown = true
	var errs []error
	switch {
	case j.c != nil && j.broken == nil:
		bctx, cancel := context.WithTimeout(ctx, j.timeout)
		if e := collective.FinalBarrier(bctx, j.c); e != nil {
			errs = append(errs, fmt.Errorf("rank %d: final barrier: %w", j.rank, e))
		}
		cancel()
		j.closeGroups()
	case j.c != nil:
		j.closeGroups()
	case j.given != nil:
		j.given.Close()
	}
	if j.joiner != nil {
		if err := j.joiner.Teardown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (j *Job) closeGroups() {
	j.c.Close()
	for _, g := range j.others {
		g.Close()
	}
}

// ModelMismatch explains the broadcast of rank 0's parameters failing on
// lengths that differ between ranks: their programs built different models.
func ModelMismatch(err error) error {
	if errors.Is(err, collective.ErrMismatch) {
		return fmt.Errorf("%w: the ranks built models of different sizes: start every rank with the same program and model settings (a layer's width, the number of layers)", err)
	}
	return err
}
