// Package trainer runs a module.Module: Fit, Validate, Test and Predict, the
// training loop, gradient accumulation and clipping, validation scheduling,
// logging of metrics, and the hooks of modules and callbacks.
//
// Checkpoints (checkpoint.go) are safetensors files holding the model's
// tensors plus the optimizer, scheduler, callback states and the loop
// position in checksummed metadata; Fit(..., FromCheckpoint(path)) resumes
// exactly where the run stood. ckptfile.go is how a save meets the disk:
// through a locked temporary file renamed over the target, so a full disk
// or a kill leaves the previous checkpoint whole; the next Fit removes the
// temporary files of interrupted saves and fails before the first step
// when rank 0 cannot write the run directory. SIGINT and SIGTERM during Fit (signal.go)
// finish the step, save a checkpoint and stop every rank. With several
// ranks, every rank learns after each step whether any asked to stop (a
// hook's Stop, a signal, a cancelled context): by a small all-reduce of
// their stop flags, or, with ddp when no module or callback may stop after
// the backward pass (StepEndStopper), with the flags riding in the step's
// last gradient all-reduce, sampled as it is queued. Under an elastic
// launcher (elastic.go; "fulgur run", FULGUR_MAX_RESTARTS) a restarted Fit
// goes on in the job's run directory from its newest last.ckpt, at any
// world size.
//
// The trainer reaches replicas only through strategy.Strategy and never
// switches on a strategy's type. dispatch.go is the only caller of hooks; it
// opens a profiler span named after each hook and wraps its error with that
// name. Callbacks receive a read-only State (a copy, with views of metrics
// and weights), never the Trainer.
//
// The loop is in parts: loop.go (epochs, the batches of an epoch, the
// epoch's end), step.go (one batch: forward and backward, the optimizer
// step and its hooks, step logs), accumulate.go (accumulation windows),
// valsched.go (when validation runs) and signal.go (ranks agreeing on a
// stop). Config.Validate rejects settings that would ignore each other
// (config_conflicts.go).
//
// trainer imports module, data, optim, nn, profiler, strategy, blas (the BLAS
// choice at start) and panics (user panics as errors); it must
// not be imported by any of them.
package trainer
