// Package optim updates a flat parameter buffer in place from the matching
// flat gradient buffer: the optimizers SGD, Adam and AdamW, learning-rate
// schedulers, and gradient clipping.
//
// # What it owns
//
// Optimizers work on spans of one flat buffer per dtype (the parameter
// store's layout), not on tensors. A strategy binds an optimizer to the span
// of flat offsets it updates (the whole buffer for single-device, DP and DDP;
// one shard for sharded/ZeRO strategies, so optimizer state costs 1/N), calls
// Begin once per step, and then Update32 or Update64 on any sub-spans in any
// order — for example bucket by bucket as each all-reduce lands. Updating a
// span in pieces gives bit for bit the result of one update over the whole
// span, and two optimizers bound to the two halves of a buffer give bit for
// bit the result of one bound to all of it, because every element is updated
// independently with per-step constants computed in Begin.
//
// Update calls on disjoint sub-spans may run concurrently between two Begin
// calls; Bind, Begin, SetLR, State and LoadState must not overlap with them.
// Update32 and Update64 do not allocate after the first call.
//
// # Formulas and precision
//
// The formulas are PyTorch 1.13's single-tensor (for-loop) implementations of
// torch.optim.SGD, Adam and AdamW, operation for operation: the same order of
// multiplications, additions, square roots and divisions, with the
// hyper-parameters and per-step scalars (bias corrections, step size)
// computed in float64 and rounded to the parameter dtype, as torch does when
// it passes a Python float to a float32 kernel. Every rounding is written out
// with an explicit conversion, which forbids the compiler from fusing a
// multiply and an add, so results are identical on every architecture and
// with every GOAMD64 level.
//
// On amd64 with AVX2 the float32 kernels run eight lanes at a time in
// assembly with the same IEEE operations in the same order (no FMA), so they
// return bit for bit what the Go loops return; the tests check it. The
// purego build tag, or another architecture, selects the Go loops.
//
// State follows the parameters' dtype like torch's: Update32 keeps momentum
// and moment buffers in float32 and computes in float32, Update64 keeps them
// in float64. The precision is fixed by the first Update after Bind (state is
// allocated then, once); mixing Update32 and Update64 on one optimizer is a
// programming error and panics. State exports buffers as float64, which holds
// float32 values exactly, so a float32 checkpoint round-trips bit for bit.
//
// # Schedulers
//
// A Scheduler sets the optimizer's learning rate. Like torch's, its Step is
// called after each optimizer step (Interval PerStep) or after each epoch
// (PerEpoch); every scheduler here also implements Starter, whose Start sets
// the learning rate for the very first step (torch does that in a
// scheduler's constructor) and must be called once before training begins.
// StepLR, CosineAnnealing and LinearWarmup use closed forms, so they do not
// drift over long runs.
//
// # Clipping across ranks
//
// ClipGradNorm and ClipGradValue clip one whole gradient buffer of either
// dtype (ClipGradNorm32/64 and ClipGradValue32/64 name the instantiations).
// When gradients are spread over buckets or ranks, compute SumSquares of
// each span, reduce the partial sums (AllReduce), take the square root, get
// the factor from ClipScale, and apply ScaleGrads to each span: that is what
// ClipGradNorm does on one buffer.
//
// # Must not
//
// optim imports nothing of fulgur (in particular never trainer or strategy)
// and no Gorgonia: it sees only []float32 and []float64. It allocates nothing
// per step.
package optim
