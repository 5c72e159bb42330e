// Package data owns what feeds a training loop: the Dataset interface, the
// Loader (batching, shuffling by (seed, epoch), drop-last, background prefetch
// with a bounded queue and recycled buffers), the samplers (sequential,
// random, and DistributedSampler, which shards a dataset by rank and world),
// the IDX reader for MNIST and Fashion-MNIST, the CIFAR-10 binary reader,
// and an embedded Fashion-MNIST subset so that examples run with nothing
// installed. For data of your own: ReadCSV and OpenCSV make a dataset of a
// CSV file's columns (a table of features and a target), RandomSplit cuts a
// dataset into training and validation parts (torch's random_split), MeanStd
// and Normalize standardise a field with the training part's statistics, and
// NewInMemory and NewSubset take slices you filled yourself.
//
// Randomness comes in from outside: every order is a pure function of a seed
// and an epoch number, so a seeded run visits the same examples in the same
// order on every machine and every Go version.
//
// Package data must not import trainer or any strategy package, and it never
// decides parallelism: the caller (the trainer) inserts a DistributedSampler
// with the rank and world it was given.
package data
