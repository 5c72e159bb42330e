package trainer_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A user program under ddp builds its profiler on every rank; one built
// with TimelineConfig's zero Rank on rank 1 wrote timeline-rank0.json over
// rank 0's, and the merged trace held one rank. Fit refuses it, naming both
// ranks and the fix; built with each process's rank, every rank's file is
// written.
func TestProfilerBuiltForAnotherRankIsRefused(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	job.cfg.MaxEpochs = 1
	for _, tc := range []struct {
		name    string
		rank    func(r int) int
		wantErr []string // on rank 1; "" for none
	}{
		{"every rank 0", func(int) int { return 0 }, []string{"built for rank 0", "this process is rank 1 of 2", "cluster.Detect"}},
		{"own rank", func(r int) int { return r }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := func(r int) trainer.Config {
				p, err := profiler.NewTimeline(profiler.TimelineConfig{Dir: dir, Rank: tc.rank(r)})
				if err != nil {
					t.Fatal(err)
				}
				c := quiet(job.cfg)
				c.Profiler = p
				return c
			}
			// A short timeout: rank 0, whose profiler is right, learns
			// that rank 1 left as from any dead peer.
			group, err := inproc.NewGroup(2, inproc.Timeout(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			teardownAtEnd(t, nil, group)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				c := cfg(r)
				c.StrategyImpl = ddpRank(t)(r, group[r])
				c.HandleSignals = trainer.Bool(false)
				tr, err := trainer.New(c)
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() { errs[r] = tr.Fit(context.Background(), job.mod(), job.train, job.val) })
			}
			wg.Wait()
			if tc.wantErr == nil {
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				for _, f := range []string{"timeline-rank0.json", "timeline-rank1.json", "timeline.json"} {
					if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
						t.Errorf("%s: %v", f, err)
					}
				}
				return
			}
			if errs[0] == nil {
				t.Error("rank 0: Fit succeeded while rank 1 was refused, want an error")
			}
			if errs[1] == nil {
				t.Fatal("rank 1 with a profiler built for rank 0: Fit succeeded, want an error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errs[1].Error(), w) {
					t.Errorf("rank 1's error %q does not say %q", errs[1], w)
				}
			}
		})
	}
}

// A job of one rank may give its profiler any rank, as independent
// trainings side by side do to keep their files apart.
func TestProfilerRankIsALabelForOneRank(t *testing.T) {
	job := newResumeJob(t, 1, 0)
	job.cfg.MaxEpochs = 1
	dir := t.TempDir()
	p, err := profiler.NewTimeline(profiler.TimelineConfig{Dir: dir, Rank: 3})
	if err != nil {
		t.Fatal(err)
	}
	cfg := quiet(job.cfg)
	cfg.Profiler = p
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), job.mod(), job.train, job.val); err != nil {
		t.Fatalf("Fit with a one-rank job's profiler labelled rank 3: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "timeline-rank3.json")); err != nil {
		t.Error(err)
	}
}
