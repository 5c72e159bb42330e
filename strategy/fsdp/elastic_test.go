package fsdp_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// An elastic fsdp job (FULGUR_MAX_RESTARTS=1) saving a sharded last.ckpt
// every 2 steps, whose rank 1 is SIGKILLed at step 4 before its save while
// rank 0 writes its shard: the restart resumes from step 2's checkpoint and
// the job ends with the weights of a run never killed, bit for bit. Before,
// rank 0's new shard replaced the one step 2's index named, and the restart
// trained on from shards of two saves.
func TestFSDPElasticRankKilledAtASaveResumesTheSaveBefore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	job := []string{"-strategy", "fsdp", "-devices", "2", "-batch", "4", "-sharded", "-every", "2"}
	want, got := filepath.Join(dir, "want.ckpt"), filepath.Join(dir, "got.ckpt")
	program(t, append(job, "-root", filepath.Join(dir, "undisturbed"), "-ckpt", want)...)
	t.Setenv("FULGUR_MAX_RESTARTS", "1")
	root := filepath.Join(dir, "elastic")
	program(t, append(job, "-root", root, "-die-at", "4", "-ckpt", got)...)
	if _, err := os.Stat(filepath.Join(root, "died_rank1")); err != nil {
		t.Fatalf("rank 1 was not killed: %v", err)
	}
	if g, w := weights(t, got).Data32(), weights(t, want).Data32(); !slices.Equal(g, w) {
		sameWeights(t, "the restarted job", g, "the undisturbed one", w)
		t.Errorf("the restarted job's weights are not the undisturbed job's bit for bit")
	}
}
