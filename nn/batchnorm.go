package nn

import (
	"fmt"
	"math"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
)

// BatchNorm is PyTorch's BatchNorm1d or BatchNorm2d: learnable "weight"
// (γ, ones) and "bias" (β, zeros) of [C], and the buffers "running_mean"
// (zeros), "running_var" (ones) and "num_batches_tracked" ([1], zeros). The
// buffers live in the parameter store, so checkpoints, broadcast and sync
// carry them. Training graphs normalise with batch statistics and update the
// buffers in place at every run; other graphs use the buffers. Built with
// BatchNormNoRunningStats, it has no buffers and every graph uses the
// batch's statistics.
type BatchNorm struct {
	Name     string
	Channels int
	Dims     int // 1 or 2
	Weight   string
	Bias     string // "" when not affine (both are)
	Mean     string // "" without running statistics (Var and Count too)
	Var      string
	Count    string
	// Sync makes training graphs normalise with the statistics of the
	// whole job's batch (SyncBatchNorm) when the strategy runs more than
	// one replica; Trainer's SyncBatchNorm turns it on for every layer.
	Sync   bool
	opts   ops.BatchNormOpts
	epsSet bool // BatchNormEps was given: 0 is then the user's value, not the default
}

// BatchNormOption changes a BatchNorm's defaults (momentum 0.1, eps 1e-5,
// affine).
type BatchNormOption func(*BatchNorm)

// BatchNormMomentum sets the momentum of the running statistics, in
// [0, 1]: running = (1-m)·running + m·batch. 0 keeps them as they are
// (PyTorch's momentum=0), while training graphs still normalise with the
// batch's statistics.
func BatchNormMomentum(m float64) BatchNormOption {
	return func(l *BatchNorm) {
		l.opts.Momentum = m
		l.opts.FixedRunningStats = m == 0
	}
}

// BatchNormCumulative makes the running statistics a plain average of every
// batch (PyTorch's momentum=None).
func BatchNormCumulative() BatchNormOption {
	return func(l *BatchNorm) { l.opts.CumulativeAverage = true }
}

// BatchNormSync makes the layer a SyncBatchNorm: in training, its batch
// mean and variance (and their gradients) are reduced across every replica
// of the job, as PyTorch's SyncBatchNorm does, so N replicas with batch b
// normalise like one device with batch N·b. With one replica it is a plain
// BatchNorm. trainer.Config.SyncBatchNorm does this for every BatchNorm.
func BatchNormSync() BatchNormOption { return func(l *BatchNorm) { l.Sync = true } }

// BatchNormEps sets the value added to the variance (> 0).
func BatchNormEps(eps float64) BatchNormOption {
	return func(l *BatchNorm) { l.opts.Eps, l.epsSet = eps, true }
}

// BatchNormNoRunningStats is PyTorch's track_running_stats=False: the layer
// keeps no running statistics (no running_mean, running_var or
// num_batches_tracked in the parameter store, state dict or checkpoint)
// and normalises with the batch's mean and biased variance in every graph,
// eval included, gradients flowing through them as in training. It
// cannot be combined with BatchNormMomentum(0) or BatchNormCumulative,
// which set how running statistics are kept.
func BatchNormNoRunningStats() BatchNormOption {
	return func(l *BatchNorm) { l.opts.NoRunningStats = true }
}

// BatchNormNoAffine leaves out γ and β.
func BatchNormNoAffine() BatchNormOption { return func(l *BatchNorm) { l.Weight = "" } }

// NewBatchNorm2d normalises [batch, channels, H, W] inputs per channel.
func NewBatchNorm2d(b *module.Builder, name string, channels int, opts ...BatchNormOption) *BatchNorm {
	return newBatchNorm(b, name, channels, 2, opts)
}

// NewBatchNorm1d normalises [batch, channels] or [batch, channels, length]
// inputs per channel.
func NewBatchNorm1d(b *module.Builder, name string, channels int, opts ...BatchNormOption) *BatchNorm {
	return newBatchNorm(b, name, channels, 1, opts)
}

func newBatchNorm(b *module.Builder, name string, c, dims int, opts []BatchNormOption) *BatchNorm {
	sb := b.Scope(name)
	l := &BatchNorm{Name: b.Name(name), Channels: c, Dims: dims, Weight: "weight"}
	for _, o := range opts {
		o(l)
	}
	typ := fmt.Sprintf("BatchNorm%dd", dims)
	if c < 1 {
		b.Errorf("nn.%s %q has %d channels: want 1 or more", typ, l.Name, c)
		return l
	}
	var bad []string
	if m := l.opts.Momentum; !(m >= 0 && m <= 1) {
		bad = append(bad, fmt.Sprintf("momentum is %v: want a value in [0, 1] (PyTorch's default 0.1; 0 keeps the running statistics fixed)", m))
	}
	if e := l.opts.Eps; !(e >= 0) || math.IsInf(e, 0) || (l.epsSet && e == 0) {
		bad = append(bad, fmt.Sprintf("eps is %v: want a finite value > 0 (PyTorch's default 1e-5)", e))
	}
	if l.opts.FixedRunningStats && l.opts.CumulativeAverage {
		bad = append(bad, "BatchNormMomentum(0) and BatchNormCumulative are both given: keep one (fixed running statistics, or their average over every batch)")
	}
	if l.opts.NoRunningStats && (l.opts.FixedRunningStats || l.opts.CumulativeAverage) {
		bad = append(bad, "BatchNormNoRunningStats is given with BatchNormMomentum(0) or BatchNormCumulative, which set how running statistics are kept: drop those, or keep running statistics")
	}
	if len(bad) > 0 {
		b.Errorf("nn.%s %q: %s", typ, l.Name, strings.Join(bad, "; "))
		return l
	}
	n := 0
	if l.Weight != "" {
		l.Weight = sb.Param("weight", []int{c}, module.Ones())
		l.Bias = sb.Param("bias", []int{c}, module.Zeros())
		n = 2 * c
	}
	if !l.opts.NoRunningStats {
		l.Mean = sb.Buffer("running_mean", []int{c}, module.Zeros())
		l.Var = sb.Buffer("running_var", []int{c}, module.Ones())
		l.Count = sb.Buffer("num_batches_tracked", []int{1}, module.Zeros())
	}
	sb.Layer(typ, n)
	return l
}

func (l *BatchNorm) typ() string { return fmt.Sprintf("BatchNorm%dd", l.Dims) }

// Forward adds the normalisation to s's graph.
func (l *BatchNorm) Forward(s *module.Step, x *G.Node) *G.Node { return l.forward(s, x, false) }

// ForwardReLU is Forward followed by ReLU, fused into one op.
func (l *BatchNorm) ForwardReLU(s *module.Step, x *G.Node) *G.Node { return l.forward(s, x, true) }

func (l *BatchNorm) forward(s *module.Step, x *G.Node, relu bool) *G.Node {
	a := l.args(s, x)
	a.Opts.ReLU = relu
	return layerIO(s, l.Name, x, must(l.typ(), l.Name)(ops.BatchNorm(a.X, a.Gamma, a.Beta, a.Stats, a.Opts)))
}

// args checks x and returns the layer's operands on s for x.
func (l *BatchNorm) args(s *module.Step, x *G.Node) ops.BatchNormArgs {
	if l.Dims == 2 {
		if x != nil {
			checkChannels(l.typ(), l.Name, x.Shape(), l.Channels, "make the layer with %[1]d channels")
		}
		checkInput(l.typ(), l.Name, x, fmt.Sprintf("[batch, %d, height, width]", l.Channels), -1, l.Channels, -1, -1)
	} else if x == nil || (x.Dims() != 2 && x.Dims() != 3) || x.Shape()[1] != l.Channels {
		if x != nil && (x.Dims() == 2 || x.Dims() == 3) {
			panic(layerError(l.typ(), l.Name, "input has shape %v, want [batch, %d] or [batch, %d, length]: the layer was made for %d channels but the input has %d: make it with %d, or fix the layer that feeds it", x.Shape(), l.Channels, l.Channels, l.Channels, x.Shape()[1], x.Shape()[1]))
		}
		if x != nil && x.Dims() == 4 && x.Shape()[1] == l.Channels {
			panic(layerError(l.typ(), l.Name, "input has shape %v, want [batch, %d] or [batch, %d, length]: for images use nn.NewBatchNorm2d", x.Shape(), l.Channels, l.Channels))
		}
		checkInput(l.typ(), l.Name, x, fmt.Sprintf("[batch, %d] or [batch, %d, length]", l.Channels, l.Channels), -1, l.Channels)
	}
	var gamma, beta *G.Node
	if l.Weight != "" {
		gamma, beta = s.Param(l.Weight), s.Param(l.Bias)
	}
	o := l.opts
	o.Training = s.Training()
	if ss := s.StatSync(); ss != nil && o.Training && (l.Sync || ss.All()) {
		o.Sync = ss
	}
	var stats ops.BatchNormStats
	if !o.NoRunningStats {
		stats = ops.BatchNormStats{Mean: s.BufferTensor(l.Mean), Var: s.BufferTensor(l.Var), NumBatches: s.BufferTensor(l.Count)}
	}
	return ops.BatchNormArgs{X: x, Gamma: gamma, Beta: beta, Stats: stats, Opts: o}
}
