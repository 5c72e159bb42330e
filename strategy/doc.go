// Package strategy decides where replicas of a module live and how their
// gradients are combined: Single (one replica), and the distributed
// strategies DP, DDP, DDP-spawn and Sharded. The trainer talks to every
// strategy through the Strategy interface (eight methods: Info, Setup,
// Step, OptimizerStep, Reduce, SaveState, LoadState, Teardown) and finds
// further abilities (Replica, Launcher, FitRunner, Rebinder, Sampler,
// MemoryReporter) by type assertion, as database/sql does with drivers; it
// never switches on a strategy's type; a name registry (New, Register, Known) serves the trainer's
// Config.Strategy names and command-line programs only.
//
// A strategy owns its parameters, optimizer and scheduler state and their
// I/O: SaveState and LoadState exchange a StateDict (state.go) of named
// tensors, each with the span of its global tensor that this rank holds, so
// a checkpoint saved at one world size loads at another. The trainer writes
// and reads checkpoint files from state dicts only.
//
// DDP and Sharded run one process per device: ddp_launch.go re-executes the
// program for local ranks or joins the job a launcher describes, and
// connects over FULGUR_BACKEND (auto, tcp, shm, mpi, nccl). bucket.go lays
// out gradient buckets; syncbn.go gives BatchNorm layers the group's
// reductions for SyncBatchNorm.
//
// strategy may import strategy/{device, collective, cluster, launch},
// module, data, optim, nn and profiler; it must not import trainer, parse
// flags or read os.Environ directly (cluster lookups are injected). The
// interface package imports no backend: no strategy/collective/<backend>,
// no strategy/<name>, no internal/engine or internal/blas (today's imports
// of them are exemptions in internal/archtest, removed as issue 14 lands).
package strategy
