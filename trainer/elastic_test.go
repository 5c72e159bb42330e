package trainer_test

import (
	"context"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/trainer"
)

// firstBatch records the first training batch a Fit runs.
type firstBatch struct{ idx int }

func (f *firstBatch) Name() string { return "firstBatch" }
func (f *firstBatch) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if f.idx < 0 {
		f.idx = s.BatchIdx
	}
	return nil
}

// TestResumeAtSmallerWorldKeepsSampleOffset: a checkpoint written by 3
// ranks mid-epoch resumes on 2 ranks at the global sample offset, rounded
// down to whole 2-rank batches (and whole accumulation windows).
func TestResumeAtSmallerWorldKeepsSampleOffset(t *testing.T) {
	for _, c := range []struct {
		name                  string
		rows, accum, saveStep int
		wantFirst, wantSteps  int
	}{
		// 500 rows at batch 32: 6 batches a rank on 3 ranks, 8 on 2. After
		// 3 batches on 3 ranks (9 of the epoch's order), 2 ranks go on at
		// their batch 4 (8 batches), not 3 (6: 3 trained twice).
		{"steps", 500, 1, 3, 4, 3 + 4},
		// 1000 rows: 11 batches a rank on 3 ranks, 16 on 2; windows of 2.
		// After 3 steps (6 batches a rank, 18 in all), 2 ranks go on at 9
		// rounded down to the window: 8; 4 windows remain.
		{"accumulation", 1000, 2, 3, 8, 3 + 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			job := newResumeJob(t, c.accum, 0)
			job.train = loader(t, regression(t, c.rows, 0.1, 9), 32, true, false)
			job.cfg.MaxEpochs = 1
			job.val = nil
			ddp := func(r int, g collective.Collective) strategy.Strategy {
				s, err := strategy.NewDDP(strategy.DDPConfig{Group: g})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			dir := t.TempDir()
			savers := make([]*saver, 3)
			fitRanks(t, 3, ddp, job, "", func(r int) []trainer.Callback {
				savers[r] = &saver{dir: dir, when: map[string]func(*trainer.State) bool{"batch": func(s *trainer.State) bool { return s.GlobalStep == c.saveStep }}}
				return []trainer.Callback{savers[r]}
			})
			if len(savers[0].paths) != 1 {
				t.Fatalf("saved %v", savers[0].paths)
			}
			first := &firstBatch{idx: -1}
			got := fitRanks(t, 2, ddp, job, savers[0].paths[0], func(r int) []trainer.Callback {
				if r == 0 {
					return []trainer.Callback{first}
				}
				return nil
			})
			if first.idx != c.wantFirst {
				t.Errorf("resumed on 2 ranks at batch %d, want %d", first.idx, c.wantFirst)
			}
			if s := got[0].Stats().GlobalStep; s != c.wantSteps {
				t.Errorf("the epoch ended at global step %d, want %d", s, c.wantSteps)
			}
		})
	}
}
