// Package builtin holds the multi-process strategies fulgur ships and
// registers them with package strategy by name: "ddp" (DDP), "ddp_spawn"
// (DDPSpawn) and "sharded", "sharded_stage1", "sharded_stage2" (Sharded);
// "single" and "dp" live in strategy/single and strategy/dp. Linking it is
// what makes those names known to strategy.New; the trainer links it
// (trainer/strategies.go), so a program that sets trainer.Config.Strategy
// needs no import of its own. A program that calls strategy.New without the
// trainer imports it blank:
//
//	import _ "github.com/fulgur-ml/fulgur/strategy/builtin"
//
// Tests and libraries that build a strategy value use the constructors
// (NewDDP, NewSharded) and pass it as trainer.Config.StrategyImpl.
//
// DDP and Sharded run one process per device: ddp_launch.go re-executes the
// program for local ranks or joins the job a launcher describes, and
// connects over FULGUR_BACKEND (auto, tcp, shm, mpi, nccl). bucket.go lays
// out gradient buckets; syncbn.go gives BatchNorm layers the group's
// reductions for SyncBatchNorm. ddp_spawn's launching process holds the
// strategy registered as "single" (by name, not by import).
//
// builtin imports strategy, strategy/replica and strategy/{device,
// collective, cluster, launch} (the engine only through
// strategy/device/engine), module, data, optim, nn and profiler; never
// trainer, callbacks or cli, and no other strategy/<name> package. DDP,
// DDPSpawn and Sharded are one package today because Sharded and the spawn
// worker reach into DDP's fields; moving Sharded to strategy/sharded over
// strategy/replica is the rest of issue 14 item 2.
package builtin
