// Package sharded is ZeRO stage 1 and 2 data parallelism (DeepSpeed's ZeRO,
// Lightning's "deepspeed_stage_1" and "deepspeed_stage_2"): every rank holds
// the whole model and runs forward and backward on its data, as under ddp,
// but keeps 1/N of the optimizer state (stage 1) and of the reduced
// gradients too (stage 2). It registers "sharded" (stage 2),
// "sharded_stage1" and "sharded_stage2" with package strategy; the trainer
// links it (trainer/strategies.go), a program calling strategy.New without
// the trainer imports it blank.
//
// The parameters are cut into units (gradient buckets: consecutive whole
// tensors up to Config.BucketBytes), and rank r owns block r of each unit,
// as collective.Offset and BlockLen lay it out. The engine hands each
// unit's gradient over as soon as the backward pass has produced all of it
// (engine.Sharding over a store that holds the parameters, the machinery
// fsdp uses for its units), through a small pool of unit-sized buffers:
// stage 2 reduce-scatters it at once into this rank's 1/N shard, so no
// rank ever holds a whole gradient buffer (module.NewStoreWithoutGrad);
// stage 1 adds it to the replica's whole gradient buffer and, in the last
// micro-batch of a step, all-reduces the unit there. The optimizer updates
// the rank's blocks only and the units are all-gathered back.
//
// Built by name, it starts and joins the job's processes as "ddp" does, by
// building that strategy by name and taking its group over
// (strategy.GroupJoiner), as fsdp does; FULGUR_BUCKET_MB sets the unit size
// as it sets ddp's buckets.
//
// sharded imports strategy, strategy/replica, strategy/{device, collective}
// (the engine only through strategy/device/engine), module, data, optim and
// profiler; never trainer, another strategy/<name> (ddp included: it is
// reached by name) or a collective backend (tests use inproc and tcp).
package sharded
