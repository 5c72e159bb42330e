// Package replica is the machinery that strategy implementations share, for
// strategy/<name> packages only (users build strategies by name or through
// their constructors): the graph cache every in-process replica builds
// through (Graphs, one build at a time), the dispatch of a step by mode
// (RunStep), the optimizer step over reduced gradients (ApplyStep) and the
// hook before it (BeforeUpdate), the reduction of logged metrics across
// ranks (ReduceMetrics), dropout seeds per replica (Seed), the
// SyncBatchNorm engine option (StatSyncOption), the cores' share per local
// rank (ShareCores) and the profiler helpers.
//
// replica imports strategy, strategy/collective (the interface),
// strategy/device/engine, module, data, optim, blas and profiler; no
// strategy/<name> package, no collective backend, and
// nothing above the strategies (internal/archtest checks it). Every
// strategy/<name> may import it.
package replica
