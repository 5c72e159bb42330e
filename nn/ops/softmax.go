package ops

import (
	"errors"
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func checkLogitsLabels(what string, logits, labels, weights *G.Node) error {
	if err := checkFloat(what+" logits", logits); err != nil {
		return err
	}
	if logits != nil && labels != nil && !isFloat(labels) && isFloat(logits) {
		return fmt.Errorf("%s labels have dtype %v: labels are class indices stored as the logits' dtype, %v (the batch's fields already are): convert them", what, labels.Dtype(), logits.Dtype())
	}
	if err := checkFloat(what+" labels", labels); err != nil {
		return err
	}
	if err := sameDtype(what+" labels", logits, labels); err != nil {
		return err
	}
	ls := logits.Shape()
	if len(ls) != 2 {
		return fmt.Errorf("%s logits have shape %v: want [batch, classes]", what, ls)
	}
	if s := labels.Shape(); len(s) != 1 || s[0] != ls[0] {
		msg := fmt.Sprintf("%s labels have shape %v, want [%d] (one class index per row of logits %v)", what, s, ls[0], ls)
		switch {
		case len(s) == 2 && s[0] == ls[0] && s[1] == 1:
			// A label field declared with Shape [1] gives this column;
			// Shape [] (a scalar per example) gives [batch] with no
			// reshape in the step.
			msg += fmt.Sprintf(": declare the label field of the dataset with Shape [] (one scalar per example, as data.Field{Name: \"y\"}), whose batch is [%d], or reshape the labels to [%d] (G.Reshape)", ls[0], ls[0])
		case len(s) == 2 && s[0] == ls[0] && s[1] == ls[1]:
			msg += ": labels are class indices, not one-hot rows or probabilities: give each row's class number (its argmax)"
		}
		return errors.New(msg)
	}
	if weights != nil {
		if err := sameDtype(what+" weights", logits, weights); err != nil {
			return err
		}
		if s := weights.Shape(); len(s) != 1 || s[0] != ls[0] {
			return fmt.Errorf("%s weights have shape %v, want [%d] (one weight per row of logits %v)", what, s, ls[0], ls)
		}
	}
	return nil
}

// logitsInputs checks and returns the inputs of an op taking (logits
// [batch, classes], labels [batch], and with weighted, weights [batch]), all
// of the logits' dtype; w is nil without weights.
func logitsInputs(op fmt.Stringer, v []G.Value, batch, classes int, weighted bool) (z, l, w *tensor.Dense, err error) {
	dt := v[0].Dtype()
	if z, err = dense(op, "logits", v[0], dt, tensor.Shape{batch, classes}); err != nil {
		return nil, nil, nil, err
	}
	if l, err = dense(op, "labels", v[1], dt, tensor.Shape{batch}); err != nil {
		return nil, nil, nil, err
	}
	if weighted {
		if w, err = dense(op, "weights", v[2], dt, tensor.Shape{batch}); err != nil {
			return nil, nil, nil, err
		}
	}
	return z, l, w, nil
}

// classIndex turns a label stored as a float into a class index, or says why
// it is not one.
func classIndex(op fmt.Stringer, row int, l float64, classes int) (int, error) {
	if l != math.Trunc(l) || l < 0 || l >= float64(classes) {
		var fix string
		switch {
		case l != math.Trunc(l) || math.IsInf(l, 0): // NaN too
			fix = "labels are class numbers 0, 1, ... stored as floats, not probabilities or scores"
		case l < 0:
			fix = "to leave a row out (PyTorch's ignore_index), give it weight 0 with nn.CrossEntropyWeighted, whose rows of weight 0 may hold any label"
		default:
			fix = fmt.Sprintf("the logits have %d classes: give the model's last layer %d outputs or more, or fix the labels", classes, int64(l)+1)
		}
		return 0, fmt.Errorf("%v: label %v at row %d is not a class index in [0, %d): %s", op, l, row, classes, fix)
	}
	return int(l), nil
}

// rowLabel is classIndex for row i, but a row of weight 0 (rowW from
// rowWeights) counts for nothing whatever its label holds, as a row whose
// label is PyTorch's ignore_index: it gets class 0 and is not checked.
func rowLabel(op fmt.Stringer, i int, l float64, classes int, rowW []float64, weighted bool) (int, error) {
	if weighted && rowW[i] == 0 {
		return 0, nil
	}
	return classIndex(op, i, l, classes)
}

// rowWeights fills w with each row's share of the mean: 1/batch without
// weights, w_i/Σw with them (0 everywhere when Σw is 0: an all-masked batch
// contributes nothing instead of NaN).
func rowWeights[T float](op fmt.Stringer, weights *tensor.Dense, w []float64) error {
	if weights == nil {
		for i := range w {
			w[i] = 1 / float64(len(w))
		}
		return nil
	}
	var sum float64
	for i, v := range data[T](weights) {
		if v < 0 || math.IsNaN(float64(v)) {
			return fmt.Errorf("%v: row weight %v at row %d is negative or NaN: weights must be ≥ 0", op, v, i)
		}
		w[i] = float64(v)
		sum += float64(v)
	}
	for i := range w {
		if sum > 0 {
			w[i] /= sum
		} else {
			w[i] = 0
		}
	}
	return nil
}

// SoftmaxCrossEntropy is the mean over the batch of -log softmax(logits)[label],
// computed stably (log-sum-exp with the row maximum subtracted) in one op.
// logits is [batch, classes]; labels is [batch] holding class indices as
// floats; weights, if not nil, is [batch] of row weights ≥ 0 and the result
// is Σ wᵢ·lossᵢ / Σ wᵢ (a 0/1 mask gives the mean over the kept rows; padded
// rows of a last partial batch weigh 0). A row of weight 0 is left out
// whatever its label and logits hold, as a row whose label is PyTorch's
// ignore_index. Labels get no gradient.
func SoftmaxCrossEntropy(logits, labels, weights *G.Node) (*G.Node, error) {
	return SoftmaxCrossEntropyWith(logits, labels, weights, CrossEntropyOpts{})
}

// CrossEntropyOpts are SoftmaxCrossEntropyWith's options beyond the row
// weights; the zero value is SoftmaxCrossEntropy.
type CrossEntropyOpts struct {
	// LabelSmoothing is PyTorch's label_smoothing ε in [0, 1]: the target
	// is (1-ε)·onehot(label) + ε/classes.
	LabelSmoothing float64
	// ClassWeights is PyTorch's weight: one weight ≥ 0 per class, nil for
	// all 1.
	ClassWeights []float64
}

// SoftmaxCrossEntropyWith is SoftmaxCrossEntropy with PyTorch 1.13's
// label_smoothing and class weight, computed as torch.nn.functional.
// cross_entropy does: with class weights w, row weights r (1 without
// weights; 0 is ignore_index) and ε,
//
//	Σᵢ rᵢ·[(1-ε)·w_yᵢ·nllᵢ + ε/C·Σ_c w_c·(-log pᵢ_c)] / Σᵢ rᵢ·w_yᵢ
//
// so the smoothing term of a row whose class weighs 0 still counts, while
// the row is left out of the divisor, as in torch. A batch whose kept rows
// all have classes of weight 0 is an error (torch divides by 0).
func SoftmaxCrossEntropyWith(logits, labels, weights *G.Node, o CrossEntropyOpts) (*G.Node, error) {
	const what = "CrossEntropy" // torch's name, and nn's: the name users call
	if err := checkLogitsLabels(what, logits, labels, weights); err != nil {
		return nil, err
	}
	s := logits.Shape()
	if e := o.LabelSmoothing; !(e >= 0 && e <= 1) {
		return nil, fmt.Errorf("%s: label smoothing is %v: want a value in [0, 1] (PyTorch's label_smoothing; 0 is none, 0.1 is common)", what, e)
	}
	if o.ClassWeights != nil {
		if len(o.ClassWeights) != s[1] {
			return nil, fmt.Errorf("%s: %d class weights for logits %v of %d classes: give one weight per class", what, len(o.ClassWeights), s, s[1])
		}
		for c, w := range o.ClassWeights {
			if !(w >= 0) || math.IsInf(w, 0) {
				return nil, fmt.Errorf("%s: class weight %v of class %d: want a finite weight ≥ 0", what, w, c)
			}
		}
	}
	op := &softmaxCEOp{base: newBase(what), batch: s[0], classes: s[1], weighted: weights != nil,
		eps: o.LabelSmoothing, classW: append([]float64(nil), o.ClassWeights...)}
	if len(op.classW) == 0 {
		op.classW = nil
	}
	ch := []*G.Node{logits, labels}
	if weights != nil {
		ch = append(ch, weights)
	}
	return apply(op, ch...)
}

type softmaxCEOp struct {
	base
	batch, classes int
	weighted       bool
	eps            float64   // label smoothing
	classW         []float64 // class weights, nil for all 1
	out            scalarBuffer
	// Cache for the backward op, filled by each forward run.
	prob64 []float64 // softmax probabilities, batch×classes
	rowW   []float64 // each row's weight in the mean
	label  []int32
}

// smoothed reports whether the op has label smoothing or class weights.
func (op *softmaxCEOp) smoothed() bool { return op.eps != 0 || op.classW != nil }

// classWeight is w_c (1 without class weights).
func (op *softmaxCEOp) classWeight(c int) float64 {
	if op.classW == nil {
		return 1
	}
	return op.classW[c]
}

func (op *softmaxCEOp) Arity() int {
	if op.weighted {
		return 3
	}
	return 2
}

func (op *softmaxCEOp) Type() hm.Type {
	if op.weighted {
		return fnType(0, 2, 1, 1)
	}
	return fnType(0, 2, 1)
}

func (op *softmaxCEOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}

func (op *softmaxCEOp) DiffWRT(int) []bool {
	if op.weighted {
		return []bool{true, false, false}
	}
	return []bool{true, false}
}

func (op *softmaxCEOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	z, l, w, err := logitsInputs(op, v, op.batch, op.classes, op.weighted)
	if err != nil {
		return nil, err
	}
	var loss float64
	if dt == tensor.Float32 {
		loss, err = softmaxCE[float32](op, z, l, w)
	} else {
		loss, err = softmaxCE[float64](op, z, l, w)
	}
	if err != nil {
		return nil, err
	}
	return op.out.set(dt, loss), nil
}

func softmaxCE[T float](op *softmaxCEOp, zt, lt, wt *tensor.Dense) (float64, error) {
	b, c := op.batch, op.classes
	op.prob64 = grow(op.prob64, b*c)
	op.rowW = grow(op.rowW, b)
	op.label = grow(op.label, b)
	if err := rowWeights[T](op, wt, op.rowW); err != nil {
		return 0, err
	}
	z, labels := data[T](zt), data[T](lt)
	for i := 0; i < b; i++ {
		k, err := rowLabel(op, i, float64(labels[i]), c, op.rowW, op.weighted)
		if err != nil {
			return 0, err
		}
		op.label[i] = int32(k)
	}
	if op.classW != nil {
		// torch divides by Σ rᵢ·w_yᵢ: rowW holds rᵢ/Σr, so divide by
		// Σ (rᵢ/Σr)·w_yᵢ.
		var div float64
		kept := false
		for i, r := range op.rowW {
			if r != 0 {
				div += r * op.classW[op.label[i]]
				kept = true
			}
		}
		if kept && div == 0 {
			return 0, fmt.Errorf("%v: every kept row's class has class weight 0: the weighted mean divides by 0 (PyTorch's is inf or NaN): give those classes a weight > 0 or leave the rows out", op)
		}
		for i := range op.rowW {
			if op.rowW[i] != 0 {
				op.rowW[i] /= div
			}
		}
	}
	var loss float64
	for i := 0; i < b; i++ {
		k := int(op.label[i])
		row, p := z[i*c:(i+1)*c], op.prob64[i*c:(i+1)*c]
		if op.weighted && op.rowW[i] == 0 { // left out, as PyTorch's ignore_index: not even NaN logits count
			clear(p)
			continue
		}
		m := float64(row[0])
		for _, x := range row[1:] {
			m = max(m, float64(x))
		}
		var sum float64
		for j, x := range row {
			e := math.Exp(float64(x) - m)
			p[j] = e
			sum += e
		}
		for j := range p {
			p[j] /= sum
		}
		// -log p[k] = lse - z[k], with lse = m + log(sum).
		lse := m + math.Log(sum)
		if !op.smoothed() {
			loss += op.rowW[i] * (lse - float64(row[k]))
			continue
		}
		// (1-ε)·w_k·(lse - z_k) + ε/C·Σ_c w_c·(lse - z_c)
		var smooth float64
		for j, x := range row {
			smooth += op.classWeight(j) * (lse - float64(x))
		}
		loss += op.rowW[i] * ((1-op.eps)*op.classWeight(k)*(lse-float64(row[k])) + op.eps/float64(c)*smooth)
	}
	return loss, nil
}

func (op *softmaxCEOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := apply(&softmaxCEGradOp{base: newBase("CrossEntropyGrad"), fwd: op}, output, grad)
	if err != nil {
		return nil, err
	}
	res := make(G.Nodes, len(inputs))
	res[0] = d
	return res, nil
}

// softmaxCEGradOp is g·wᵢ·(softmax(z)ᵢ - onehot(labelᵢ)) from the forward
// op's cache; (loss, g) → [batch, classes]. Taking the loss node as input
// orders it after the forward run that filled the cache.
type softmaxCEGradOp struct {
	base
	noDiff
	fwd *softmaxCEOp
	out buffer
}

func (op *softmaxCEGradOp) Arity() int { return 2 }
func (op *softmaxCEGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a, &G.TensorType{Dims: 2, Of: a})
}
func (op *softmaxCEGradOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *softmaxCEGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.fwd.batch, op.fwd.classes}, nil
}

func (op *softmaxCEGradOp) Do(v ...G.Value) (G.Value, error) {
	g, err := scalarOf(v[1])
	if err != nil {
		return nil, fmt.Errorf("%v: loss gradient: %w", op, err)
	}
	f := op.fwd
	dt := v[0].Dtype()
	d := op.out.get(dt, tensor.Shape{f.batch, f.classes})
	if dt == tensor.Float32 {
		softmaxCEGrad(f, g, data[float32](d))
	} else {
		softmaxCEGrad(f, g, data[float64](d))
	}
	return d, nil
}

func softmaxCEGrad[T float](f *softmaxCEOp, g float64, d []T) {
	c := f.classes
	if f.smoothed() {
		softmaxCESmoothedGrad(f, g, d)
		return
	}
	for i := 0; i < f.batch; i++ {
		s := g * f.rowW[i]
		p, row := f.prob64[i*c:(i+1)*c], d[i*c:(i+1)*c]
		for j, pj := range p {
			row[j] = T(s * pj)
		}
		row[f.label[i]] = T(s * (p[f.label[i]] - 1))
	}
}

// softmaxCESmoothedGrad is the gradient of a row's
// (1-ε)·w_k·(lse - z_k) + ε/C·Σ_c w_c·(lse - z_c):
// ((1-ε)·w_k + ε/C·W)·p_j - (1-ε)·w_k·[j = k] - ε/C·w_j, with W = Σ_c w_c.
func softmaxCESmoothedGrad[T float](f *softmaxCEOp, g float64, d []T) {
	c := f.classes
	e := f.eps / float64(c)
	var total float64
	for j := 0; j < c; j++ {
		total += f.classWeight(j)
	}
	for i := 0; i < f.batch; i++ {
		s := g * f.rowW[i]
		p, row := f.prob64[i*c:(i+1)*c], d[i*c:(i+1)*c]
		k := int(f.label[i])
		hard := (1 - f.eps) * f.classWeight(k)
		coef := hard + e*total
		for j, pj := range p {
			row[j] = T(s * (coef*pj - e*f.classWeight(j)))
		}
		row[k] = T(s * (coef*p[k] - e*f.classWeight(k) - hard))
	}
}

// LogSoftmax is x - logsumexp(x) along the last axis, computed stably.
// (Gorgonia v0.9.17 has no public log-softmax.)
func LogSoftmax(x *G.Node) (*G.Node, error) {
	if err := checkFloat("LogSoftmax input", x); err != nil {
		return nil, err
	}
	if x.Dims() < 1 {
		return nil, fmt.Errorf("LogSoftmax input is a scalar: want at least one axis")
	}
	return apply(&logSoftmaxOp{base: newBase("LogSoftmax"), dims: x.Dims()}, x)
}

type logSoftmaxOp struct {
	base
	dims int
	out  buffer
}

func (op *logSoftmaxOp) Arity() int         { return 1 }
func (op *logSoftmaxOp) Type() hm.Type      { return fnType(op.dims, op.dims) }
func (op *logSoftmaxOp) DiffWRT(int) []bool { return []bool{true} }
func (op *logSoftmaxOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return shapeOf(in[0]).Clone(), nil
}

func (op *logSoftmaxOp) Do(v ...G.Value) (G.Value, error) {
	x, err := dense(op, "input", v[0], v[0].Dtype(), nil)
	if err != nil {
		return nil, err
	}
	s := x.Shape()
	c := s[len(s)-1]
	y := op.out.get(x.Dtype(), s)
	if x.Dtype() == tensor.Float32 {
		logSoftmax(data[float32](x), data[float32](y), c)
	} else {
		logSoftmax(data[float64](x), data[float64](y), c)
	}
	return y, nil
}

func logSoftmax[T float](x, y []T, c int) {
	for off := 0; off+c <= len(x); off += c {
		row, out := x[off:off+c], y[off:off+c]
		m := float64(row[0])
		for _, v := range row[1:] {
			m = max(m, float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(sum)
		for j, v := range row {
			out[j] = T(float64(v) - lse)
		}
	}
}

func (op *logSoftmaxOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := apply(&logSoftmaxGradOp{base: newBase("LogSoftmaxGrad")}, output, grad)
	return G.Nodes{d}, err
}

// logSoftmaxGradOp is dy - exp(y)·Σdy per row: (y, dy) → dx.
type logSoftmaxGradOp struct {
	base
	noDiff
	out buffer
}

func (op *logSoftmaxGradOp) Arity() int { return 2 }
func (op *logSoftmaxGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a, a)
}
func (op *logSoftmaxGradOp) DiffWRT(int) []bool { return []bool{false, false} }
func (op *logSoftmaxGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return shapeOf(in[0]).Clone(), nil
}

func (op *logSoftmaxGradOp) Do(v ...G.Value) (G.Value, error) {
	y, err := dense(op, "output", v[0], v[0].Dtype(), nil)
	if err != nil {
		return nil, err
	}
	dy, err := dense(op, "output gradient", v[1], y.Dtype(), y.Shape())
	if err != nil {
		return nil, err
	}
	s := y.Shape()
	c := s[len(s)-1]
	dx := op.out.get(y.Dtype(), s)
	if y.Dtype() == tensor.Float32 {
		logSoftmaxGrad(data[float32](y), data[float32](dy), data[float32](dx), c)
	} else {
		logSoftmaxGrad(data[float64](y), data[float64](dy), data[float64](dx), c)
	}
	return dx, nil
}

func logSoftmaxGrad[T float](y, dy, dx []T, c int) {
	for off := 0; off+c <= len(y); off += c {
		var sum float64
		for _, v := range dy[off : off+c] {
			sum += float64(v)
		}
		for j := off; j < off+c; j++ {
			dx[j] = T(float64(dy[j]) - math.Exp(float64(y[j]))*sum)
		}
	}
}

// Accuracy is the fraction of rows whose largest logit (the first, on ties)
// is at the label's index: logits [batch, classes], labels [batch] as float
// class indices, weights [batch] or nil as in SoftmaxCrossEntropy. It has no
// gradient; log it, do not minimise it.
func Accuracy(logits, labels, weights *G.Node) (*G.Node, error) {
	if err := checkLogitsLabels("Accuracy", logits, labels, weights); err != nil {
		return nil, err
	}
	s := logits.Shape()
	op := &accuracyOp{base: newBase("Accuracy"), batch: s[0], classes: s[1], weighted: weights != nil}
	op.noDiff.arity = op.Arity()
	ch := []*G.Node{logits, labels}
	if weights != nil {
		ch = append(ch, weights)
	}
	return apply(op, ch...)
}

type accuracyOp struct {
	base
	noDiff
	batch, classes int
	weighted       bool
	out            scalarBuffer
	rowW           []float64
}

func (op *accuracyOp) Arity() int {
	if op.weighted {
		return 3
	}
	return 2
}

func (op *accuracyOp) Type() hm.Type {
	if op.weighted {
		return fnType(0, 2, 1, 1)
	}
	return fnType(0, 2, 1)
}

func (op *accuracyOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}

func (op *accuracyOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	z, l, w, err := logitsInputs(op, v, op.batch, op.classes, op.weighted)
	if err != nil {
		return nil, err
	}
	var acc float64
	if dt == tensor.Float32 {
		acc, err = accuracy[float32](op, z, l, w)
	} else {
		acc, err = accuracy[float64](op, z, l, w)
	}
	if err != nil {
		return nil, err
	}
	return op.out.set(dt, acc), nil
}

func accuracy[T float](op *accuracyOp, zt, lt, wt *tensor.Dense) (float64, error) {
	op.rowW = grow(op.rowW, op.batch)
	if err := rowWeights[T](op, wt, op.rowW); err != nil {
		return 0, err
	}
	z, labels := data[T](zt), data[T](lt)
	c := op.classes
	var acc float64
	for i := 0; i < op.batch; i++ {
		k, err := rowLabel(op, i, float64(labels[i]), c, op.rowW, op.weighted)
		if err != nil {
			return 0, err
		}
		row := z[i*c : (i+1)*c]
		best := 0
		for j, x := range row {
			if x > row[best] {
				best = j
			}
		}
		if best == k {
			acc += op.rowW[i]
		}
	}
	return acc, nil
}
