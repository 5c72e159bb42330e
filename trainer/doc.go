// Package trainer runs a module.Module: Fit, Validate, Test and Predict, the
// training loop, gradient accumulation and clipping, validation scheduling,
// logging of metrics, and the hooks of modules and callbacks.
//
// Checkpoints (checkpoint.go) are safetensors files holding the model's
// tensors plus the optimizer, scheduler, callback states and the loop
// position in checksummed metadata; Fit(..., FromCheckpoint(path)) resumes
// exactly where the run stood. SIGINT and SIGTERM during Fit (signal.go)
// finish the step, save a checkpoint and stop every rank. Under an elastic
// launcher (elastic.go; "fulgur run", FULGUR_MAX_RESTARTS) a restarted Fit
// goes on in the job's run directory from its newest last.ckpt, at any
// world size.
//
// The trainer reaches replicas only through strategy.Strategy and never
// switches on a strategy's type. dispatch.go is the only caller of hooks; it
// opens a profiler span named after each hook and wraps its error with that
// name. Callbacks receive a read-only State, never the Trainer.
//
// trainer imports module, data, optim, nn, profiler and strategy; it must
// not be imported by any of them.
package trainer
