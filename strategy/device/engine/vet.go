package engine

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
)

// Gorgonia v0.9.17's stock ops as a model's step may use them. Most are
// right and run as they are (the package doc lists them); the ones below
// are not, and the engine never runs them silently:
//
//   - G.Sum, G.Mean and G.Max over a middle axis (neither the first nor the
//     last, with more than one element in the axes between the first and
//     it, and not of size 2) add up the wrong elements (the tensor
//     package's reduction walks the wrong stride): G.Mean(x, 2, 3) of
//     [N, C, H, W] is one. Gorgonia's own gradients make such sums too (of
//     a G.BroadcastAdd over [N, C, H, W]). The executor computes these
//     reductions itself (reduceFix); the TapeMachine (Engine.Tape) refuses
//     a graph holding one.
//   - The float64 gradient of G.SoftMax reads the first row for every row:
//     the executor computes it (softmaxGradFix); the TapeMachine refuses it.
//   - The gradient of G.Slice adds into the value it is given, which the
//     executor holds across runs: it zeroes it first (execStep.zero).
//   - G.BatchNorm is refused: its float64 input gradient is wrong, a
//     graph built for evaluation normalises with the batch's statistics,
//     and its running statistics live outside the parameter store.
//   - G.Dropout and Gorgonia's random nodes are refused: their draws follow
//     no seed (a seeded run would not repeat) and they drop values in
//     evaluation graphs too.
//   - G.LogSumExp is refused: of a vector it computes
//     log(Σ exp(x - max) + max), not log(Σ exp(x - max)) + max, and of a
//     tensor of two axes or more it fails to build (that error gets the
//     same advice, stephint.go).
//   - G.GlobalAveragePool2D (no gradient), G.Log2, G.InverseSqrt and
//     G.OuterProd (wrong gradients) are refused where the loss is
//     differentiated through them; elsewhere their values are right.
//
// The checks run when a graph is compiled, once; they cost a run nothing.

// graphProblem is one op of a step's graph that fulgur will not run.
type graphProblem struct {
	node *G.Node
	what string // what is wrong, naming the user's call
	fix  string
}

func opType(op G.Op) string { return fmt.Sprintf("%T", op) }

// vetForward checks the graph a step built, before it is differentiated
// (loss is nil outside training): the ops refused whatever runs them, and
// those whose gradient is wrong or missing where the loss is
// differentiated through them.
func vetForward(s *module.Step, loss *G.Node) []graphProblem {
	g := s.Graph()
	diff := differentiated(s, loss)
	var ps []graphProblem
	for _, n := range g.AllNodes() {
		op := n.Op()
		if op == nil {
			continue
		}
		switch typ, name := opType(op), op.String(); {
		case typ == "*gorgonia.BatchNormOp":
			ps = append(ps, graphProblem{n,
				fmt.Sprintf("G.BatchNorm of a %v input: in Gorgonia v0.9.17 its float64 input gradient is wrong, evaluation graphs normalise with the batch's statistics, and its running statistics are not saved, restored or synced", shapeOfChild(g, n, 0)),
				"use nn.NewBatchNorm1d or nn.NewBatchNorm2d (running statistics in the parameter store, PyTorch's train/eval behaviour)"})
		case typ == "gorgonia.randomOp":
			ps = append(ps, graphProblem{n,
				fmt.Sprintf("a random node %v (G.Dropout, G.UniformRandomNode, G.GaussianRandomNode): its draws follow no seed, so a seeded run does not repeat, and G.Dropout drops values in evaluation graphs too", n.Shape()),
				"use nn.NewDropout (a mask drawn from the run's seed, the identity outside training)"})
		case typ == "gorgonia.elemUnaryOp" && name == "ln" && logSumExpOf(g, n) != nil:
			ps = append(ps, graphProblem{n,
				fmt.Sprintf("G.LogSumExp of a %v input: Gorgonia v0.9.17 computes log(Σ exp(x - max) + max) instead of log(Σ exp(x - max)) + max", logSumExpOf(g, n).Shape()),
				logSumExpFix})
		case !diff(n):
		case typ == "*gorgonia.globalAveragePoolOp":
			ps = append(ps, graphProblem{n,
				fmt.Sprintf("G.GlobalAveragePool2D of a %v input in a training graph: it has no gradient in Gorgonia v0.9.17", shapeOfChild(g, n, 0)),
				"use nn.Mean(x, 2, 3) ([N, C]; G.Reshape it to [N, C, 1, 1] if you need that shape) or the nn.NewGlobalAvgPool2d layer"})
		case typ == "gorgonia.elemUnaryOp" && name == "log2":
			ps = append(ps, graphProblem{n,
				"G.Log2 in a training graph: its gradient is wrong in Gorgonia v0.9.17 (it divides by x/ln 2 instead of x·ln 2)",
				"use G.Log(x) divided by ln 2 (G.HadamardDiv(G.Log(x), G.NewConstant(math.Ln2)), the constant in the model's dtype)"})
		case typ == "gorgonia.elemUnaryOp" && name == "invSqrt":
			ps = append(ps, graphProblem{n,
				"G.InverseSqrt in a training graph: its gradient is wrong in Gorgonia v0.9.17 (-dy/(2y³) instead of -dy·y³/2)",
				"use G.Inverse(G.Sqrt(x)), whose gradients are right"})
		case typ == "gorgonia.linAlgBinOp" && strings.Contains(name, "⊗"):
			ps = append(ps, graphProblem{n,
				"G.OuterProd in a training graph: its gradient is wrong in Gorgonia v0.9.17 (a shape mismatch for vectors of different lengths, wrong values for equal ones)",
				"use G.Mul of the vectors reshaped to a column and a row (G.Reshape(a, tensor.Shape{n, 1}), G.Reshape(b, tensor.Shape{1, m}))"})
		}
	}
	return ps
}

// logSumExpFix is what to write instead of G.LogSumExp.
const logSumExpFix = "use nn.LogSoftmax(x, axis) where the log-sum-exp normalises log-probabilities (it is x - logsumexp(x)), " +
	"or the max-shifted composition m := G.Max(x, axis); m1 := G.Reshape(m, x's shape with 1 at axis); " +
	"lse := G.Add(G.Log(G.Sum(G.Exp(G.BroadcastSub(x, m1, nil, []byte{axis})), axis)), m) " +
	"(a vector: G.Reshape it to [1, n] first and take axis 1), whose values and gradients are torch.logsumexp's"

// logSumExpOf returns x when ln, a log node, ends the graph G.LogSumExp(x)
// builds for a vector: ln(Σ(exp(x - max(x))) + max(x)), the same max node
// in both places; else nil.
func logSumExpOf(g *G.ExprGraph, ln *G.Node) *G.Node {
	kids := func(n *G.Node) []*G.Node {
		var out []*G.Node
		for it := g.From(n.ID()); it.Next(); {
			out = append(out, it.Node().(*G.Node))
		}
		return out
	}
	is := func(n *G.Node, typ, name string) bool {
		return n != nil && n.Op() != nil && opType(n.Op()) == typ && (name == "" || n.Op().String() == name)
	}
	add := kids(ln)
	if len(add) != 1 || !is(add[0], "gorgonia.elemBinOp", "+ false") {
		return nil
	}
	sm := kids(add[0])
	if len(sm) != 2 || !is(sm[0], "gorgonia.sumOp", "") || !is(sm[1], "*gorgonia.maxOp", "") && !is(sm[1], "gorgonia.maxOp", "") {
		return nil
	}
	exp := kids(sm[0])
	if len(exp) != 1 || !is(exp[0], "gorgonia.elemUnaryOp", "exp") {
		return nil
	}
	sub := kids(exp[0])
	if len(sub) != 1 || !is(sub[0], "gorgonia.elemBinOp", "- false") {
		return nil
	}
	xm := kids(sub[0])
	if len(xm) != 2 || xm[1] != sm[1] {
		return nil
	}
	return xm[0]
}

// differentiated reports, for a training graph, whether the loss is
// differentiated through n: n is the loss or one of its inputs, directly
// or not, and one of n's inputs depends on a parameter.
func differentiated(s *module.Step, loss *G.Node) func(*G.Node) bool {
	if loss == nil {
		return func(*G.Node) bool { return false }
	}
	g := s.Graph()
	children := func(n *G.Node) []*G.Node {
		var out []*G.Node
		for it := g.From(n.ID()); it.Next(); {
			out = append(out, it.Node().(*G.Node))
		}
		return out
	}
	feedsLoss := map[*G.Node]bool{}
	for stack := []*G.Node{loss}; len(stack) > 0; {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if !feedsLoss[n] {
			feedsLoss[n] = true
			stack = append(stack, children(n)...)
		}
	}
	params := map[*G.Node]bool{}
	for _, name := range s.UsedParams() {
		if n, ok := s.Node(name); ok {
			params[n] = true
		}
	}
	memo := map[*G.Node]bool{}
	var dependsOnParam func(*G.Node) bool
	dependsOnParam = func(n *G.Node) bool {
		if v, ok := memo[n]; ok {
			return v
		}
		memo[n] = params[n]
		for _, c := range children(n) {
			if dependsOnParam(c) {
				memo[n] = true
				break
			}
		}
		return memo[n]
	}
	return func(n *G.Node) bool {
		if !feedsLoss[n] {
			return false
		}
		for _, c := range children(n) {
			if dependsOnParam(c) {
				return true
			}
		}
		return false
	}
}

// vetTape checks a compiled graph (gradients included) for the reductions
// only the executor computes right.
func vetTape(g *G.ExprGraph) []graphProblem {
	var ps []graphProblem
	for _, n := range g.AllNodes() {
		if newSoftmaxGradFix(n) != nil {
			ps = append(ps, graphProblem{n,
				"the gradient of G.SoftMax in a float64 graph is wrong in Gorgonia v0.9.17 on the TapeMachine (Engine.Tape): it reads the first row for every row",
				"run it on the engine's executor (leave Engine.Tape false), which computes it right, or use float32, or nn.Softmax / nn.LogSoftmax"})
		}
		if r, ok := badReduction(g, n); ok {
			ps = append(ps, graphProblem{n,
				fmt.Sprintf("%s over axes %v of a %v tensor gives wrong values in Gorgonia v0.9.17 on the TapeMachine (Engine.Tape)", r.call(), r.along, r.in),
				"run it on the engine's executor (leave Engine.Tape false), which computes it right, or " + r.instead()})
		}
	}
	return ps
}

// problemsError is the compile error listing every problem at once.
func problemsError(g *G.ExprGraph, ps []graphProblem) error {
	if len(ps) == 0 {
		return nil
	}
	var b strings.Builder
	if len(ps) == 1 {
		b.WriteString("the graph uses a Gorgonia op fulgur does not run: ")
	} else {
		fmt.Fprintf(&b, "the graph uses %d Gorgonia ops fulgur does not run:", len(ps))
	}
	for i, p := range ps {
		if len(ps) > 1 {
			fmt.Fprintf(&b, "\n  %d. ", i+1)
		}
		fmt.Fprintf(&b, "%s (node %q%s): %s", p.what, p.node.Name(), sources(g, p.node), p.fix)
	}
	return errors.New(b.String())
}

// sources names the parameters and inputs n is computed from (up to three),
// which is as close to the user's call site as a Gorgonia node gets.
func sources(g *G.ExprGraph, n *G.Node) string {
	var names []string
	seen := map[*G.Node]bool{}
	var walk func(*G.Node)
	walk = func(m *G.Node) {
		if seen[m] || len(names) > 3 {
			return
		}
		seen[m] = true
		if m.Op() == nil {
			if name := m.Name(); name != "" && !strings.ContainsAny(name, "()%") && !m.IsScalar() {
				names = append(names, name)
			}
			return
		}
		for it := g.From(m.ID()); it.Next(); {
			walk(it.Node().(*G.Node))
		}
	}
	walk(n)
	switch {
	case len(names) == 0:
		return ""
	case len(names) > 3:
		return ", computed from " + strings.Join(names[:3], ", ") + ", ..."
	}
	return ", computed from " + strings.Join(names, ", ")
}

func shapeOfChild(g *G.ExprGraph, n *G.Node, i int) tensor.Shape {
	if c := childOf(g, n, i); c != nil {
		return c.Shape()
	}
	return nil
}

// childOf is n's i-th input, nil when it has fewer.
func childOf(g *G.ExprGraph, n *G.Node, i int) *G.Node {
	k := 0
	for it := g.From(n.ID()); it.Next(); k++ {
		if k == i {
			return it.Node().(*G.Node)
		}
	}
	return nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// reduction is a Gorgonia Sum or Max node: its axes and input shape.
type reduction struct {
	max   bool
	along []int
	in    tensor.Shape
}

func (r reduction) call() string {
	if r.max {
		return "G.Max"
	}
	return "G.Sum (or G.Mean, which sums)"
}

// instead is what to write in place of the reduction.
func (r reduction) instead() string {
	if r.max {
		return "G.Transpose the axes to the end and take G.Max over those"
	}
	return fmt.Sprintf("use nn.Sum(x, %[1]s) or nn.Mean(x, %[1]s)", joinInts(r.along))
}

// badReduction reports whether n is a Gorgonia Sum or Max that the tensor
// package computes wrong for its input's shape.
func badReduction(g *G.ExprGraph, n *G.Node) (reduction, bool) {
	op := n.Op()
	if op == nil {
		return reduction{}, false
	}
	var r reduction
	var prefix string
	switch opType(op) {
	case "gorgonia.sumOp":
		prefix = "Σ"
	case "*gorgonia.maxOp", "gorgonia.maxOp":
		prefix, r.max = "MaxAlong", true
	default:
		return reduction{}, false
	}
	along, ok := parseAxes(strings.TrimPrefix(op.String(), prefix))
	if !ok {
		return reduction{}, false
	}
	r.along = along
	r.in = shapeOfChild(g, n, 0)
	if r.in == nil || !wrongReduction(r.in, along) {
		return reduction{}, false
	}
	return r, true
}

// parseAxes reads "[2 3]".
func parseAxes(s string) ([]int, bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, false
	}
	var out []int
	for _, f := range strings.Fields(s[1 : len(s)-1]) {
		a, err := strconv.Atoi(f)
		if err != nil {
			return nil, false
		}
		out = append(out, a)
	}
	return out, true
}

// wrongReduction reports whether the tensor package (v0.9.24) reduces shape
// over along wrong. It reduces one axis at a time in increasing order; an
// axis k of the shape at that point that is neither the first nor the last
// goes through its ReduceDefault, which steps from one block of the axes
// before k to the next by 2·stride instead of size·stride: right only when
// the axis has size 2 or the axes between the first and k hold one
// element. A reduction over every axis is one sum, right.
func wrongReduction(shape tensor.Shape, along []int) bool {
	if len(along) == 0 || len(along) >= len(shape) && isIota(along) {
		return false
	}
	sorted := append([]int(nil), along...)
	for i := 1; i < len(sorted); i++ { // insertion sort: a few axes
		for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	s := append([]int(nil), shape...)
	for done, a := range sorted {
		k := a - done
		if k < 0 || k >= len(s) {
			return false // Gorgonia fails with an error of its own
		}
		if k > 0 && k < len(s)-1 {
			between := 1
			for _, d := range s[1:k] {
				between *= d
			}
			if between > 1 && s[k] != 2 {
				return true
			}
		}
		s = append(s[:k], s[k+1:]...)
	}
	return false
}

func isIota(xs []int) bool {
	for i, x := range xs {
		if x != i {
			return false
		}
	}
	return true
}

// reduceFix is the executor's Do for a Gorgonia Sum or Max that
// badReduction reported: the same output (shape and order) computed right,
// into a buffer held across runs.
type reduceFix struct {
	G.Op
	r   reduction
	out tensor.Shape
	buf *tensor.Dense
	acc []float64
	// ostride is each input axis's stride in the output (0 for a reduced
	// one); idx the input position, kept for the run.
	ostride, idx []int
}

func newReduceFix(r reduction, n *G.Node) *reduceFix {
	f := &reduceFix{Op: n.Op(), r: r, out: n.Shape().Clone(), ostride: make([]int, len(r.in)), idx: make([]int, len(r.in))}
	reduced := make([]bool, len(r.in))
	for _, a := range r.along {
		reduced[a] = true
	}
	s := 1
	for i := len(r.in) - 1; i >= 0; i-- {
		if !reduced[i] {
			f.ostride[i] = s
			s *= r.in[i]
		}
	}
	return f
}

func (f *reduceFix) String() string { return f.Op.String() + " (fulgur)" }

func (f *reduceFix) Do(v ...G.Value) (G.Value, error) {
	x, ok := v[0].(*tensor.Dense)
	if !ok || !x.Shape().Eq(f.r.in) {
		return nil, fmt.Errorf("%v: input is a %T of shape %v, want a tensor of shape %v", f, v[0], v[0].Shape(), f.r.in)
	}
	if f.buf == nil || f.buf.Dtype() != x.Dtype() {
		f.buf = tensor.New(tensor.WithShape(f.out.Clone()...), tensor.Of(x.Dtype()))
		f.acc = make([]float64, f.out.TotalSize())
	}
	if x.IsView() {
		x = x.Materialize().(*tensor.Dense)
	}
	switch x.Dtype() {
	case tensor.Float32:
		reduceAxes(f, x.Float32s(), f.buf.Float32s())
	case tensor.Float64:
		reduceAxes(f, x.Float64s(), f.buf.Float64s())
	default:
		return nil, fmt.Errorf("%v: dtype %v is not a float", f, x.Dtype())
	}
	return f.buf, nil
}

// reduceAxes sums (or takes the largest of) x over f.r.along into y, in
// row-major order of the axes kept; sums accumulate in float64.
func reduceAxes[T float32 | float64](f *reduceFix, x, y []T) {
	shape, ostride, idx, acc := f.r.in, f.ostride, f.idx, f.acc
	init := 0.0
	if f.r.max {
		init = math.Inf(-1)
	}
	for i := range acc {
		acc[i] = init
	}
	clear(idx)
	o := 0
	for _, v := range x {
		if f.r.max {
			if e := float64(v); e > acc[o] || e != e {
				acc[o] = e
			}
		} else {
			acc[o] += float64(v)
		}
		for d := len(shape) - 1; d >= 0; d-- {
			idx[d]++
			o += ostride[d]
			if idx[d] < shape[d] {
				break
			}
			o -= ostride[d] * shape[d]
			idx[d] = 0
		}
	}
	for i, a := range acc {
		y[i] = T(a)
	}
}

// softmaxGradFix is the executor's Do for Gorgonia's softmax gradient
// (softmaxDiffOp) in float64, whose kernel reads the first row's values
// for every row: the gradient of G.SoftMax along the op's axis, computed
// right, into a buffer held across runs. The float32 kernel is right and
// keeps running.
type softmaxGradFix struct {
	G.Op
	axis  int // -1: as Gorgonia's forward chooses
	isLog bool
	buf   *tensor.Dense
}

// newSoftmaxGradFix returns the fix for n when n is a float64 softmax
// gradient, else nil.
func newSoftmaxGradFix(n *G.Node) *softmaxGradFix {
	op := n.Op()
	if op == nil || opType(op) != "*gorgonia.softmaxDiffOp" {
		return nil
	}
	if dt, err := dtypeOf(n); err != nil || dt != tensor.Float64 {
		return nil
	}
	axis, isLog, ok := parseSoftmaxDiff(op.String())
	if !ok {
		return nil
	}
	return &softmaxGradFix{Op: op, axis: axis, isLog: isLog}
}

// parseSoftmaxDiff reads "SoftmaxDiff{-1, false}()".
func parseSoftmaxDiff(s string) (axis int, isLog bool, ok bool) {
	s, found := strings.CutPrefix(s, "SoftmaxDiff{")
	if !found {
		return 0, false, false
	}
	s, found = strings.CutSuffix(s, "}()")
	if !found {
		return 0, false, false
	}
	a, l, found := strings.Cut(s, ", ")
	if !found {
		return 0, false, false
	}
	axis, err := strconv.Atoi(a)
	if err != nil {
		return 0, false, false
	}
	isLog, err = strconv.ParseBool(l)
	return axis, isLog, err == nil
}

func (f *softmaxGradFix) String() string { return f.Op.String() + " (fulgur)" }

// Do takes Gorgonia's inputs: the softmax's input, its output y and the
// output's gradient dy.
func (f *softmaxGradFix) Do(v ...G.Value) (G.Value, error) {
	if len(v) != 3 {
		return nil, fmt.Errorf("%v: %d inputs, want 3", f, len(v))
	}
	y, err1 := denseF64(f, "output", v[1])
	dy, err2 := denseF64(f, "output gradient", v[2])
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	s := y.Shape()
	if !dy.Shape().Eq(s) {
		return nil, fmt.Errorf("%v: output %v and its gradient %v differ in shape", f, s, dy.Shape())
	}
	// The axis Gorgonia's forward softmax used.
	axis := f.axis
	if axis == -1 {
		axis = s.Dims() - 1
		if s.IsColVec() || (s.IsVector() && !s.IsRowVec()) {
			axis = 0
		}
	}
	if s.Dims() > 0 && (axis < 0 || axis >= s.Dims()) {
		return nil, fmt.Errorf("%v: axis %d is out of range for shape %v", f, axis, s)
	}
	if f.buf == nil || !f.buf.Shape().Eq(s) {
		f.buf = tensor.New(tensor.WithShape(s.Clone()...), tensor.Of(tensor.Float64))
	}
	outer, n, inner := 1, 1, 1
	if s.Dims() > 0 {
		for _, d := range s[:axis] {
			outer *= d
		}
		n = s[axis]
		for _, d := range s[axis+1:] {
			inner *= d
		}
	}
	softmaxGrad(y.Float64s(), dy.Float64s(), f.buf.Float64s(), outer, n, inner, f.isLog)
	return f.buf, nil
}

func denseF64(op fmt.Stringer, what string, v G.Value) (*tensor.Dense, error) {
	d, ok := v.(*tensor.Dense)
	if !ok || d.Dtype() != tensor.Float64 {
		return nil, fmt.Errorf("%v: %s is a %T of dtype %v, want a float64 tensor", op, what, v, v.Dtype())
	}
	if d.IsView() {
		d = d.Materialize().(*tensor.Dense)
	}
	return d, nil
}

// softmaxGrad writes dx = y·(dy - Σ dy·y) (log-softmax: dy - exp(y)·Σ dy),
// the sums along the axis of size n between outer and inner.
func softmaxGrad(y, dy, dx []float64, outer, n, inner int, isLog bool) {
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			base := o*n*inner + i
			var sum float64
			for k := 0; k < n; k++ {
				j := base + k*inner
				if isLog {
					sum += dy[j]
				} else {
					sum += dy[j] * y[j]
				}
			}
			for k := 0; k < n; k++ {
				j := base + k*inner
				if isLog {
					dx[j] = dy[j] - math.Exp(y[j])*sum
				} else {
					dx[j] = y[j] * (dy[j] - sum)
				}
			}
		}
	}
}
