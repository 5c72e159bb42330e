package trainer_test

import (
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/trainer"
)

// TestResumeAtSmallerWorldKeepsSampleOffset: a checkpoint written by 3
// ranks after 3 batches each (9 batches of the epoch's order) resumes on 2
// ranks at their batch 4 (8 batches: the global offset rounded down to
// whole 2-rank batches), not at batch 3 (6 batches: 3 trained twice).
func TestResumeAtSmallerWorldKeepsSampleOffset(t *testing.T) {
	job := newResumeJob(t, 1, 0) // 500 rows at batch 32
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
		savers[r] = &saver{dir: dir, when: map[string]func(*trainer.State) bool{"batch": func(s *trainer.State) bool { return s.GlobalStep == 3 }}}
		return []trainer.Callback{savers[r]}
	})
	if len(savers[0].paths) != 1 {
		t.Fatalf("saved %v", savers[0].paths)
	}
	got := fitRanks(t, 2, ddp, job, savers[0].paths[0], nil)
	// 2 ranks: 250 rows each, 8 batches an epoch; batches 4..7 remain.
	if s := got[0].Stats().GlobalStep; s != 7 {
		t.Errorf("resumed on 2 ranks, the epoch ended at global step %d, want 3 + (8-4) = 7", s)
	}
}
