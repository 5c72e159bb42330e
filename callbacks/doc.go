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
