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
// no_sync()), for a second gradient shard that the micro-batches after a
// window's first land in before they are added. Without accumulation the
// two are the same.
//
// CPU offload (PyTorch's CPUOffload, Config.CPUOffload,
// FULGUR_FSDP_CPU_OFFLOAD=1) has nothing to do in this build: the engine
// runs on the CPU and every shard (parameters, gradients, optimizer state)
// lives in host memory already. Asking for it is accepted, so that one
// configuration serves every machine, and Setup logs one line saying it
// changes nothing.
//
// Config.Sharding is PyTorch's sharding_strategy: FullShard (default),
// ShardGradOp (KeepAfterForward), NoShard (replicated, as DDP) and
// HybridShard: sharded within a node (Config.NodeSize ranks), replicated
// across nodes, the replicas' gradients all-reduced after each unit's
// reduce-scatter. HybridShard and NoShard split the job's group into shard
// and replica groups in Setup (collective.Splitter); Config.ShardGroup and
// Config.ReplicaGroup give groups of the caller's own instead.
//
// Where it differs from PyTorch FSDP, on purpose:
//
//   - Buffers (BatchNorm's running statistics) are rank 0's on every rank
//     after each optimizer step, broadcast as DDP's broadcast_buffers does;
//     PyTorch FSDP leaves each rank its own. So fsdp's weights, buffers
//     included, are ddp's within summation order (bit for bit over shm
//     without clipping by norm; over tcp at 3 ranks the reduce-scatter and
//     the all-reduce sum in other orders), and one device's with
//     the global batch, within summation order, with SyncBatchNorm or
//     without BatchNorm.
//   - The default wrapping is one unit per layer (WrapLayer); PyTorch FSDP
//     without an auto_wrap_policy makes the whole model one unit, which
//     holds it whole while it computes.
//   - Checkpoints are safetensors files, not torch.distributed.checkpoint
//     directories. The full form (SaveOptions.Full, the trainer's default)
//     holds every tensor whole under its PyTorch name, which
//     load_state_dict takes once the "optimizer/" entries are left out; the
//     optimizer's state is one flat tensor per buffer ("optimizer/exp_avg",
//     one value per parameter element, in the order the module declares
//     its parameters), not full_optim_state_dict's per-parameter dict. The
//     sharded form (trainer.Config.ShardedCheckpoint) is one file per rank
//     of flat spans beside an index, and loads at any world size and under
//     any strategy, as the full form does.
//
// Registered as "fsdp", it starts and joins the job's processes as "ddp"
// does, by building that strategy by name and taking its group over
// (strategy.GroupJoiner); FULGUR_FSDP_WRAP, FULGUR_FSDP_MIN_UNIT_PARAMS,
// FULGUR_FSDP_RESHARD_AFTER_FORWARD, FULGUR_FSDP_PREFETCH,
// FULGUR_FSDP_SYNC_MICROBATCHES, FULGUR_FSDP_CPU_OFFLOAD and
// FULGUR_FSDP_SHARDING (full_shard, hybrid_shard, shard_grad_op,
// no_shard) configure it. "fsdp_hybrid_shard" is "fsdp" with hybrid_shard:
// a node is the launcher's ranks per node (LOCAL_WORLD_SIZE, ranks
// numbered node by node as torchrun and srun's block distribution number
// them), FULGUR_FSDP_NODE_SIZE ranks when set, or the whole job when this
// process launched it.
//
// fsdp imports strategy, strategy/replica, strategy/{device, collective}
// (the engine only through strategy/device/engine), module, data, optim and
// profiler; never trainer, another strategy/<name> or a collective backend
// (tests use inproc).
package fsdp
