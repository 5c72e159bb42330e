// Package fsdp is fully sharded data parallelism (ZeRO stage 3, PyTorch's
// FSDP and Lightning's "fsdp" strategy): each rank keeps 1/N of the
// parameters, gradients and optimizer state; a unit's parameters (a layer,
// or a run of layers up to a size) are all-gathered just before their first
// use in the schedule and freed after their last, the next unit's gather
// overlapping the current unit's compute, and gradients are
// reduce-scattered unit by unit as the backward pass produces them.
//
// The engine does the scheduling (engine.Sharding, over a
// module.NewLayoutStore that holds no parameters); this package owns the
// shards, the optimizer over them, the collectives and the state dicts:
// SaveState returns each rank's spans of every tensor (or, with Full, the
// tensors whole), and LoadState takes the spans this rank holds from a
// dict saved at any world size, by any strategy.
//
// Gradient accumulation (the trainer's AccumulateGradBatches) follows
// PyTorch FSDP's no_sync(): the micro-batches of a window before its last
// (TrainOptions.Sync false) communicate nothing, each rank adding every
// unit's whole gradient into a local gradient of the whole model, which the
// last micro-batch reduce-scatters with its own. That is the default
// because it is what Sync false promises every strategy (ddp does the same)
// and it sends one reduce-scatter per window instead of one per
// micro-batch; its price is memory: one whole gradient per rank (N times the
// gradient shard), made when a run first accumulates and kept for the
// windows that follow. A model that fits only at 1/N sets
// Config.SyncMicroBatches (FULGUR_FSDP_SYNC_MICROBATCHES=1) to
// reduce-scatter every micro-batch instead (PyTorch FSDP outside
// no_sync()). Without accumulation the two are the same.
//
// CPU offload (PyTorch's CPUOffload, Config.CPUOffload,
// FULGUR_FSDP_CPU_OFFLOAD=1) has nothing to do in this build: the engine
// runs on the CPU and every shard (parameters, gradients, optimizer state)
// lives in host memory already. Asking for it is accepted, so that one
// configuration serves every machine, and Setup logs one line saying it
// changes nothing.
//
// Config.ShardGroup and Config.ReplicaGroup make it HYBRID_SHARD: sharded
// within one group of ranks (a node), replicated across the other (one rank
// per node), the replicas' gradients all-reduced after each unit's
// reduce-scatter. The groups are the caller's: collectives cannot split a
// group by rank list yet, so there is no "hybrid_shard" by name.
//
// Registered as "fsdp", it starts and joins the job's processes as "ddp"
// does, by building that strategy by name and taking its group over
// (strategy.GroupJoiner); FULGUR_FSDP_WRAP, FULGUR_FSDP_MIN_UNIT_PARAMS,
// FULGUR_FSDP_RESHARD_AFTER_FORWARD, FULGUR_FSDP_PREFETCH,
// FULGUR_FSDP_SYNC_MICROBATCHES and FULGUR_FSDP_CPU_OFFLOAD configure it.
//
// fsdp imports strategy, strategy/replica, strategy/{device, collective}
// (the engine only through strategy/device/engine), module, data, optim and
// profiler; never trainer, another strategy/<name> or a collective backend
// (tests use inproc).
package fsdp
