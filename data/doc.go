// Package data owns what feeds a training loop: the Dataset interface, the
// Loader (batching, shuffling by (seed, epoch), drop-last, background prefetch
// with a bounded queue and recycled buffers), the samplers (sequential,
// random, and DistributedSampler, which shards a dataset by rank and world),
// the IDX reader for MNIST and Fashion-MNIST, the CIFAR-10 binary reader,
// and an embedded Fashion-MNIST subset so that examples run with nothing
// installed.
//
// Randomness comes in from outside: every order is a pure function of a seed
// and an epoch number, so a seeded run visits the same examples in the same
// order on every machine and every Go version.
//
// Package data must not import trainer or any strategy package, and it never
// decides parallelism: the caller (the trainer) inserts a DistributedSampler
// with the rank and world it was given.
package data
