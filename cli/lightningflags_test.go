package cli_test

import (
	"context"
	"strings"
	"testing"
)

// A Lightning user's command line: each flag we have under another
// spelling is named, with the value they gave; each value Lightning takes
// that we do not is named with what to type instead.
func TestLightningSpellingsNameOurFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
		not  []string
	}{
		{[]string{"-default-root-dir", "/tmp/x"}, []string{"unknown flag -default-root-dir", "Lightning's default_root_dir is -root-dir here: write -root-dir /tmp/x", "(see mlp -h)"}, nil},
		{[]string{"--default_root_dir=/tmp/x"}, []string{"unknown flag -default_root_dir", "write -root-dir /tmp/x"}, nil},
		{[]string{"--max_epochs", "3"}, []string{"unknown flag -max_epochs: write -max-epochs 3; flags here are written with '-'"}, nil},
		{[]string{"--trainer.max_epochs=3"}, []string{"unknown flag -trainer.max_epochs: write -max-epochs 3; flags here have no section prefix and are written with '-'"}, nil},
		{[]string{"-Max-Epochs", "3"}, []string{"write -max-epochs 3; flags here are lower case"}, []string{"'_'"}},
		{[]string{"--model.init_args.lr", "0.1"}, []string{"write -lr 0.1"}, nil},
		{[]string{"--data.batch_size", "32"}, []string{"write -batch-size 32"}, nil},
		{[]string{"--seed_everything", "7"}, []string{"Lightning's seed_everything is -seed here: write -seed 7"}, nil},
		{[]string{"--enable_checkpointing", "false"}, []string{"enable_checkpointing is -no-checkpoint here: write -no-checkpoint"}, []string{"-no-checkpoint false"}},
		{[]string{"--trainer.enable_progress_bar=true"}, []string{"-no-progress-bar here: write nothing: it is the default"}, nil},
		{[]string{"--trainer.enable_progress_bar", "true", "-fast-dev-run", "2", "-nope"}, []string{"-no-progress-bar here: write nothing: it is the default", "unknown flag -nope"}, nil},
		{[]string{"--logger", "false"}, []string{"write -loggers none"}, []string{"-loggers false"}},
		{[]string{"--logger", "tensorboard"}, []string{"write -loggers tensorboard"}, nil},
		{[]string{"--check_val_every_n_epoch", "2"}, []string{"unknown flag -check_val_every_n_epoch: write -check-val-every-n-epoch 2"}, []string{"App.Callbacks"}},
		{[]string{"--trainer.val_check_interval", "0.25"}, []string{"write -val-check-interval 0.25", `and for "0.25": a fraction of the epoch is Lightning's`}, nil},
		{[]string{"--gradient_clip_algorithm", "value", "--gradient_clip_val", "0.5"}, []string{"write -gradient-clip-algorithm value", "write -gradient-clip-val 0.5"}, nil},
		{[]string{"--track_grad_norm", "2"}, []string{"Lightning's track_grad_norm is -log-grad-norm here: write -log-grad-norm ("}, []string{"-log-grad-norm 2"}},
		{[]string{"--track_grad_norm", "-1"}, []string{"track_grad_norm is -log-grad-norm here: write nothing: it is the default"}, []string{"unknown flag -1"}},
		{[]string{"--use_distributed_sampler", "false"}, []string{"use_distributed_sampler has no flag here: each rank reads its share", "trainer.Config.UseDistributedSampler, in App.Callbacks"}, nil},
		{[]string{"--auto_lr_find", "true", "-max-steps", "1"}, []string{"unknown flag -auto_lr_find: Lightning's auto_lr_find: it is the lr-find command here: mlp lr-find (see mlp -h)"}, nil},
		// A Lightning name with a Lightning value: both answered.
		{[]string{"--trainer.precision", "16-mixed"}, []string{"write -precision 16-mixed", `and for "16-mixed": fulgur computes in float32 or float64`}, nil},
		// Misspellings: the one clearly closest flag, else none.
		{[]string{"-max-epoch", "1"}, []string{"unknown flag -max-epoch: did you mean -max-epochs?"}, nil},
		{[]string{"-precison", "64"}, []string{"did you mean -precision?"}, nil},
		{[]string{"-max-step", "1"}, []string{"did you mean -max-steps?"}, nil},
		// -max-steps and -min-steps are both 1 edit from this.
		{[]string{"-mix-steps", "1"}, []string{"unknown flag -mix-steps (see mlp -h)"}, []string{"did you mean"}},
		{[]string{"-nope"}, []string{"unknown flag -nope (see mlp -h)"}, []string{"did you mean"}},
		// Every unknown flag at once, not one per try.
		{[]string{"--trainer.max_epochs", "3", "--trainer.devices", "2", "-nope", "--trainer.accelerator", "cpu"},
			[]string{"-trainer.max_epochs: write -max-epochs 3", "-trainer.devices: write -devices 2", "unknown flag -nope", "-trainer.accelerator: write -accelerator cpu"}, nil},

		// Values.
		{[]string{"-precision", "16-mixed"}, []string{`-precision is "16-mixed"`, "no half or mixed precision", "-precision 32"}, nil},
		{[]string{"-precision", "bf16-mixed"}, []string{`-precision is "bf16-mixed"`, "-precision 32"}, nil},
		{[]string{"-precision", "32-true"}, []string{`-precision is "32-true"`, "write -precision 32"}, nil},
		{[]string{"-precision", "64-true"}, []string{"write -precision 64"}, nil},
		{[]string{"-devices", "auto"}, []string{`"auto"`, "-devices -1"}, nil},
		{[]string{"-devices", "0,1"}, []string{`"0,1"`, "a count of devices", "-devices 2"}, nil},
		{[]string{"-devices", "[0]"}, []string{"-devices 1"}, nil},
		{[]string{"-limit-val-batches", "0.25"}, []string{`"0.25"`, "a fraction", "number of batches"}, nil},
		{[]string{"-max-time", "00:12:30:00"}, []string{`"00:12:30:00"`, "-max-time 12h30m0s"}, nil},
		{[]string{"-max-time", "01:00:00:05"}, []string{"-max-time 24h0m5s"}, nil},
		{[]string{"-loggers", "false"}, []string{`-loggers names "false"`, "-loggers none"}, nil},
		{[]string{"-strategy", "deepspeed_stage_2"}, []string{`-strategy is "deepspeed_stage_2"`, "sharded_stage2"}, nil},
		{[]string{"-strategy", "deepspeed_stage_3"}, []string{"fsdp"}, nil},
		{[]string{"-deterministic", "true"}, []string{`unexpected arguments ["true"]`, "write -deterministic=true", "bare -deterministic"}, nil},
		{[]string{"-no-checkpoint", "false"}, []string{"write -no-checkpoint=false"}, nil},
	} {
		err := mlpApp(t.TempDir()).Run(context.Background(), c.args)
		if err == nil {
			t.Errorf("%q: no error", c.args)
			continue
		}
		t.Logf("%q:\n%v", c.args, err)
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: err = %v\nwant it to contain %s", c.args, err, w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(err.Error(), w) {
				t.Errorf("%q: err = %v\nshould not contain %s", c.args, err, w)
			}
		}
	}
}

// A LightningCLI config file: its Trainer names and its top-level
// seed_everything are answered with ours, as on the command line.
func TestLightningConfigNamesOurSettings(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"trainer:\n  default_root_dir: runs\n", "trainer.default_root_dir is not a flag of this program: Lightning's default_root_dir is root_dir here"},
		{"trainer:\n  max_epoch: 3\n", "trainer.max_epoch is not a flag of this program: did you mean max_epochs?"},
		{"trainer:\n  enable_checkpointing: false\n", "Lightning's enable_checkpointing is no_checkpoint here (checkpoints are written by default"},
		{"trainer:\n  use_distributed_sampler: false\n", "Lightning's use_distributed_sampler has no setting here: each rank reads its share of the data"},
		{"trainer:\n  track_grad_norm: 2\n", "Lightning's track_grad_norm is log_grad_norm here"},
		{"seed_everything: 42\n", "seed_everything: Lightning's seed_everything is seed here, under trainer: (trainer: {seed: 42})"},
	} {
		p := writeFile(t, "c.yaml", c.body)
		err := mlpApp(t.TempDir()).Run(context.Background(), []string{"-config", p, "-print-config"})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "-config "+p) {
			t.Errorf("%q: err = %v\nwant %q", c.body, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "the trainer settings are") {
			t.Errorf("%q: err = %v\nlists every setting beside the one meant", c.body, err)
		}
	}
}
