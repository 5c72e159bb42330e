package ops

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BatchNorm replaces Gorgonia v0.9.17's BatchNorm, whose float64 input
// gradient and eval mode (SetTesting) are wrong and whose running statistics
// are unexported, so they cannot be saved, restored or synced (DESIGN.md,
// known defects). Here the statistics are tensors the caller owns (buffers
// of the parameter store), updated in place.

// BatchNormStats are the running statistics of one BatchNorm, each [C]
// except NumBatches (one element, may be nil). Training graphs update them
// in place at every run; eval graphs read them.
type BatchNormStats struct {
	Mean, Var  *tensor.Dense
	NumBatches *tensor.Dense
}

// BatchNormOpts are PyTorch's BatchNorm settings.
type BatchNormOpts struct {
	// Training normalises with the batch's statistics and updates the
	// running ones; otherwise the running statistics are used.
	Training bool
	// Momentum weighs the batch in the running statistics:
	// running = (1-Momentum)·running + Momentum·batch. 0 means 0.1
	// (FixedRunningStats asks for a momentum of 0).
	Momentum float64
	// FixedRunningStats leaves the running statistics as they are in
	// training graphs, which still normalise with the batch's statistics
	// and count the batch in NumBatches: PyTorch's momentum=0.
	FixedRunningStats bool
	// CumulativeAverage makes the running statistics the plain average of
	// every batch seen (PyTorch's momentum=None); it needs NumBatches.
	CumulativeAverage bool
	// NoRunningStats normalises every graph, training or not, with the
	// batch's statistics and keeps no running ones (PyTorch's
	// track_running_stats=False): BatchNormStats must then be empty.
	NoRunningStats bool
	// Eps is added to the variance; 0 means 1e-5.
	Eps float64
	// ReLU applies max(0, ·) to the result in the same pass.
	ReLU bool
	// Sync, when set in training, sums the per-channel statistics over
	// every replica of the job (SyncBatchNorm): the batch is normalised with
	// the global mean and variance, the running statistics get the global
	// ones, and the input gradient uses the global sums of the output
	// gradient, as PyTorch's SyncBatchNorm does. Gamma and beta gradients
	// stay local: the strategy reduces them with every other gradient.
	Sync StatReducer
}

// StatReducer sums float64 buffers element-wise across the replicas of a
// job, in place; every replica calls it with a buffer of the same length, in
// the same order. It is called while the graph runs, so it must not need the
// graph's goroutine for anything else.
type StatReducer interface {
	AllReduceSum(buf []float64) error
}

// GradWeighter is a StatReducer that knows the weight w of this replica's
// loss in the job's objective (its gradients are multiplied by w before
// they are summed across replicas; DP weighs replicas by their share of an
// uneven batch). The backward reduction then sums w·Σdy and divides by this
// replica's w, which makes the input gradient exact for unequal weights;
// for equal weights, and for reducers without it, it is PyTorch's plain sum.
type GradWeighter interface {
	GradWeight() float64
}

// BatchNorm normalises x [N, C, ...] per channel C and applies the affine
// map gamma·x̂ + beta (gamma and beta [C], or both nil for none). In training
// the batch variance is the biased one and the running variance is updated
// with the unbiased one, as PyTorch does.
func BatchNorm(x, gamma, beta *G.Node, stats BatchNormStats, o BatchNormOpts) (*G.Node, error) {
	op, children, err := newBNOp("BatchNorm", x, gamma, beta, stats, o)
	if err != nil {
		return nil, err
	}
	return apply(op, children...)
}

// newBNOp checks one BatchNorm's operands (what names the op in errors) and
// returns its op, not yet applied, and its inputs: x, then gamma and beta
// when given.
func newBNOp(what string, x, gamma, beta *G.Node, stats BatchNormStats, o BatchNormOpts) (*bnOp, []*G.Node, error) {
	if err := checkFloat(what+" input", x); err != nil {
		return nil, nil, err
	}
	xs := x.Shape()
	if len(xs) < 2 {
		return nil, nil, fmt.Errorf("%s input has shape %v: want [batch, channels, ...]", what, xs)
	}
	c := xs[1]
	if (gamma == nil) != (beta == nil) {
		return nil, nil, fmt.Errorf("%s needs both gamma and beta, or neither", what)
	}
	children := []*G.Node{x}
	if gamma != nil {
		for _, p := range []struct {
			what string
			n    *G.Node
		}{{"gamma", gamma}, {"beta", beta}} {
			if err := sameDtype(what+" "+p.what, x, p.n); err != nil {
				return nil, nil, err
			}
			if s := p.n.Shape(); len(s) != 1 || s[0] != c {
				return nil, nil, fmt.Errorf("%s %s has shape %v, want [%d] for input %v", what, p.what, s, c, xs)
			}
		}
		children = append(children, gamma, beta)
	}
	if o.NoRunningStats {
		if stats.Mean != nil || stats.Var != nil || stats.NumBatches != nil {
			return nil, nil, fmt.Errorf("%s has NoRunningStats but is given running statistics: pass an empty BatchNormStats", what)
		}
		if o.FixedRunningStats || o.CumulativeAverage {
			return nil, nil, fmt.Errorf("%s has NoRunningStats and FixedRunningStats or CumulativeAverage, which set how running statistics are kept: keep NoRunningStats alone", what)
		}
		// The batch's statistics in every graph, as training does.
		o.Training = true
	}
	for _, st := range []struct {
		what string
		t    *tensor.Dense
	}{{"running mean", stats.Mean}, {"running var", stats.Var}} {
		if o.NoRunningStats {
			break
		}
		if st.t == nil {
			return nil, nil, fmt.Errorf("%s %s is nil: pass the buffer tensors", what, st.what)
		}
		if st.t.Dtype() != x.Dtype() || st.t.Shape().TotalSize() != c {
			return nil, nil, fmt.Errorf("%s %s is %v %v, want %v with %d elements for input %v", what, st.what, st.t.Dtype(), st.t.Shape(), x.Dtype(), c, xs)
		}
	}
	if nb := stats.NumBatches; nb != nil && (nb.Dtype() != x.Dtype() || nb.Shape().TotalSize() != 1) {
		return nil, nil, fmt.Errorf("%s batch counter is %v %v, want one %v", what, nb.Dtype(), nb.Shape(), x.Dtype())
	}
	if o.CumulativeAverage && stats.NumBatches == nil {
		return nil, nil, fmt.Errorf("%s with CumulativeAverage needs the NumBatches counter", what)
	}
	m := xs.TotalSize() / c
	if o.Training && m < 2 && o.Sync == nil { // under Sync the job's count is checked at run time
		if o.NoRunningStats {
			return nil, nil, fmt.Errorf("%s without running statistics normalises with the batch's in every mode and needs more than one value per channel, input %v has %d: use a larger batch, or keep running statistics", what, xs, m)
		}
		return nil, nil, fmt.Errorf("%s in training needs more than one value per channel, input %v has %d: use a larger batch or eval mode", what, xs, m)
	}
	if o.Momentum == 0 {
		o.Momentum = 0.1
	}
	if o.Eps == 0 {
		o.Eps = 1e-5
	}
	if !(o.Momentum > 0 && o.Momentum <= 1) || !(o.Eps > 0) || math.IsInf(o.Eps, 0) {
		return nil, nil, fmt.Errorf("%s momentum %v and eps %v: want momentum in (0, 1] (FixedRunningStats for 0) and a finite eps > 0", what, o.Momentum, o.Eps)
	}
	if o.FixedRunningStats && o.CumulativeAverage {
		return nil, nil, fmt.Errorf("%s has both FixedRunningStats and CumulativeAverage: choose one", what)
	}
	op := &bnOp{base: newBase("BatchNorm"), BatchNormOpts: o, stats: stats, shape: xs.Clone(), affine: gamma != nil,
		n: xs[0], c: c, inner: m / xs[0]}
	return op, children, nil
}

type bnOp struct {
	base
	BatchNormOpts
	stats          BatchNormStats
	shape          tensor.Shape
	affine         bool
	n, c, inner    int
	out            buffer
	mean, invstd   []float64 // per channel, of the statistics used by the last run
	scale, shift   []float64
	sumDy, sumDyXh []float64 // filled by the backward ops
	ga, gb, gk     []float64 // input-gradient coefficients
	parts          []float64 // per-plane partial sums, combined in plane order
	count          float64   // values per channel behind mean and invstd (all replicas under Sync)
	syncBuf        []float64 // Sync: per-channel statistics or gradient sums, reduced in place
	gSumDy, gSumXh []float64 // Sync: the global Σdy' and Σdy'·x̂ used by the input gradient
}

func (op *bnOp) Arity() int {
	if op.affine {
		return 3
	}
	return 1
}

func (op *bnOp) Type() hm.Type {
	d := len(op.shape)
	if op.affine {
		return fnType(d, d, 1, 1)
	}
	return fnType(d, d)
}

func (op *bnOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }

func (op *bnOp) DiffWRT(int) []bool {
	if op.affine {
		return []bool{true, true, true}
	}
	return []bool{true}
}

func (op *bnOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	x, err := dense(op, "input", v[0], dt, op.shape)
	if err != nil {
		return nil, err
	}
	var gamma, beta *tensor.Dense
	if op.affine {
		if gamma, err = dense(op, "gamma", v[1], dt, tensor.Shape{op.c}); err != nil {
			return nil, err
		}
		if beta, err = dense(op, "beta", v[2], dt, tensor.Shape{op.c}); err != nil {
			return nil, err
		}
	}
	y := op.out.get(dt, op.shape)
	if dt == tensor.Float32 {
		err = bnFwd[float32](op, x, gamma, beta, y)
	} else {
		err = bnFwd[float64](op, x, gamma, beta, y)
	}
	if err != nil {
		return nil, err
	}
	return y, nil
}

func bnFwd[T float](op *bnOp, xt, gt, bt, yt *tensor.Dense) error {
	if err := bnPrepare[T](op, xt, gt, bt); err != nil {
		return err
	}
	x, y := data[T](xt), data[T](yt)
	planes := op.n * op.c
	if w := workers(planes, op.inner); w > 1 {
		parallelLoop(loopBNAffine, w, planes, x, y, nil, loopArgs{bn: op})
	} else {
		bnAffine(op, x, y, 0, planes)
	}
	return nil
}

// bnPrepare sets op.mean and op.invstd from the batch (training: and
// updates the running statistics) or from the running statistics, and
// op.scale and op.shift, the affine map the output is x·scale + shift of.
func bnPrepare[T float](op *bnOp, xt, gt, bt *tensor.Dense) error {
	c, inner := op.c, op.inner
	op.mean = grow(op.mean, c)
	op.invstd = grow(op.invstd, c)
	op.scale = grow(op.scale, c)
	op.shift = grow(op.shift, c)
	x := data[T](xt)
	var rm, rv []T
	if !op.NoRunningStats {
		rm, rv = data[T](op.stats.Mean), data[T](op.stats.Var)
	}
	if op.Training {
		m := float64(op.n * inner)
		// Sums shifted by each channel's first value, in float64: no
		// cancellation when the mean is large against the spread.
		planes := op.n * c
		op.parts = grow(op.parts, 2*planes)
		if w := workers(planes, inner); w > 1 {
			parallelLoop(loopBNStats, w, planes, x, nil, nil, loopArgs{bn: op})
		} else {
			bnStats(op, x, 0, planes)
		}
		sum, sumSq := op.scale, op.shift // scratch until the affine pass
		clear(sum)
		clear(sumSq)
		for p := 0; p < planes; p++ { // in plane order: the same sums for any worker count
			sum[p%c] += op.parts[2*p]
			sumSq[p%c] += op.parts[2*p+1]
		}
		var vars []float64
		if op.Sync != nil {
			var err error
			if m, vars, err = bnSyncStats(op, x, sum, sumSq, m); err != nil {
				return err
			}
		}
		momentum := op.Momentum
		if nb := op.stats.NumBatches; nb != nil {
			cnt := data[T](nb)
			cnt[0]++
			if op.CumulativeAverage {
				momentum = 1 / float64(cnt[0])
			}
		}
		if op.FixedRunningStats {
			momentum = 0
		}
		for ch := 0; ch < c; ch++ {
			var mean, v float64
			if vars != nil {
				mean, v = op.mean[ch], vars[ch]
			} else {
				d := sum[ch] / m
				v = max(sumSq[ch]/m-d*d, 0)
				mean = float64(x[ch*inner]) + d
			}
			op.mean[ch] = mean
			op.invstd[ch] = 1 / math.Sqrt(v+op.Eps)
			if rm == nil {
				continue
			}
			rm[ch] = T((1-momentum)*float64(rm[ch]) + momentum*mean)
			rv[ch] = T((1-momentum)*float64(rv[ch]) + momentum*v*m/(m-1))
		}
		op.count = m
	} else {
		for ch := 0; ch < c; ch++ {
			op.mean[ch] = float64(rm[ch])
			op.invstd[ch] = 1 / math.Sqrt(float64(rv[ch])+op.Eps)
		}
	}
	for ch := 0; ch < c; ch++ {
		g, b := 1.0, 0.0
		if gt != nil {
			g, b = float64(data[T](gt)[ch]), float64(data[T](bt)[ch])
		}
		op.scale[ch] = g * op.invstd[ch]
		op.shift[ch] = b - op.mean[ch]*op.scale[ch]
	}
	return nil
}

// bnSyncStats combines this replica's shifted sums (shift k = each
// channel's first value, m values per channel) with every other replica's
// through op.Sync, in one reduction of [count, n·mean, n·mean², M2] per
// channel (M2: the sum of squared deviations from the local mean). Chan's
// parallel formula then gives the global mean (written to op.mean) and the
// biased global variance, returned with the global count: no sum of squares
// of raw values, so no cancellation when the mean is large.
func bnSyncStats[T float](op *bnOp, x []T, sum, sumSq []float64, m float64) (float64, []float64, error) {
	c, inner := op.c, op.inner
	op.syncBuf = grow(op.syncBuf, 1+3*c)
	b := op.syncBuf
	b[0] = m
	for ch := 0; ch < c; ch++ {
		d := sum[ch] / m
		mean := float64(x[ch*inner]) + d
		b[1+ch] = m * mean
		b[1+c+ch] = m * mean * mean
		b[1+2*c+ch] = max(sumSq[ch]-m*d*d, 0)
	}
	if err := op.Sync.AllReduceSum(b); err != nil {
		return 0, nil, fmt.Errorf("SyncBatchNorm: reduce batch statistics across replicas: %w", err)
	}
	n := b[0]
	if n < 2 {
		return 0, nil, fmt.Errorf("SyncBatchNorm: %v values per channel across all replicas: need more than one", n)
	}
	vars := sumSq // scratch no longer needed: the biased variance per channel
	for ch := 0; ch < c; ch++ {
		mean := b[1+ch] / n
		between := max(b[1+c+ch]-n*mean*mean, 0) // Σ n_i·(mean_i - mean)²
		op.mean[ch] = mean
		vars[ch] = (b[1+2*c+ch] + between) / n
	}
	return n, vars, nil
}

// bnStats writes Σ(x-k) and Σ(x-k)² of planes [lo, hi) into op.parts, with
// k each channel's first value (no cancellation when the mean is large
// against the spread).
func bnStats[T float](op *bnOp, x []T, lo, hi int) {
	c, inner := op.c, op.inner
	for p := lo; p < hi; p++ {
		op.parts[2*p], op.parts[2*p+1] = shiftedSums(x[p*inner:(p+1)*inner], x[(p%c)*inner])
	}
}

// bnAffine writes y = x·scale + shift (then ReLU) for planes [lo, hi).
func bnAffine[T float](op *bnOp, x, y []T, lo, hi int) {
	inner := op.inner
	for p := lo; p < hi; p++ {
		s, b := T(op.scale[p%op.c]), T(op.shift[p%op.c])
		src, dst := x[p*inner:(p+1)*inner], y[p*inner:(p+1)*inner]
		dst = dst[:len(src)]
		if is32[T]() && (useAVX512 || useAVX2) && len(src) > 0 {
			relu := 0
			if op.ReLU {
				relu = 1
			}
			if useAVX512 {
				affine32(f32p(src), f32p(dst), len(src), float32(s), float32(b), relu)
			} else {
				affine32AVX2(f32p(src), f32p(dst), len(src), float32(s), float32(b), relu)
			}
			continue
		}
		if op.ReLU {
			for i, e := range src {
				dst[i] = max(e*s+b, 0)
			}
		} else {
			for i, e := range src {
				dst[i] = e*s + b
			}
		}
	}
}

// SymDiff makes three nodes at most: the gamma gradient (which also sums the
// beta gradient), the beta gradient (a copy of that sum, ordered after it),
// and the input gradient (which reuses both sums). With the fused ReLU the
// masked output gradient is a node of its own first, which sums both
// (bnMaskOp), as BatchNormAddReLU's.
func (op *bnOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	x := inputs[0]
	if op.ReLU {
		grads, _, err := maskedBackward("BatchNormReLUGrad", []*bnOp{op}, inputs, output, grad)
		return grads, err
	}
	if !op.affine {
		dx, err := apply(&bnGradInputOp{base: newBase("BatchNormGradInput"), fwd: op}, x, output, grad)
		return G.Nodes{dx}, err
	}
	dgamma, err := apply(&bnGradGammaOp{base: newBase("BatchNormGradGamma"), fwd: op}, x, output, grad)
	if err != nil {
		return nil, err
	}
	dbeta, err := apply(&bnGradBetaOp{base: newBase("BatchNormGradBeta"), fwd: op}, dgamma)
	if err != nil {
		return nil, err
	}
	dx, err := apply(&bnGradInputOp{base: newBase("BatchNormGradInput"), fwd: op}, x, output, grad, inputs[1], dgamma)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx, dgamma, dbeta}, nil
}

// bnSums fills op.sumDy with Σdy and op.sumDyXh with Σdy·x̂ per channel (a
// BatchNorm without the fused ReLU: with it, bnMaskOp sums the masked dy).
func bnSums[T float](op *bnOp, xt, dyt *tensor.Dense) {
	c, inner := op.c, op.inner
	x, dy := data[T](xt), data[T](dyt)
	planes := op.n * c
	op.parts = grow(op.parts, 2*planes)
	if w := workers(planes, inner); w > 1 {
		parallelLoop(loopBNDotSums, w, planes, dy, x, nil, loopArgs{bn: op})
	} else {
		bnDotSums(op, dy, x, 0, planes)
	}
	op.finishSums()
}

// finishSums sets op.sumDy to Σdy' and op.sumDyXh to Σdy'·x̂ per channel
// from the per-plane Σdy' and Σdy'·x in op.parts, summed in plane order.
func (op *bnOp) finishSums() {
	c := op.c
	op.sumDy = grow(op.sumDy, c)
	op.sumDyXh = grow(op.sumDyXh, c)
	sdx := op.sumDyXh // Σdy'·x first
	clear(op.sumDy)
	clear(sdx)
	for p := 0; p < op.n*c; p++ {
		op.sumDy[p%c] += op.parts[2*p]
		sdx[p%c] += op.parts[2*p+1]
	}
	for ch := 0; ch < c; ch++ {
		// Σdy'·x̂ = invstd·(Σdy'·x - mean·Σdy')
		sdx[ch] = op.invstd[ch] * (sdx[ch] - op.mean[ch]*op.sumDy[ch])
	}
}

// bnDotSums sums planes [lo, hi) of dy and dy·x into op.parts.
func bnDotSums[T float](op *bnOp, dy, x []T, lo, hi int) {
	inner := op.inner
	for p := lo; p < hi; p++ {
		op.parts[2*p], op.parts[2*p+1] = dotSums(dy[p*inner:(p+1)*inner], x[p*inner:(p+1)*inner])
	}
}

func bnInputs(op fmt.Stringer, fwd *bnOp, v []G.Value) (x, y, dy *tensor.Dense, err error) {
	dt := v[0].Dtype()
	if x, err = dense(op, "input", v[0], dt, fwd.shape); err != nil {
		return
	}
	if y, err = dense(op, "output", v[1], dt, fwd.shape); err != nil {
		return
	}
	dy, err = dense(op, "output gradient", v[2], dt, fwd.shape)
	return
}

// bnGradGammaOp is Σdy'·x̂ per channel: (x, y, dy) → [C].
type bnGradGammaOp struct {
	base
	noDiff
	fwd *bnOp
	out buffer
}

func (op *bnGradGammaOp) Arity() int         { return 3 }
func (op *bnGradGammaOp) DiffWRT(int) []bool { return []bool{false, false, false} }
func (op *bnGradGammaOp) Type() hm.Type {
	d := len(op.fwd.shape)
	return fnType(1, d, d, d)
}
func (op *bnGradGammaOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.fwd.c}, nil
}

func (op *bnGradGammaOp) Do(v ...G.Value) (G.Value, error) {
	x, _, dy, err := bnInputs(op, op.fwd, v)
	if err != nil {
		return nil, err
	}
	o := op.out.get(x.Dtype(), tensor.Shape{op.fwd.c})
	if x.Dtype() == tensor.Float32 {
		bnSums[float32](op.fwd, x, dy)
		copyFrom64(data[float32](o), op.fwd.sumDyXh)
	} else {
		bnSums[float64](op.fwd, x, dy)
		copyFrom64(data[float64](o), op.fwd.sumDyXh)
	}
	return o, nil
}

func copyFrom64[T float](dst []T, src []float64) {
	for i, v := range src {
		dst[i] = T(v)
	}
}

// bnGradBetaOp is Σdy' per channel, summed by the gamma gradient op whose
// output it takes (for ordering): (dgamma) → [C]. With gamma set it is
// Σdy'·x̂ instead, summed by the op whose output of inDims dimensions it
// takes (BatchNormAddReLU's masked gradient).
type bnGradBetaOp struct {
	base
	noDiff
	fwd    *bnOp
	out    buffer
	gamma  bool
	inDims int // 0: 1
}

func (op *bnGradBetaOp) Arity() int         { return 1 }
func (op *bnGradBetaOp) DiffWRT(int) []bool { return []bool{false} }
func (op *bnGradBetaOp) Type() hm.Type      { return fnType(1, max(op.inDims, 1)) }
func (op *bnGradBetaOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.fwd.c}, nil
}

func (op *bnGradBetaOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	o := op.out.get(dt, tensor.Shape{op.fwd.c})
	sums := op.fwd.sumDy
	if op.gamma {
		sums = op.fwd.sumDyXh
	}
	if dt == tensor.Float32 {
		copyFrom64(data[float32](o), sums)
	} else {
		copyFrom64(data[float64](o), sums)
	}
	return o, nil
}

// bnGradInputOp is the input gradient: (x, y, dy[, gamma, dgamma]) → like x.
// Without gamma it sums Σdy and Σdy·x̂ itself, unless masked.
type bnGradInputOp struct {
	base
	noDiff
	fwd *bnOp
	out buffer
	// masked: dy is dy' (bnMaskOp's output, masked by the ReLU after the
	// BatchNorm), which has summed Σdy' and Σdy'·x̂ already.
	masked bool
}

func (op *bnGradInputOp) Arity() int {
	if op.fwd.affine {
		return 5
	}
	return 3
}
func (op *bnGradInputOp) DiffWRT(int) []bool { return make([]bool, op.Arity()) }
func (op *bnGradInputOp) Type() hm.Type {
	d := len(op.fwd.shape)
	if op.fwd.affine {
		return fnType(d, d, d, d, 1, 1)
	}
	return fnType(d, d, d, d)
}
func (op *bnGradInputOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.fwd.shape.Clone(), nil
}

func (op *bnGradInputOp) Do(v ...G.Value) (G.Value, error) {
	x, _, dy, err := bnInputs(op, op.fwd, v)
	if err != nil {
		return nil, err
	}
	dt := x.Dtype()
	var gamma *tensor.Dense
	if op.fwd.affine {
		if gamma, err = dense(op, "gamma", v[3], dt, tensor.Shape{op.fwd.c}); err != nil {
			return nil, err
		}
	}
	dx := op.out.get(dt, op.fwd.shape)
	sums := op.fwd.Training && gamma == nil && !op.masked
	if dt == tensor.Float32 {
		err = bnGradInput[float32](op.fwd, x, dy, gamma, dx, sums)
	} else {
		err = bnGradInput[float64](op.fwd, x, dy, gamma, dx, sums)
	}
	if err != nil {
		return nil, err
	}
	return dx, nil
}

// bnGradInput writes the input gradient for output gradient dy (already
// masked where the BatchNorm has a ReLU); with sums it first sums Σdy and
// Σdy·x̂, which otherwise the gamma gradient or mask op has.
func bnGradInput[T float](op *bnOp, xt, dyt, gt, dxt *tensor.Dense, sums bool) error {
	c, inner := op.c, op.inner
	x, dy, dx := data[T](xt), data[T](dyt), data[T](dxt)
	if sums {
		bnSums[T](op, xt, dyt)
	}
	m := float64(op.n * inner)
	sumDy, sumDyXh := op.sumDy, op.sumDyXh
	if op.Training && op.Sync != nil {
		// The global sums, in their own slices: the beta gradient op may
		// still read the local Σdy' after this one.
		w := 1.0
		if gw, ok := op.Sync.(GradWeighter); ok && gw.GradWeight() > 0 {
			w = gw.GradWeight()
		}
		op.syncBuf = grow(op.syncBuf, 2*c)
		b := op.syncBuf
		for ch := 0; ch < c; ch++ {
			b[ch], b[c+ch] = w*op.sumDy[ch], w*op.sumDyXh[ch]
		}
		if err := op.Sync.AllReduceSum(b); err != nil {
			return fmt.Errorf("SyncBatchNorm: reduce gradient sums across replicas: %w", err)
		}
		op.gSumDy, op.gSumXh = grow(op.gSumDy, c), grow(op.gSumXh, c)
		for ch := 0; ch < c; ch++ {
			op.gSumDy[ch], op.gSumXh[ch] = b[ch]/w, b[c+ch]/w
		}
		sumDy, sumDyXh, m = op.gSumDy, op.gSumXh, op.count
	}
	// dx = a·dy' + b·x + k per channel. In training
	//   dx = γ·invstd/M·(M·dy' - Σdy' - x̂·Σdy'x̂), x̂ = (x-mean)·invstd;
	// in eval the statistics are constants and dx = γ·invstd·dy'.
	op.ga, op.gb, op.gk = grow(op.ga, c), grow(op.gb, c), grow(op.gk, c)
	for ch := 0; ch < c; ch++ {
		g := 1.0
		if gt != nil {
			g = float64(data[T](gt)[ch])
		}
		a := g * op.invstd[ch]
		var b, k float64
		if op.Training {
			b = -a * sumDyXh[ch] * op.invstd[ch] / m
			k = -a*sumDy[ch]/m - b*op.mean[ch]
		}
		op.ga[ch], op.gb[ch], op.gk[ch] = a, b, k
	}
	planes := op.n * c
	if w := workers(planes, inner); w > 1 {
		parallelLoop(loopBNInputGrad, w, planes, dy, x, dx, loopArgs{bn: op})
	} else {
		bnInputGrad(op, dy, x, dx, 0, planes)
	}
	return nil
}

// bnInputGrad writes dx = a·dy' + b·x + k for planes [lo, hi).
func bnInputGrad[T float](op *bnOp, dy, x, dx []T, lo, hi int) {
	inner := op.inner
	for p := lo; p < hi; p++ {
		ch := p % op.c
		a, b, k := T(op.ga[ch]), T(op.gb[ch]), T(op.gk[ch])
		xx, out := x[p*inner:(p+1)*inner], dx[p*inner:(p+1)*inner]
		d := dy[p*inner : (p+1)*inner]
		xx, out = xx[:len(d)], out[:len(d)]
		if is32[T]() && (useAVX512 || useAVX2) && len(d) > 0 {
			if useAVX512 {
				lincomb32(f32p(d), f32p(xx), f32p(out), len(d), float32(a), float32(b), float32(k))
			} else {
				lincomb32AVX2(f32p(d), f32p(xx), f32p(out), len(d), float32(a), float32(b), float32(k))
			}
			continue
		}
		for i, v := range d {
			out[i] = a*v + b*xx[i] + k
		}
	}
}

// UsePreallocDo is Do writing into p when p fits (see buffer.prealloc).
func (op *bnGradGammaOp) UsePreallocDo(p G.Value, v ...G.Value) (G.Value, error) {
	op.out.prealloc(p)
	defer op.out.release()
	return op.Do(v...)
}

// UsePreallocDo is Do writing into p when p fits (see buffer.prealloc).
func (op *bnGradBetaOp) UsePreallocDo(p G.Value, v ...G.Value) (G.Value, error) {
	op.out.prealloc(p)
	defer op.out.release()
	return op.Do(v...)
}
