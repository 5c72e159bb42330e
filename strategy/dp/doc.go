// Package dp is data parallelism in one process, registered as "dp": DP
// keeps one replica per device, splits each batch between them, and
// averages their gradients before one optimizer step (Lightning's "dp").
// Its replicas reduce SyncBatchNorm statistics among themselves
// (syncbn.go), and wait for each other between their forward and backward
// passes while TrainOptions.BeforeBackward runs once for the batch
// (beforebackward.go).
//
// dp imports strategy, strategy/replica, strategy/device (the engine only
// through strategy/device/engine) and strategy/collective (its op names);
// no other strategy/<name> package (internal/archtest checks it).
package dp
