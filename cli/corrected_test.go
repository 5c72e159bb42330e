package cli_test

import (
	"context"
	"strings"
	"testing"
)

// Several unknown flags, each with a clear replacement: the error ends
// with the whole command line in our spellings, the values and the other
// arguments kept, to copy.
func TestUnknownFlagsCorrectedCommandLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // the last line; "" for none
	}{
		{[]string{"fit", "--trainer.max_epochs", "3", "-seed", "7", "--trainer.devices=2", "--model.init_args.lr", "0.1"},
			"with our flags: mlp fit -max-epochs 3 -seed 7 -devices 2 -lr 0.1"},
		{[]string{"--default_root_dir", "/tmp/my runs", "--enable_checkpointing", "false", "--enable_progress_bar", "true", "--check_val_every_n_epoch", "2"},
			"with our flags: mlp -root-dir '/tmp/my runs' -no-checkpoint -check-val-every-n-epoch 2"},
		{[]string{"--trainer.deterministic", "true", "-max-epoch", "2", "--track_grad_norm", "2", "fit"},
			"with our flags: mlp -deterministic=true -max-epochs 2 -log-grad-norm fit"},
		{[]string{"--logger", "false", "--seed_everything", "3"}, "with our flags: mlp -loggers none -seed 3"},
		// Launcher-style: flags, the command, then the user's.
		{[]string{"-num-nodes", "1", "fit", "--max_steps", "5", "--val_check_interval", "2"},
			"with our flags: mlp -num-nodes 1 fit -max-steps 5 -val-check-interval 2"},
		{[]string{"-fast-dev-run", "2", "-num-nodes", "1", "fit", "-fast-dev-run", "3", "--max_steps", "5", "--seed_everything", "2"},
			"with our flags: mlp -fast-dev-run=2 -num-nodes 1 fit -fast-dev-run=3 -max-steps 5 -seed 2"},
		// One unknown flag: its line says it all.
		{[]string{"--max_epochs", "3"}, ""},
		// No clear replacement for one of them: no line to copy.
		{[]string{"--max_epochs", "3", "-nope"}, ""},
		{[]string{"--max_epochs", "3", "--auto_lr_find", "true"}, ""},
		{[]string{"--max_epochs", "3", "--precision", "16-mixed"}, ""},
		{[]string{"--max_epochs", "3", "--use_distributed_sampler", "false"}, ""},
	} {
		err := mlpApp(t.TempDir()).Run(context.Background(), c.args)
		if err == nil {
			t.Errorf("%q: no error", c.args)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		last := lines[len(lines)-1]
		if c.want == "" {
			if strings.Contains(err.Error(), "with our flags") {
				t.Errorf("%q: err = %v\nwant no corrected command line", c.args, err)
			}
			continue
		}
		if last != c.want {
			t.Errorf("%q: err = %v\nwant the last line %q", c.args, err, c.want)
		}
		if len(lines) < 3 || !strings.HasSuffix(lines[len(lines)-2], "(see mlp -h)") {
			t.Errorf("%q: err = %v\nwant each unknown flag's line before the corrected command", c.args, err)
		}
	}
}
