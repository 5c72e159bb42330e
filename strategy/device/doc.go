// Package device describes the hardware one replica runs on: a Device runs a
// unit of work (a forward and backward pass, an optimizer update) and reports
// its own failures as errors that name it. The CPU device is the default; a
// CUDA device registers itself under the build tag cuda; fakedevice gives N
// logical devices in one process with fault injection for tests.
//
// Strategies open devices by accelerator name with Open ("cpu", "cuda",
// "auto"), so a new kind of device is one Register call in its own file and
// never a change to the trainer.
//
// device knows nothing of ranks, collectives or training: it must not import
// strategy, trainer, module or any collective backend. Its subpackage engine
// compiles and runs one replica's graphs (it may import module, data and nn).
package device
