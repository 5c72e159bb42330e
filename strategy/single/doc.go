// Package single is the one-replica strategy, registered as "single":
// Single trains one replica in this process on the CPU. It is what
// trainer.Config{Strategy: "auto"} picks for one device on one node, the
// reference the distributed strategies are tested against, and the replica
// ddp_spawn's launching process holds.
//
// single imports strategy, strategy/replica and strategy/device/engine; no
// other strategy/<name> package (internal/archtest checks it).
package single
