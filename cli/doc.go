// Package cli is LightningCLI for Go: it turns a module, its data and the
// Trainer's settings into a command-line program with subcommands, flags
// and config files, so a training program's main is one statement:
//
//	cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}.Main()
//
// The first argument is the command: fit (the default: train, then test
// when the data has a test split), validate, test and predict, which
// evaluate -ckpt-path (a file, last or best), and lr-find, the
// learning-rate range test. -h lists the commands and every flag.
//
// Flags come from struct fields tagged `flag:"name"`, in three sections:
// the Trainer's (Settings: -max-epochs, -devices, -strategy, -ckpt-path,
// ...), the model's and the data's (a DataModule). A tag may add
// `help:"..."`, `default:"..."` (when the field is zero in the value given),
// `choices:"a,b"` and `check:">0"`. -config FILE reads the same flags
// from YAML or JSON sections trainer:, model:, data: (the command line
// wins), and -print-config writes one.
//
// A bad value gets an error naming the flag, the value and what to write
// instead; an unknown flag, one naming the flag it most likely means
// (Lightning's --trainer.max_epochs is -max-epochs, default_root_dir is
// -root-dir; -max-epoch is misspelt). The trainer's and the strategies'
// errors and log lines name flags too (-min-epochs is 5 and -max-epochs 2,
// not MinEpochs and MaxEpochs): the trainer.Config that
// Settings.TrainerConfig builds has a SettingName that gives them. A
// module's own error reaches the user as the module wrote it.
//
// fit -weights FILE starts from the weights of a file with a fresh
// optimizer (fine-tuning: a PyTorch safetensors state dict or a
// checkpoint), with -weights-strip-prefix module. for the state_dict() of
// a DDP-wrapped model, -weights-only-prefix and -weights-not-strict
// (trainer.StripPrefix, OnlyPrefix and Strict(false)).
//
// Whatever the command, the last line on stdout is one JSON object, the
// Summary (test_acc and test_loss, null when no test ran; epochs and
// global_step, the run's, a resumed fit counting those before it;
// train_samples_per_s, this process's own training; world_size,
// weights_sha256, ...), printed by rank 0. A fit leaves its run directory
// ROOT/lightning_logs/version_N (loggers, checkpoints, plots/ and
// report.md); SIGINT or SIGTERM saves a checkpoint and prints the command
// that resumes. Under ddp the program re-executes itself for its other
// ranks with the same arguments, so every rank parses the same flags.
//
// A rank of a launched job that fails before it joins the others (a bad
// flag, a -ckpt-path or data directory missing on its machine) tells them
// why through rank 0 (ddp.AbortJoin) before Run returns, so they end at
// once naming it instead of waiting FULGUR_TIMEOUT.
//
// cli imports callbacks, trainer, data, module, profiler,
// strategy/cluster (the rank, for per-rank profiles), strategy/ddp
// (AbortJoin only) and strategy/launch (the launcher's variables, for the
// command that resumes); it holds no training logic: everything it does
// goes through trainer.Trainer.
package cli
