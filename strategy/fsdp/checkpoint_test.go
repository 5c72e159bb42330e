package fsdp_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/sharded"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// fitFSDP trains newModel() for epochs on n in-process fsdp ranks through
// the trainer (global batch 12, each rank 12/n rows), resuming from
// resume when set, and then checkpoints to save (every rank takes part).
func fitFSDP(t *testing.T, n, epochs int, sharded bool, resume, save string) {
	t.Helper()
	for _, err := range fitFSDPRanks(t, n, epochs, sharded, func(int) string { return resume }, save, 20*time.Second) {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// fitFSDPRanks is fitFSDP with rank r resuming from resume(r) (when not
// ""), collectives timing out after timeout; it returns each rank's error.
func fitFSDPRanks(t *testing.T, n, epochs int, sharded bool, resume func(r int) string, save string, timeout time.Duration) []error {
	t.Helper()
	return fitRanks(t, n, epochs, sharded, resume, save, timeout, func(c collective.Collective) (strategy.Strategy, error) {
		return fsdp.New(fsdp.Config{Group: c})
	})
}

// fitRanks is fitFSDPRanks with each rank's strategy built by newStrategy
// over its collective.
func fitRanks(t *testing.T, n, epochs int, sharded bool, resume func(r int) string, save string, timeout time.Duration, newStrategy func(collective.Collective) (strategy.Strategy, error)) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ds, err := strategytest.Regression(48, in, out, 8)
	if err != nil {
		t.Fatal(err)
	}
	group, err := inproc.NewGroup(n, inproc.Timeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, n)
	done := make(chan struct{}, n)
	for r := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			errs[r] = func() error {
				s, err := newStrategy(group[r])
				if err != nil {
					return err
				}
				tr, err := trainer.New(trainer.Config{MaxEpochs: epochs, Seed: 5, StrategyImpl: s, ShardedCheckpoint: sharded,
					Out: io.Discard, EnableProgressBar: trainer.Bool(false), DefaultRootDir: t.TempDir()})
				if err != nil {
					return err
				}
				defer tr.Teardown(ctx)
				train, _ := data.NewLoader(ds, data.LoaderConfig{BatchSize: 12 / n})
				var opts []trainer.FitOption
				if p := resume(r); p != "" {
					opts = append(opts, trainer.FromCheckpoint(p))
				}
				if err := tr.Fit(ctx, &deepMLP{Sizes: ckptSizes, Opt: "adam", LR: 0.01}, train, nil, opts...); err != nil {
					return err
				}
				return tr.SaveCheckpoint(ctx, save)
			}()
		}()
	}
	for range n {
		<-done
	}
	return errs
}

// With ShardedCheckpoint, 2 fsdp ranks each write their shard (half of
// the state) beside an index; LoadWeights reads them whole, and 3 ranks
// (and 1) resume from them: after one more epoch each holds the weights
// the uninterrupted 2-rank run does, within float32 tolerance (the
// optimizer's moments came back too).
func TestFSDPShardedCheckpointResumesAtAnotherWorldSize(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "epoch1.ckpt")
	fitFSDP(t, 2, 1, true, "", ckpt)
	full := filepath.Join(dir, "full.ckpt")
	fitFSDP(t, 2, 1, false, "", full)
	var shardBytes []int64
	for _, f := range []string{ckpt + ".rank0-of-2", ckpt + ".rank1-of-2"} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatalf("shard file: %v", err)
		}
		shardBytes = append(shardBytes, st.Size())
	}
	fst, _ := os.Stat(full)
	for r, b := range shardBytes {
		if b > fst.Size()*3/4 {
			t.Errorf("rank %d's shard is %d bytes, the whole checkpoint %d: a shard should hold about half", r, b, fst.Size())
		}
	}
	// The sharded checkpoint's weights are the whole one's, bit for bit.
	a, b := weightsOf(t, ckpt), weightsOf(t, full)
	for i := range b {
		if a[i] != b[i] {
			t.Fatalf("weight %d: %g in the sharded checkpoint, %g in the whole one", i, a[i], b[i])
		}
	}
	if _, err := trainer.VerifyCheckpoint(ckpt); err != nil {
		t.Errorf("VerifyCheckpoint: %v", err)
	}

	want := filepath.Join(dir, "uninterrupted.ckpt")
	fitFSDP(t, 2, 2, false, "", want)
	w := weightsOf(t, want)
	for _, n := range []int{3, 1} {
		got := filepath.Join(dir, "resumed.ckpt")
		fitFSDP(t, n, 2, true, ckpt, got)
		g := weightsOf(t, got)
		for i := range w {
			if d := math.Abs(float64(g[i] - w[i])); d > 1e-5+1e-4*math.Abs(float64(w[i])) {
				t.Fatalf("resumed at %d ranks: weight %d is %g, the uninterrupted 2-rank run has %g", n, i, g[i], w[i])
			}
		}
	}

	// A shard gone: an error naming it, not a model with holes.
	if err := os.Remove(ckpt + ".rank1-of-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := trainer.VerifyCheckpoint(ckpt); err == nil {
		t.Errorf("VerifyCheckpoint with a shard missing: no error")
	}
	if err := trainer.RemoveCheckpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(ckpt + "*"); len(left) != 0 {
		t.Errorf("RemoveCheckpoint left %v", left)
	}
}

// A sharded checkpoint of 2 fsdp ranks (each holding half of every
// tensor) resumes under the strategies that hold the whole model on every
// rank: single, and sharded's two stages at 3 ranks. Each ends, after the
// second epoch, with the weights of the uninterrupted 2-rank fsdp run
// (float32 tolerance). Before, each refused the checkpoint: "tensor
// "fc0.weight": the state holds [0, 224) of its 384 elements; every rank holds
// the whole model".
func TestFSDPShardedCheckpointResumesUnderWholeModelStrategies(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "epoch1.ckpt")
	fitFSDP(t, 2, 1, true, "", ckpt)
	want := filepath.Join(dir, "uninterrupted.ckpt")
	fitFSDP(t, 2, 2, false, "", want)
	w := weightsOf(t, want)
	for _, c := range []struct {
		name        string
		n           int
		newStrategy func(collective.Collective) (strategy.Strategy, error)
	}{
		{"single", 1, func(collective.Collective) (strategy.Strategy, error) { return single.NewSingle(), nil }},
		{"sharded_stage1", 3, func(g collective.Collective) (strategy.Strategy, error) {
			return sharded.New(sharded.Config{Group: g, Stage: 1})
		}},
		{"sharded_stage2", 3, func(g collective.Collective) (strategy.Strategy, error) {
			return sharded.New(sharded.Config{Group: g, Stage: 2})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := filepath.Join(t.TempDir(), "resumed.ckpt")
			for r, err := range fitRanks(t, c.n, 2, false, func(int) string { return ckpt }, got, 20*time.Second, c.newStrategy) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			g := weightsOf(t, got)
			for i := range w {
				if d := math.Abs(float64(g[i] - w[i])); d > 1e-5+1e-4*math.Abs(float64(w[i])) {
					t.Fatalf("weight %d is %g, the uninterrupted 2-rank fsdp run has %g", i, g[i], w[i])
				}
			}
		})
	}
}

func weightsOf(t *testing.T, path string) []float32 {
	t.Helper()
	programModel := &deepMLP{Sizes: ckptSizes}
	return loadInto(t, programModel, path).Data32()
}

// ckptSizes make a model whose tensors outweigh a checkpoint's metadata.
var ckptSizes = []int{in, 64, 64, out}

// 2 fsdp processes (started by name, through the trainer) save a sharded
// checkpoint after an epoch, one shard file per process beside the index;
// 1 and 3 processes resume from it, and after the second epoch hold the
// weights of 2 processes that ran both epochs without stopping, within
// float32 tolerance. A shard file missing or corrupt is an error on every
// process that resumes, naming the file (and, missing, saying that every
// process reads every shard).
func TestFSDPShardedCheckpointAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "epoch1.ckpt")
	program(t, "-strategy", "fsdp", "-devices", "2", "-batch", "6", "-epochs", "1", "-sharded", "-ckpt", ckpt)
	shards := []string{ckpt + ".rank0-of-2", ckpt + ".rank1-of-2"}
	for _, f := range shards {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("shard file of the 2-process run: %v", err)
		}
	}
	want := filepath.Join(dir, "uninterrupted.ckpt")
	program(t, "-strategy", "fsdp", "-devices", "2", "-batch", "6", "-epochs", "2", "-ckpt", want)
	w := weights(t, want).Data32()
	for _, n := range []int{1, 3} {
		got := filepath.Join(dir, fmt.Sprintf("resumed%d.ckpt", n))
		program(t, "-strategy", "fsdp", "-devices", fmt.Sprint(n), "-batch", fmt.Sprint(12/n), "-epochs", "2", "-resume", ckpt, "-ckpt", got)
		sameWeights(t, fmt.Sprintf("resumed on %d processes", n), weights(t, got).Data32(), "the uninterrupted 2-process run", w)
	}

	keep := make([][]byte, len(shards))
	for i, f := range shards {
		var err error
		if keep[i], err = os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		spoil   func() error
		file    string
		explain string
	}{
		{"missing", func() error { return os.Remove(shards[1]) }, filepath.Base(shards[1]), "shared filesystem"},
		{"corrupt", func() error {
			b := slices.Clone(keep[0])
			b[len(b)-3] ^= 0x40 // in the last tensor's values
			return os.WriteFile(shards[0], b, 0o644)
		}, filepath.Base(shards[0]), "corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, f := range shards {
				if err := os.WriteFile(f, keep[i], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := tc.spoil(); err != nil {
				t.Fatal(err)
			}
			errDir := t.TempDir()
			out := programFails(t, "-strategy", "fsdp", "-devices", "2", "-batch", "6", "-epochs", "2", "-resume", ckpt, "-ckpt", filepath.Join(errDir, "never.ckpt"), "-errors", errDir)
			for _, r := range []string{"0", "1"} {
				b, err := os.ReadFile(filepath.Join(errDir, "err_"+r))
				if err != nil {
					t.Fatalf("process of rank %s wrote no error (%v); the run's output:\n%s", r, err, out)
				}
				if s := string(b); !strings.Contains(s, tc.file) || !strings.Contains(s, tc.explain) {
					t.Errorf("rank %s: %s\nwant the error to name %s and say %q", r, s, tc.file, tc.explain)
				}
			}
		})
	}
}

// A rank that cannot read a shard file (kept on another machine's disk,
// as here rank 1's copy of the checkpoint lacks rank 1's shard) fails
// naming it, and the rank that read everything fails at once naming that
// rank and the shared filesystem a sharded checkpoint needs, instead of
// waiting in the first step's collectives until they time out.
func TestFSDPShardedCheckpointUnreadableOnOneRank(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	ckpt := filepath.Join(dir, "epoch1.ckpt")
	fitFSDP(t, 2, 1, true, "", ckpt)
	for _, f := range []string{"epoch1.ckpt", "epoch1.ckpt.rank0-of-2"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(other, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	errs := fitFSDPRanks(t, 2, 2, true, func(r int) string {
		if r == 1 {
			return filepath.Join(other, "epoch1.ckpt")
		}
		return ckpt
	}, filepath.Join(t.TempDir(), "never.ckpt"), 10*time.Second)
	for r, want := range []string{"rank 1 could not read it", "epoch1.ckpt.rank1-of-2"} {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), want) || !strings.Contains(errs[r].Error(), "shared filesystem") {
			t.Errorf("rank %d: %v\nwant an error saying %q and naming the shared filesystem", r, errs[r], want)
		}
	}
}
