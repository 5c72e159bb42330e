// Package callbacks holds the trainer's standard callbacks and loggers, in
// the shape of PyTorch Lightning's:
//
//   - ModelCheckpoint: top-k checkpoints by a monitored metric, last.ckpt,
//     every N epochs or steps, filename templates with metrics. One
//     difference from Lightning: saving every N steps while monitoring a
//     validation metric, each validation ranks the checkpoint of the
//     weights it measured, and the step checkpoints between validations
//     are unranked recovery points (Lightning ranks them by the previous
//     validation's value); see ModelCheckpointConfig.EveryNTrainSteps;
//   - EarlyStopping: stop when a metric stops improving (patience,
//     min-delta, mode, thresholds);
//   - LearningRateMonitor, ModelSummary, ProgressBar, Timer,
//     GradientAccumulationScheduler;
//   - loggers: CSVLogger (metrics.csv and hparams.yaml), TensorBoardLogger
//     (event files: scalars and hyperparameters), JSONLLogger
//     (metrics.jsonl and hparams.json), writing into a run directory
//     root/lightning_logs/version_N (VersionDir);
//   - Plots: PNG and SVG charts of every logged scalar and a report.md in
//     the run directory at the end of Fit (package plot draws them);
//   - DeviceStatsMonitor: CPU utilisation and resident memory per rank
//     every N steps (GPU memory through a hook), shown in the progress bar.
//
// Make each with its constructor (NewModelCheckpoint, NewProgressBar,
// NewCSVLogger, ...), which fills the defaults and checks the
// configuration. The zero ProgressBar, ModelSummary and
// DeviceStatsMonitor are usable (their constructors' defaults); a struct
// literal of another type, such as &ModelCheckpoint{} or &Timer{}, is not:
// trainer.New refuses it, naming its constructor (each such type is a
// trainer.ReadyChecker).
//
// # Where they differ from Lightning
//
// The callbacks follow Lightning 2.x's rules (patience counted in checks,
// top-k ranking and its ties, NaN never better, -vN names, state restored
// on resume), and these differences are deliberate:
//
//   - ModelCheckpoint: SaveTopK 0 is the default, 1 (Lightning's
//     save_top_k=0 with save_last is LastOnly; no checkpoints at all is
//     trainer.Config.DisableCheckpointing). A Monitor, or a metric named in
//     Filename, that is not logged when a checkpoint is due is an error
//     naming the logged metrics (Lightning warns and skips the save until a
//     validation has run, and writes 0 into the name). A "/" in a metric's
//     name is written "_" (Lightning makes a subdirectory); a metric prints
//     as %.4f unless formatted. SaveLast refreshes last.ckpt at every
//     epoch's end, so that it holds the weights the run ended with (as
//     Lightning before 2.6; 2.6 only when a ranked checkpoint was saved at
//     that step). last.ckpt is the run directory's point to resume from
//     ("last", elastic restarts), so it is never renamed: several
//     ModelCheckpoints with SaveLast in one directory share it, holding
//     the newest weights, and an earlier run's in the same Dirpath is
//     replaced (Lightning writes last-v1.ckpt; the ranked checkpoints get
//     -vN names beside an earlier run's, as in Lightning). There is no
//     save_on_train_epoch_end: with validation the checkpoint is saved
//     after it, in the epochs that validate, otherwise at the training
//     epoch's end, as Lightning's default does. For step or time
//     checkpoints monitoring a validation metric, see
//     ModelCheckpointConfig.EveryNTrainSteps.
//   - EarlyStopping: StoppedEpoch is -1 when it did not stop (Lightning's
//     stopped_epoch is 0); Patience comes from the configuration, not from
//     the checkpoint resumed; its stop is held off by the trainer's
//     MinEpochs and MinSteps, as Lightning's min_epochs and min_steps. Its state is kept under its Name and used
//     when Monitor and Mode match (Lightning keys it by both).
//   - LearningRateMonitor logs "lr-" and the optimizer's registry name
//     ("lr-adam"; Lightning "lr-Adam"), at "step" by default (Lightning's
//     None follows each scheduler's interval), and logs nowhere when the
//     trainer has no logger (Lightning raises).
//   - Timer: Duration is a time.Duration, not "DD:HH:MM:SS"; it times the
//     training stage only (OnTrainStart to OnTrainEnd, the sanity check not
//     counted), as Lightning's default, and has no per-stage clocks for
//     Validate or Test.
//
// Each callback is a Name plus the trainer's one-method hook interfaces it
// needs; stateful ones save their state in checkpoints under their name.
// Callbacks see the run only through *trainer.State.
//
// The trainer has its own progress display, on by default; a ProgressBar
// in Callbacks replaces it (it implements trainer.ProgressDisplay), so the
// callback is the way to customise progress output.
//
// callbacks imports trainer, module and profiler; it must not reach into
// trainer internals, and no package of the trainer's layers imports it.
package callbacks
