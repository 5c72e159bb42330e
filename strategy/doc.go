// Package strategy is the interface between the trainer and the strategies
// that decide where replicas of a module live and how their gradients are
// combined. The implementations live in strategy/single, strategy/dp,
// strategy/ddp (ddp, ddp_spawn), strategy/sharded and strategy/fsdp, share
// strategy/replica, and register themselves by name here. The trainer
// talks to every strategy through the Strategy interface (eight methods:
// Info, Setup, Step, OptimizerStep, Reduce, SaveState, LoadState, Teardown)
// and finds further abilities (Replica, Launcher, FitRunner, Rebinder,
// Sampler, MemoryReporter, GroupJoiner, StopAgreer) by type assertion, as database/sql does with
// drivers; it never switches on a strategy's type. The name registry (New,
// Register, Known) serves the trainer's Config.Strategy names and
// command-line programs only; the implementations fill it when linked.
// A strategy's errors name the trainer.Config fields of its Options
// (Devices, NumNodes) through Options.Name, so a command line's user reads
// its flags (trainer.Config.SettingName, passed on in Options).
//
// A strategy owns its parameters, optimizer and scheduler state and their
// I/O: SaveState and LoadState exchange a StateDict (state.go) of named
// tensors, each with the span of its global tensor that this rank holds, so
// a checkpoint saved at one world size loads at another. The trainer writes
// and reads checkpoint files from state dicts only.
//
// WatchStopSignals is the one reading of SIGINT and SIGTERM that the
// trainer's Fit and ddp_spawn's launcher share: the first signal and its
// repeats within DuplicateSignalWindow are one request to stop after the
// step; a later one exits at once.
//
// strategy may import strategy/{device, collective, cluster, launch},
// module, data, optim, nn and profiler; it must not import trainer, parse
// flags or read os.Environ directly (cluster lookups are injected). The
// interface package imports no backend: no strategy/collective/<backend>,
// no strategy/<name>, no engine or BLAS past the device layer
// (internal/archtest checks it).
package strategy
