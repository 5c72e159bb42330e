package fsdp_test

import (
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// fitFSDP trains newModel() for epochs on n in-process fsdp ranks through
// the trainer (global batch 12, each rank 12/n rows), resuming from
// resume when set, and then checkpoints to save (every rank takes part).
func fitFSDP(t *testing.T, n, epochs int, sharded bool, resume, save string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ds, err := strategytest.Regression(48, in, out, 8)
	if err != nil {
		t.Fatal(err)
	}
	group, err := inproc.NewGroup(n, inproc.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, n)
	for r := range n {
		go func() {
			errs <- func() error {
				s, err := fsdp.New(fsdp.Config{Group: group[r]})
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
				if resume != "" {
					opts = append(opts, trainer.FromCheckpoint(resume))
				}
				if err := tr.Fit(ctx, &deepMLP{Sizes: ckptSizes, Opt: "adam", LR: 0.01}, train, nil, opts...); err != nil {
					return err
				}
				return tr.SaveCheckpoint(ctx, save)
			}()
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
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

func weightsOf(t *testing.T, path string) []float32 {
	t.Helper()
	programModel := &deepMLP{Sizes: ckptSizes}
	return loadInto(t, programModel, path).Data32()
}

// ckptSizes make a model whose tensors outweigh a checkpoint's metadata.
var ckptSizes = []int{in, 64, 64, out}
