// Package trainer runs a module.Module: Fit, Validate, Test and Predict, the
// training loop, gradient accumulation and clipping, validation scheduling,
// logging of metrics, and the hooks of modules and callbacks.
//
// The trainer reaches replicas only through strategy.Strategy and never
// switches on a strategy's type. dispatch.go is the only caller of hooks; it
// opens a profiler span named after each hook and wraps its error with that
// name. Callbacks receive a read-only State, never the Trainer.
//
// trainer imports module, data, optim, nn, profiler and strategy; it must
// not be imported by any of them.
package trainer
