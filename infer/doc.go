// Package infer runs a trained module without a Trainer and moves its
// weights to and from PyTorch.
//
// New builds a module's predict graph for the batches it will be given and
// loads its weights from a file; Predict runs one batch through it. The
// weights file is a fulgur checkpoint (every checksum is verified, the
// optimizer and trainer state are ignored) or a safetensors state dict: one
// written by SaveStateDict, or by PyTorch
// (safetensors.torch.save_file(model.state_dict(), path)).
//
// SaveStateDict writes a store's parameters and buffers as PyTorch's
// load_state_dict(strict=True) expects them: the same names ("fc1.weight",
// "layer1.0.bn1.running_mean"), Linear weights [out, in] and convolution
// weights [out, in, kh, kw] as fulgur stores them, and BatchNorm's
// num_batches_tracked as a 0-dimensional int64.
//
// To train further from such a file (fine-tuning), pass it to
// trainer.WithWeights: Fit(ctx, m, train, val, trainer.WithWeights(path))
// reads the same files, under every strategy.
//
// New picks the process's matrix multiply as a Trainer does (blas.Choose),
// before its first graph runs, so a Trainer started after a Model has
// predicted runs on the same one.
//
// infer imports module, data, blas, nn/ops (the kernel check), trainer (to
// verify checkpoints) and the internal engine; nothing imports infer but
// programs.
package infer
