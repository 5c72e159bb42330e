package trainer_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/trainer"
)

// A checkpoint saved by 2 sharded ranks (each holding half of the
// optimizer state) resumes on 1 and on 3 ranks: loaded and saved again at
// the new size it holds the same global tensors bit for bit, and training
// continues as the uninterrupted 2-rank run does. Every world size runs the
// same global batch of 6 rows (6/world per rank, strided by the
// distributed sampler), so the runs differ only in summation order.
func TestShardedCheckpointReshards(t *testing.T) {
	const global, saveAt = 6, 10
	ds := regression(t, 120, 0.1, 9) // 20 steps an epoch
	sharded := func(r int, g collective.Collective) strategy.Strategy {
		s, err := sharded.New(sharded.Config{Group: g, Stage: 2})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	job := func(world, maxSteps int) resumeJob {
		j := newResumeJob(t, 1, 0)
		j.cfg.MaxEpochs, j.cfg.MaxSteps = 2, maxSteps
		j.train, j.val = loader(t, ds, global/world, false, false), nil
		return j
	}

	dir := t.TempDir()
	savers := make([]*saver, 2)
	ref := fitRanks(t, 2, sharded, job(2, 0), "", func(r int) []trainer.Callback {
		savers[r] = &saver{dir: dir, when: map[string]func(*trainer.State) bool{"batch": func(s *trainer.State) bool { return s.GlobalStep == saveAt }}}
		return []trainer.Callback{savers[r]}
	})
	if len(savers[0].paths) != 1 {
		t.Fatalf("saved %v", savers[0].paths)
	}
	saved := savers[0].paths[0]
	want := readTensors(t, saved)
	if len(want["optimizer/exp_avg"]) != 5*4 {
		t.Fatalf("the 2-rank checkpoint holds %d bytes of optimizer/exp_avg, want all 5 float32s", len(want["optimizer/exp_avg"]))
	}
	final := ref[0].Store().Data32()

	for _, world := range []int{1, 3} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			// Load and save again at the new size, without training.
			trs := fitRanks(t, world, sharded, job(world, saveAt), saved, nil)
			again := filepath.Join(t.TempDir(), "again.ckpt")
			err := strategyEach(trs, func(tr *trainer.Trainer) error { return tr.SaveCheckpoint(context.Background(), again) })
			if err != nil {
				t.Fatal(err)
			}
			got := readTensors(t, again)
			if len(got) != len(want) {
				t.Errorf("saved again at world %d: %d tensors, want %d", world, len(got), len(want))
			}
			for name, w := range want {
				if !bytes.Equal(got[name], w) {
					t.Errorf("tensor %q saved again at world %d differs from the 2-rank checkpoint's", name, world)
				}
			}

			// Resume and train to the end.
			trs = fitRanks(t, world, sharded, job(world, 0), saved, nil)
			for r, tr := range trs {
				if s := tr.Stats(); s.GlobalStep != 40 {
					t.Fatalf("rank %d ended at step %d, want 40", r, s.GlobalStep)
				}
			}
			res := trs[0].Store().Data32()
			worst := 0.0
			for i := range final {
				d := math.Abs(float64(res[i] - final[i]))
				worst = math.Max(worst, d)
				if d > 1e-5+1e-4*math.Abs(float64(final[i])) {
					t.Errorf("parameter %d after resuming at world %d: %g, the uninterrupted 2-rank run has %g", i, world, res[i], final[i])
				}
			}
			t.Logf("world %d: largest difference from the uninterrupted run %.3g", world, worst)
		})
	}
}

// strategyEach calls f for every rank's trainer at once (their collectives
// meet) and returns the first error.
func strategyEach(trs []*trainer.Trainer, f func(*trainer.Trainer) error) error {
	errs := make(chan error, len(trs))
	for _, tr := range trs {
		go func() { errs <- f(tr) }()
	}
	var first error
	for range trs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// readTensors returns every tensor's bytes of a safetensors file, by name.
func readTensors(t *testing.T, path string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	body := b[8+n:]
	out := map[string][]byte{}
	var names []string
	for name, raw := range hdr {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			Offsets [2]int `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		out[name] = body[e.Offsets[0]:e.Offsets[1]]
		names = append(names, name)
	}
	sort.Strings(names)
	t.Logf("%s: %v", filepath.Base(path), names)
	return out
}

// A checkpoint saved again at the same path (last.ckpt, each time a
// checkpoint is due) by another world size, as after an elastic restart
// with fewer ranks, or as a single file, leaves beside it only the shard
// files its index names. Before, last.ckpt.rank<R>-of-3 stayed next to
// the 2-rank index for good: nothing read them, nothing deleted them.
// Saved again by as many ranks, the shards alternate between two sets of
// names, and only the set the index names stays.
func TestShardedCheckpointSavedAgainLeavesNoStaleShards(t *testing.T) {
	ds := regression(t, 60, 0.1, 9)
	newSharded := shardedStage2(t)
	path := filepath.Join(t.TempDir(), "last.ckpt")
	for _, c := range []struct {
		world   int
		sharded bool
		want    []string
	}{
		{3, true, []string{"last.ckpt.rank0-of-3", "last.ckpt.rank1-of-3", "last.ckpt.rank2-of-3"}},
		{2, true, []string{"last.ckpt.rank0-of-2", "last.ckpt.rank1-of-2"}},
		// Saved again by as many ranks, under the names the index does
		// not use, then back (a rank dying mid-save leaves the old whole).
		{2, true, []string{"last.ckpt.rank0-of-2.alt", "last.ckpt.rank1-of-2.alt"}},
		{2, true, []string{"last.ckpt.rank0-of-2", "last.ckpt.rank1-of-2"}},
		{1, false, nil},
	} {
		j := newResumeJob(t, 1, 0)
		j.cfg.MaxEpochs, j.cfg.MaxSteps, j.cfg.ShardedCheckpoint = 1, 2, c.sharded
		j.train, j.val = loader(t, ds, 6/c.world, false, false), nil
		trs := fitRanks(t, c.world, newSharded, j, "", nil)
		if err := strategyEach(trs, func(tr *trainer.Trainer) error { return tr.SaveCheckpoint(context.Background(), path) }); err != nil {
			t.Fatal(err)
		}
		found, _ := filepath.Glob(path + ".rank*")
		var got []string
		for _, f := range found {
			got = append(got, filepath.Base(f))
		}
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("saved by %d ranks (sharded %v): shard files %v beside the checkpoint, want %v", c.world, c.sharded, got, c.want)
		}
		if _, err := trainer.VerifyCheckpoint(path); err != nil {
			t.Errorf("saved by %d ranks: %v", c.world, err)
		}
	}
}

// Ranked by a step's loss, which differs between ranks, the checkpoints of
// a sharded run are kept and deleted alike on every rank: each kept one
// has its index and both shards, and no stray shard is left. Before, each
// rank ranked by its own loss: a rank saved a checkpoint the other did not
// (their collectives then paired with unrelated ones, without an error),
// and deleted shards of the one the other kept, which then did not load.
func TestModelCheckpointRanksAlikeOnEveryRank(t *testing.T) {
	// A file name holding the step's loss is rank 0's on every rank too.
	for _, filename := range []string{"", "{step}-{train_loss:.6f}"} {
		t.Run(filename, func(t *testing.T) { rankAlike(t, filename) })
	}
}

func rankAlike(t *testing.T, filename string) {
	ds := regression(t, 240, 0.5, 9)
	newSharded := shardedStage2(t)
	j := newResumeJob(t, 1, 0)
	j.cfg.MaxEpochs, j.cfg.ShardedCheckpoint, j.cfg.LogDir = 2, true, t.TempDir()
	j.train, j.val = loader(t, ds, 6, true, false), nil
	dir := t.TempDir()
	fitRanks(t, 2, newSharded, j, "", func(int) []trainer.Callback {
		mc, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: dir, Filename: filename, Monitor: "train_loss", SaveTopK: 2, SaveLast: true, EveryNTrainSteps: 1})
		if err != nil {
			t.Fatal(err)
		}
		return []trainer.Callback{mc}
	})
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	indexes := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, ".ckpt") {
			indexes[f] = true
		}
	}
	if len(indexes) != 3 {
		t.Errorf("%d checkpoints, want the 2 best and last.ckpt: %v", len(indexes), files)
	}
	for f := range indexes {
		if _, err := trainer.VerifyCheckpoint(f); err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
		}
	}
	for _, f := range files {
		if i := strings.Index(f, ".ckpt.rank"); i >= 0 && !indexes[f[:i+len(".ckpt")]] {
			t.Errorf("shard %s of no kept checkpoint", filepath.Base(f))
		}
	}
	if len(files) != 3*3 {
		t.Errorf("%d files, want 3 checkpoints of an index and 2 shards each: %v", len(files), files)
	}
}

// shardedStage2 builds each rank's ZeRO-2 strategy for fitRanks.
func shardedStage2(t *testing.T) func(r int, g collective.Collective) strategy.Strategy {
	return func(r int, g collective.Collective) strategy.Strategy {
		s, err := sharded.New(sharded.Config{Group: g, Stage: 2})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}
