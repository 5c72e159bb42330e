package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -no-checkpoint beside a flag that only acts on checkpoints (-ckpt-monitor,
// -ckpt-top-k, -ckpt-mode, -ckpt-every-n-steps) ran without a word and
// wrote no checkpoint, the other flag ignored; it is refused, as Lightning
// refuses enable_checkpointing=False beside a ModelCheckpoint, from the
// command line or a config file.
func TestNoCheckpointBesideACheckpointFlagIsRefused(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(cfg, []byte("trainer: {ckpt_top_k: 3, ckpt_monitor: val_loss}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-no-checkpoint", "-ckpt-monitor", "val_loss"}, []string{"-no-checkpoint and -ckpt-monitor are both set"}},
		{[]string{"-ckpt-every-n-steps", "5", "-no-checkpoint"}, []string{"-no-checkpoint and -ckpt-every-n-steps are both set"}},
		{[]string{"-config", cfg, "-no-checkpoint"}, []string{"-no-checkpoint and -ckpt-monitor", "-no-checkpoint and -ckpt-top-k"}},
	} {
		root := t.TempDir()
		err := mlpApp(root).Run(context.Background(), append(c.args, "-max-steps", "1"))
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %v, want %q", c.args, err, w)
			}
		}
		if ents, _ := os.ReadDir(root); len(ents) > 0 {
			t.Errorf("%v: refused flags left %d entries in the root directory", c.args, len(ents))
		}
	}
	// -ckpt-top-k 0 says "none" too.
	if err := mlpApp(t.TempDir()).Run(context.Background(), []string{"-ckpt-top-k", "0", "-no-checkpoint", "-max-steps", "1", "-limit-val-batches", "1", "-limit-test-batches", "1", "-no-model-summary"}); err != nil {
		t.Errorf("-ckpt-top-k 0 -no-checkpoint: %v", err)
	}
}
