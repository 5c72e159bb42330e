// Package ddp is distributed data parallelism, one process per device, and
// its spawn variant; it registers them with package strategy by name: "ddp"
// (DDP) and "ddp_spawn" (DDPSpawn: the same ranks started and collected by
// the launching process). "single", "dp", "sharded" (ZeRO stage 1 and 2)
// and "fsdp" live in strategy/single, strategy/dp, strategy/sharded and
// strategy/fsdp; the last two start and join their processes through a
// "ddp" strategy built by name (strategy.GroupJoiner). Linking this
// package is what makes its names known to strategy.New; the trainer links
// it (trainer/strategies.go), so a program that sets trainer.Config.Strategy
// needs no import of its own. A program that calls strategy.New without the
// trainer imports it blank:
//
//	import _ "github.com/fulgur-ml/fulgur/strategy/ddp"
//
// Tests and libraries that build a strategy value use the constructors
// (NewDDP) and pass it as trainer.Config.StrategyImpl.
//
// ddp_launch.go re-executes the program for local ranks or joins the job a
// launcher describes, and connects over FULGUR_BACKEND (auto, tcp, shm,
// hier, mpi, nccl). abort.go's AbortJoin lets a rank of such a job that
// fails before it joins tell the others why (rendezvous.Abort). bucket.go lays out gradient buckets, which ddp.go reduces while
// the backward pass runs (the engine reports each gradient as it is
// computed, engine.WithGradReady), the last one carrying rank 0's buffers
// and the trainer's stop flags (strategy.TrainOptions.Ride); syncbn.go gives BatchNorm
// layers the group's reductions for SyncBatchNorm. ddp_spawn's launching
// process holds the strategy registered as "single" (by name, not by
// import).
//
// ddp imports strategy, strategy/replica and strategy/{device, collective,
// cluster, launch} (the engine only through strategy/device/engine),
// module, data, optim, nn and profiler; never trainer, callbacks or cli, and
// no other strategy/<name> package.
package ddp
