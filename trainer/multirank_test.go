package trainer_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/trainer"
)

// onRanks runs f on n in-process ranks at once (inproc collectives): rank
// r's trainer is built from cfg(r) with the strategy newStrat makes over
// rank r's member of the group and signal handling off (f tears it down
// where the test wants). It returns the trainers and the ranks' errors.
func onRanks(t *testing.T, n int, newStrat func(r int, g collective.Collective) strategy.Strategy, cfg func(r int) trainer.Config, f func(r int, tr *trainer.Trainer) error) ([]*trainer.Trainer, []error) {
	t.Helper()
	group, err := inproc.NewGroup(n)
	if err != nil {
		t.Fatal(err)
	}
	trs := make([]*trainer.Trainer, n)
	teardownAtEnd(t, trs, group)
	for r := range n {
		c := cfg(r)
		c.StrategyImpl = newStrat(r, group[r])
		c.HandleSignals = trainer.Bool(false)
		if trs[r], err = trainer.New(c); err != nil {
			t.Fatal(err)
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range trs {
		wg.Go(func() { errs[r] = f(r, tr) })
	}
	wg.Wait()
	return trs, errs
}

// teardownAtEnd tears the ranks' trainers down when the test ends (all
// together: a rank's Teardown may wait for the others), then closes the
// group's members (those no strategy closed: a one-rank job leaves its
// member unused), so that their goroutines do not outlive the test. A
// trainer already torn down, or never built (nil), is left alone; errors
// are not the test's subject.
func teardownAtEnd(t *testing.T, trs []*trainer.Trainer, group []collective.Collective) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for _, tr := range trs {
			if tr != nil {
				wg.Go(func() { tr.Teardown(ctx) })
			}
		}
		wg.Wait()
		for _, g := range group {
			g.Close()
		}
	})
}

// ddpRank is onRanks' and fitRanks' strategy for a ddp rank.
func ddpRank(t *testing.T) func(r int, g collective.Collective) strategy.Strategy {
	return func(r int, g collective.Collective) strategy.Strategy {
		d, err := ddp.NewDDP(ddp.DDPConfig{Group: g})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// fsdpRank is onRanks' strategy for an fsdp rank.
func fsdpRank(t *testing.T) func(r int, g collective.Collective) strategy.Strategy {
	return func(r int, g collective.Collective) strategy.Strategy {
		s, err := fsdp.New(fsdp.Config{Group: g})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// fitRanks runs a job on n ranks in goroutines (inproc collectives), each
// with its own trainer, and returns the trainers.
func fitRanks(t *testing.T, n int, newStrat func(r int, g collective.Collective) strategy.Strategy, job resumeJob, ckpt string, cbs func(rank int) []trainer.Callback) []*trainer.Trainer {
	t.Helper()
	root := t.TempDir()
	var opts []trainer.FitOption
	if ckpt != "" {
		opts = append(opts, trainer.FromCheckpoint(ckpt))
	}
	trs, errs := onRanks(t, n, newStrat, func(r int) trainer.Config {
		cfg := quiet(job.cfg)
		cfg.DefaultRootDir = root
		if cbs != nil {
			cfg.Callbacks = cbs(r)
		}
		return cfg
	}, func(r int, tr *trainer.Trainer) error {
		return tr.Fit(context.Background(), job.mod(), job.train, job.val, opts...)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return trs
}

func TestShardedResumeGathersOptimizerState(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	job.cfg.MaxEpochs = 2
	sharded := func(r int, g collective.Collective) strategy.Strategy {
		s, err := sharded.New(sharded.Config{Group: g, Stage: 2})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dir := t.TempDir()
	savers := make([]*saver, 2)
	ref := fitRanks(t, 2, sharded, job, "", func(r int) []trainer.Callback {
		savers[r] = &saver{dir: dir, when: map[string]func(*trainer.State) bool{"batch": func(s *trainer.State) bool { return s.GlobalStep == 5 }}}
		return []trainer.Callback{savers[r]}
	})
	want := ref[0].Store().SHA256()
	if h := ref[1].Store().SHA256(); h != want {
		t.Fatalf("ranks differ: %s and %s", want, h)
	}
	if len(savers[0].paths) != 1 {
		t.Fatalf("saved %v", savers[0].paths)
	}
	got := fitRanks(t, 2, sharded, job, savers[0].paths[0], nil)
	for r, tr := range got {
		if h := tr.Store().SHA256(); h != want {
			t.Errorf("rank %d resumed from step 5: weights %s, want %s", r, h, want)
		}
	}
}

// stopOn stops training at a step on one rank only.
type stopOn struct{ rank, step int }

func (s stopOn) Name() string { return "stopOn" }
func (s stopOn) OnTrainBatchEnd(ctx context.Context, st *trainer.State) error {
	if st.Rank == s.rank && st.GlobalStep == s.step {
		return trainer.Stop("rank %d asked", s.rank)
	}
	return nil
}

func TestStopOnOneRankStopsEveryRank(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	ddp := func(r int, g collective.Collective) strategy.Strategy {
		s, err := ddp.NewDDP(ddp.DDPConfig{Group: g})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	trs := fitRanks(t, 2, ddp, job, "", func(r int) []trainer.Callback { return []trainer.Callback{stopOn{rank: 1, step: 7}} })
	for r, tr := range trs {
		st := tr.Stats()
		want := map[int]string{0: "another rank stopped training", 1: "rank 1 asked"}[r]
		if st.GlobalStep != 7 || st.StoppedEarly != want {
			t.Errorf("rank %d: step %d, reason %q; want 7, %q", r, st.GlobalStep, st.StoppedEarly, want)
		}
	}
}

func TestDPResumeSyncsReplicas(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	job.cfg.MaxEpochs = 2
	job.cfg.Strategy, job.cfg.Devices = "dp", 2
	sv := &saver{dir: t.TempDir(), when: map[string]func(*trainer.State) bool{"batch": func(s *trainer.State) bool { return s.GlobalStep == 9 }}}
	want := job.run(t, "", sv).Store().SHA256()
	if got := job.run(t, sv.paths[0]).Store().SHA256(); got != want {
		t.Errorf("dp resumed from step 9: %s, want %s", got, want)
	}
}

// lockedBuffer is a log sink several ranks' loggers write to at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestResumeLogsOnceForTheJob: every rank resumes from the same
// checkpoint, so the job's log says so once (rank 0), not once per rank.
func TestResumeLogsOnceForTheJob(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	job.cfg.MaxEpochs = 2
	newDDP := func(r int, g collective.Collective) strategy.Strategy {
		d, err := ddp.NewDDP(ddp.DDPConfig{Group: g})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	dir := t.TempDir()
	var s *saver
	fitRanks(t, 2, newDDP, job, "", func(r int) []trainer.Callback {
		if r != 0 {
			return nil
		}
		s = &saver{dir: dir, when: map[string]func(*trainer.State) bool{"batch": func(st *trainer.State) bool { return st.GlobalStep == 5 }}}
		return []trainer.Callback{s}
	})
	if len(s.paths) != 1 {
		t.Fatalf("saved %v", s.paths)
	}
	var log lockedBuffer
	l := zerolog.New(&log)
	job.cfg.Log = &l
	fitRanks(t, 2, newDDP, job, s.paths[0], nil)
	if n := strings.Count(log.String(), "resumed from checkpoint"); n != 1 {
		t.Errorf("2 ranks resuming logged %d lines saying so, want 1:\n%s", n, log.String())
	}
}

// quietEnd is a batch-end callback that declares it never stops there
// (trainer.StepEndStopper).
type quietEnd struct{ ends int }

func (q *quietEnd) Name() string         { return "quietEnd" }
func (q *quietEnd) StopsAtStepEnd() bool { return false }
func (q *quietEnd) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	q.ends++
	return nil
}

// Each rank's profile shows its wait for the others at the stop
// agreement, once a step and once at the epoch's end, when a callback may
// stop at a batch end; when none may, the decision rides with the
// gradients and the agreement runs at the epoch's last batch and its end
// only. One rank agrees with nobody and has no such span.
func TestStopAgreementHasItsOwnSpan(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	job.cfg.MaxEpochs = 1
	ddp := func(r int, g collective.Collective) strategy.Strategy {
		s, err := ddp.NewDDP(ddp.DDPConfig{Group: g})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name string
		cb   func() trainer.Callback
		want func(steps int) int // spans of both ranks
	}{
		// Each rank also agrees three times before the first batch (after
		// OnFitStart, the sanity check and OnTrainStart).
		{"a callback that may stop", func() trainer.Callback { return stopOn{rank: -1} }, func(steps int) int { return 2 * (3 + steps + 1) }},
		{"callbacks that never stop", func() trainer.Callback { return &quietEnd{} }, func(int) int { return 2 * (3 + 2) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prof := profiler.NewSimple() // both ranks' spans
			job.cfg.Profiler = prof
			trs := fitRanks(t, 2, ddp, job, "", func(int) []trainer.Callback { return []trainer.Callback{tc.cb()} })
			steps := trs[0].Stats().GlobalStep
			calls := map[string]int{}
			for _, r := range prof.Rows() {
				calls[r.Action] = r.Calls
			}
			if want := tc.want(steps); steps < 3 || calls["stop agreement"] != want {
				t.Errorf("2 ranks, %d steps: %d stop agreement spans, want %d (spans %v)", steps, calls["stop agreement"], want, calls)
			}
		})
	}

	one := profiler.NewSimple()
	cfg := quiet(job.cfg)
	cfg.Callbacks = []trainer.Callback{stopOn{rank: -1}}
	cfg.Profiler = one
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), job.mod(), job.train, job.val); err != nil {
		t.Fatal(err)
	}
	for _, r := range one.Rows() {
		if r.Action == "stop agreement" {
			t.Errorf("1 rank: %d stop agreement spans, want none", r.Calls)
		}
	}
}

// TestStopRideKeepsTheWeights: the stop decision riding with the
// gradients (callbacks that never stop at a batch end) gives the weights
// of the run that agrees in an all-reduce after every batch, bit for bit,
// for a model without buffers (whose last bucket then travels summed and
// divided on landing instead of as a mean) and with accumulation windows
// (the flags ride on each window's last micro-batch only).
func TestStopRideKeepsTheWeights(t *testing.T) {
	for _, accum := range []int{1, 3} {
		job := newResumeJob(t, accum, 0)
		job.cfg.MaxEpochs = 2
		newDDP := func(noOverlap bool) func(r int, g collective.Collective) strategy.Strategy {
			return func(r int, g collective.Collective) strategy.Strategy {
				d, err := ddp.NewDDP(ddp.DDPConfig{Group: g, NoOverlap: noOverlap})
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
		}
		var quiets []*quietEnd
		quietCbs := func(int) []trainer.Callback {
			q := &quietEnd{}
			quiets = append(quiets, q)
			return []trainer.Callback{q}
		}
		want := fitRanks(t, 2, newDDP(false), job, "", func(int) []trainer.Callback { return []trainer.Callback{stopOn{rank: -1}} })
		for _, noOverlap := range []bool{false, true} {
			got := fitRanks(t, 2, newDDP(noOverlap), job, "", quietCbs)
			for r := range got {
				if a, b := got[r].Store().SHA256(), want[r].Store().SHA256(); a != b || got[r].Stats().GlobalStep != want[r].Stats().GlobalStep {
					t.Errorf("accumulating %d, no overlap %v: rank %d ends at step %d with weights %s; the run agreeing after every batch at step %d with %s", accum, noOverlap, r, got[r].Stats().GlobalStep, a, want[r].Stats().GlobalStep, b)
				}
			}
		}
		if want[0].Stats().GlobalStep < 4 || quiets[0].ends == 0 {
			t.Fatalf("accumulating %d: trained %d steps, %d batch ends", accum, want[0].Stats().GlobalStep, quiets[0].ends)
		}
	}
}

// Callbacks may differ between ranks: when one rank has a callback that
// may stop at a batch end and the other's never stop there, every rank
// agrees after every batch, and a Stop on the first stops both after the
// same batch (had the second let the flags ride, their collectives would
// not match).
func TestStopAgreementWithCallbacksThatDifferByRank(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	trs := fitRanks(t, 2, ddpRank(t), job, "", func(r int) []trainer.Callback {
		if r == 0 {
			return []trainer.Callback{stopOn{rank: 0, step: 7}}
		}
		return []trainer.Callback{&quietEnd{}}
	})
	for r, tr := range trs {
		st := tr.Stats()
		want := map[int]string{0: "rank 0 asked", 1: "another rank stopped training"}[r]
		if st.GlobalStep != 7 || st.StoppedEarly != want {
			t.Errorf("rank %d: step %d, reason %q; want 7, %q", r, st.GlobalStep, st.StoppedEarly, want)
		}
	}
}
