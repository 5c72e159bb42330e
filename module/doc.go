// Package module is what a fulgur user implements: a Module declares its
// parameters and buffers through a Builder and builds its Gorgonia graph for a
// batch through a Step. Everything else a module can do (validation, test and
// predict steps, optimizer configuration, hooks) is an optional one-method
// interface that the trainer discovers by type assertion.
//
// The Store holds every parameter and buffer of one replica in one flat,
// contiguous buffer per dtype, addressed by name; graph nodes are bound to views
// of it, so optimizers, bucketed all-reduce, broadcast, sharding and
// checkpoints all work on plain slices without copies.
//
// A module's graph may be built many times: once per replica, per mode (train,
// validate, test, predict) and per batch size. Configure is called once;
// TrainingStep and friends must only use the Step they are given.
//
// module must not import trainer or strategy packages, and knows nothing of
// devices, ranks or time.
package module
