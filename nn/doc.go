// Package nn holds fulgur's layers: Linear (over the last axis of [..., in],
// as PyTorch's), Conv2d, BatchNorm1d/2d,
// MaxPool2d, AvgPool2d, GlobalAvgPool2d, Dropout, Flatten, ReLU, the ResNet
// BasicBlock and a ResNet builder; for text, tabular and sequence models
// Embedding (token ids, whole numbers stored as floats as the batch's
// fields are, to vectors; PyTorch's padding_idx), LayerNorm (over the last
// axes), GELU (exact, or the tanh approximation), Tanh, Sigmoid and SiLU,
// and the graph functions Softmax and LogSoftmax along any axis; the
// losses CrossEntropy, MSELoss, L1Loss,
// SmoothL1Loss, HuberLoss and BCEWithLogitsLoss; the Accuracy node and
// ClassMetrics (accuracy, top-k, precision, recall, F1, confusion matrix,
// computed from counts summed over batches and ranks); Sum and Mean over
// several axes (PyTorch's torch.sum and torch.mean with dim, in place of
// Gorgonia's, wrong over a middle axis). Each layer declares its parameters and buffers on a
// module.Builder when it is made (PyTorch's names and initialisation) and
// adds its ops to a graph in Forward, given the module.Step being built. The
// ops themselves, with verified gradients, are in nn/ops; nn/gradcheck checks
// gradients.
//
// Layers hold names and sizes only, never values or graph state, so one
// layer value serves every graph a module builds (per replica, per mode).
// Forward panics with an error naming the layer and the shapes when its input
// does not fit; the trainer turns the panic into an error of the step being
// built.
//
// SyncBatchNorm is a BatchNorm built with BatchNormSync (or every
// BatchNorm when trainer.Config.SyncBatchNorm is set): in training graphs
// it reduces its batch statistics and gradient sums through the step's
// module.StatSync, which the strategy provides when it runs more than one
// replica; with none it is a plain BatchNorm.
//
// nn imports module, Gorgonia and tensor; never trainer or strategy.
package nn
