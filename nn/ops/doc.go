// Package ops holds fulgur's custom Gorgonia operations: fused, allocation-
// lean kernels for the layers of package nn, and replacements for the parts
// of Gorgonia v0.9.17 that are wrong or missing (see DESIGN.md, "known
// defects"). Every op works in float32 and float64, differentiates through
// SymDiff (what TapeMachine uses) into backward ops of this package, and is
// covered by a gradient check in both dtypes.
//
// Conventions every op here follows:
//
//   - Each op instance writes a unique hash, so Gorgonia never merges two
//     look-alike nodes (two Linear layers of the same shape, say).
//   - Outputs are written into a buffer the op holds across runs, sized at the
//     first run: a graph run allocates (nearly) nothing. An op never writes
//     into its inputs and never returns one of them, so reusing its buffer is
//     safe however Gorgonia's register allocation aliases values downstream.
//     Caches that a backward op reads (argmax indices, dropout masks, batch
//     statistics) are separate from outputs, and each backward op takes the
//     forward node as an input so the tape orders it after the forward.
//   - Shapes are checked when the graph is built, with errors naming both
//     shapes; the values bound at run time are checked again (a batch of the
//     wrong size is an error, not memory corruption).
//   - Matrix multiplies go through blas, except the float32
//     convolutions' where the CPU has AVX-512 or AVX2 with FMA: those run
//     on this package's kernels (sgemm_amd64.s, sgemm_avx2_amd64.s), from
//     a zero-padded copy of the input rather than a column matrix where
//     that is faster (conv_implicit.go), and same-padded 3x3 ones of 16
//     channels and more, forward, input and weight gradient, as Winograd
//     F(4x4, 3x3) (conv_winograd.go, on both tiers); with AVX-512 the
//     input gradient of strided ones runs phase by phase rather than
//     through col2im (conv_phase.go). The float32 normalisation and
//     activation loops use those tiers too (elem_amd64.s,
//     elem_avx2_amd64.s, bnadd_amd64.s). Elsewhere, and for float64, the
//     Go loops and the BLAS.
//   - A grouped convolution (Conv2dOpts.Groups) with at most four input
//     channels a group, depthwise included, is a direct convolution: a
//     vector multiply-add per kernel tap over a whole zero-padded plane,
//     every tap in one pass on AVX-512 (conv_direct.go); so is, in float32
//     on AVX-512, an ungrouped stride-1 one with at most four input
//     channels, output channels not a multiple of 8 and no same padding
//     (LeNet's first layers), whose column matrix would be gathered pixel
//     by pixel. A
//     grouped one with more runs the ungrouped convolution's ops group by
//     group on gathered channels (conv_group.go): every path above serves
//     each group.
//   - Passes over activations are fused where a layer's ops meet: BatchNorm
//     with its ReLU, a ResNet block's last BatchNorm (and its projection's)
//     with the shortcut's sum and the ReLU (BatchNormAddReLU), and in the
//     backward pass the ReLU's mask with the BatchNorm sums (bnMaskOp), which
//     also takes the gradient sum before it as two summands
//     (SumInputDoer), so that an executor can skip that Add's pass.
//   - Convolutions split their batch between Workers() goroutines (the
//     plan of blas: cores over local ranks over BLAS threads;
//     SetImageWorkers), which claim whole image chunks until none is left,
//     so that a one-thread BLAS still uses every core of the process's
//     share and a goroutine that starts late does less; the forward and
//     input gradient are bitwise the serial ones, the weight gradient sums
//     partial sums over fixed image ranges (two a worker) in range order.
//     A Linear layer's multiply of 2^24 multiply-adds or more splits its
//     output columns into blocks of 256 between the same workers
//     (gemmCols in linear.go; one call on one worker unless
//     SetDeterministic). The loops of normalisation, activations,
//     pooling, the elementwise losses and their gradients, and a
//     convolution's bias gradient split the same way (SetLoopWorkers),
//     with results independent of the worker count: a loss over more
//     than 2^16 elements sums partial sums of 2^16 elements each, in
//     order, whatever the workers.
//     Between splits the pool's goroutines, and a caller waiting for
//     them, poll for a while before they sleep (SetSpinWait), so that
//     the next split does not wait for a sleeping thread to wake.
//   - Embedding, LayerNorm, the smooth activations (GELU, Tanh, Sigmoid,
//     SiLU) and Softmax and LogSoftmax along an axis are plain Go loops,
//     each element computed in float64 and rounded once; only the smooth
//     activations, tens of nanoseconds an element, split between the loop
//     workers, the others run on one goroutine.
//
// ops imports only Gorgonia, tensor, blas and golang.org/x/sys/cpu
// (to detect AVX-512); never trainer, strategy or module.
package ops
