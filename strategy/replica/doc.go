// Package replica is the machinery that strategy implementations share, for
// strategy/<name> packages only (users build strategies by name or through
// their constructors): the graph cache every in-process replica builds
// through (Graphs, one build at a time), the dispatch of a step by mode
// (RunStep), the optimizer step over reduced gradients (ApplyStep) and the
// hook before it (BeforeUpdate), the reduction of logged metrics across
// ranks (ReduceMetrics), dropout seeds per replica (Seed), the
// SyncBatchNorm engine option (StatSyncOption), the cores' share per local
// rank (ShareCores) and the profiler helpers; and, for the strategies that
// take a group over (sharded, fsdp), one rank's hold on the job (Job: the
// group given or joined through a ddp joiner, the first failure, Reduce,
// Launch and Teardown's last barrier), the building of that joiner by
// name (JoinerByName), and a rank's chunks of the sharded units with the
// optimizer state over them in state dicts (Chunks, OptimizerChunks,
// GatherChunks, LoadOptimizerChunks).
//
// replica imports strategy, strategy/collective (the interface),
// strategy/device and strategy/device/engine, module, data, optim, blas and
// profiler; no strategy/<name> package (the joiner is built by name), no
// collective backend, and nothing above the strategies (internal/archtest
// checks it). Every strategy/<name> may import it.
package replica
