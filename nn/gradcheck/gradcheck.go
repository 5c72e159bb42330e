package gradcheck

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Case is one function to check.
type Case struct {
	// Name appears in errors.
	Name string
	// Inputs are the values of the function's leaf inputs, all float32 or
	// all float64. They are copied; the caller's tensors are not changed.
	Inputs []*tensor.Dense
	// NoGrad lists indices of Inputs not differentiated (class labels, row
	// weights). They keep their values in every run.
	NoGrad []int
	// Build adds the function to g, given one leaf node per input, and
	// returns its output (any shape). It is called twice, for the symbolic
	// and the numeric graph.
	Build func(g *G.ExprGraph, in []*G.Node) (*G.Node, error)
	// BuildBound replaces Inputs and Build when the leaves already exist
	// bound to memory (a layer's parameters in a module.Store): it adds the
	// function to g and returns its output and the leaves to differentiate,
	// each bound to a *tensor.Dense. Their values are perturbed in place and
	// restored afterwards. It is called twice, like Build.
	BuildBound func(g *G.ExprGraph) (out *G.Node, wrt []*G.Node, err error)
	// Eps is the finite-difference step: default 1e-6 in float64 and 1e-2
	// in float32.
	Eps float64
	// RTol and ATol bound |symbolic - numeric| by ATol + RTol·max(|s|, |n|).
	// Defaults: 1e-5 and 1e-7 in float64; 2e-2 and 2e-3 in float32.
	RTol, ATol float64
	// MaxSkipFrac is the largest fraction of elements that may be skipped as
	// kinks (default 0.05).
	MaxSkipFrac float64
	// Seed picks the projection direction and the warm-up inputs.
	Seed uint64
}

// Mismatch is one element whose gradients were compared.
type Mismatch struct {
	Input, Index      int    // which leaf (in Inputs or BuildBound's order) and element
	Name              string // the leaf node's name
	Symbolic, Numeric float64
	// Ratio is |s - n| over the tolerance at that element: above 1 fails.
	Ratio float64
}

func (m Mismatch) String() string {
	return fmt.Sprintf("%s element %d: symbolic %.8g, numeric %.8g (%.3g× the tolerance)", m.Name, m.Index, m.Symbolic, m.Numeric, m.Ratio)
}

// Result summarises a check.
type Result struct {
	Checked int      // elements compared
	Skipped int      // elements skipped as kinks
	Worst   Mismatch // the element closest to (or furthest past) the tolerance
}

// Run checks c and fails t with the worst element if a gradient is wrong.
func Run(t testing.TB, c Case) Result {
	t.Helper()
	r, err := Check(c)
	if err != nil {
		t.Fatalf("gradcheck %s: %v", c.Name, err)
	}
	return r
}

// Check compares symbolic and numeric gradients; the error describes the
// worst element when any exceeds the tolerance, or why the check could not
// run.
func Check(c Case) (Result, error) {
	var res Result
	build := c.builder()
	if build == nil {
		return res, errors.New("a Case needs Inputs and Build, or BuildBound")
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x9e3779b97f4a7c15))

	// Symbolic graph: out projected onto a random direction, differentiated.
	gs := G.NewGraph()
	out, sIn, err := build(gs)
	if err != nil {
		return res, fmt.Errorf("build: %w", err)
	}
	dt := sIn[0].t.Dtype()
	c.defaults(dt)
	size := out.Shape().TotalSize()
	if out.IsScalar() {
		size = 1
	}
	dir := make([]float64, size)
	for i := range dir {
		dir[i] = rng.Float64()*2 - 1
	}
	loss, err := G.ApplyOp(&projOp{dir: dir, dims: out.Dims(), shape: out.Shape()}, out)
	if err != nil {
		return res, fmt.Errorf("projecting the output: %w", err)
	}
	var wrtNodes G.Nodes
	for _, l := range sIn {
		wrtNodes = append(wrtNodes, l.node)
	}
	grads, err := G.Grad(loss, wrtNodes...)
	if err != nil {
		return res, fmt.Errorf("Grad: %w", err)
	}
	ms := G.NewTapeMachine(gs)
	defer ms.Close()

	// Warm-up run on other values, so state kept from a previous run (a
	// buffer accumulated into instead of overwritten) shows up as an error.
	saved := make([][]float64, len(sIn))
	for k, l := range sIn {
		saved[k] = make([]float64, l.len())
		for j := range saved[k] {
			saved[k][j] = l.get(j)
			l.set(j, saved[k][j]*0.5+rng.Float64()-0.5)
		}
	}
	err = ms.RunAll()
	ms.Reset()
	for k, l := range sIn {
		for j, v := range saved[k] {
			l.set(j, v)
		}
	}
	if err != nil {
		return res, fmt.Errorf("warm-up run: %w", err)
	}
	if err := ms.RunAll(); err != nil {
		return res, fmt.Errorf("symbolic run: %w", err)
	}
	sym := make([][]float64, len(sIn))
	for k, gn := range grads {
		if gn.Value() == nil {
			return res, fmt.Errorf("gradient of %s has no value after the run", sIn[k].name)
		}
		sym[k] = Values(gn.Value())
		if len(sym[k]) != sIn[k].len() {
			return res, fmt.Errorf("gradient of %s has %d elements, it has %d", sIn[k].name, len(sym[k]), sIn[k].len())
		}
	}
	ms.Reset()

	// Numeric graph: the output alone.
	gf := G.NewGraph()
	fout, fIn, err := build(gf)
	if err != nil {
		return res, fmt.Errorf("build (numeric graph): %w", err)
	}
	if len(fIn) != len(sIn) {
		return res, fmt.Errorf("the two builds returned %d and %d leaves", len(sIn), len(fIn))
	}
	mf := G.NewTapeMachine(gf)
	defer mf.Close()
	f := func() (float64, error) {
		defer mf.Reset()
		if err := mf.RunAll(); err != nil {
			return 0, err
		}
		o := Values(fout.Value())
		var s float64
		for i, v := range o {
			s += v * dir[i]
		}
		return s, nil
	}
	numeric := func(l *leaf, j int, eps float64) (float64, error) {
		orig := l.get(j)
		l.set(j, orig+eps)
		lp, err := f()
		if err != nil {
			l.set(j, orig)
			return 0, err
		}
		l.set(j, orig-eps)
		lm, err := f()
		l.set(j, orig)
		// Divide by the step actually taken, after rounding to the dtype.
		step := rounded(dt, orig+eps) - rounded(dt, orig-eps)
		return (lp - lm) / step, err
	}
	res.Worst.Ratio = -1
	for k, l := range fIn {
		for j := 0; j < l.len(); j++ {
			n, err := numeric(l, j, c.Eps)
			if err != nil {
				return res, fmt.Errorf("numeric run (%s element %d): %w", l.name, j, err)
			}
			s := sym[k][j]
			tol := c.ATol + c.RTol*max(math.Abs(s), math.Abs(n))
			ratio := math.Abs(s-n) / tol
			if ratio > 1 {
				n2, err := numeric(l, j, c.Eps/2)
				if err != nil {
					return res, fmt.Errorf("numeric run (%s element %d): %w", l.name, j, err)
				}
				if math.Abs(n-n2) > tol && math.Abs(s-n2) > tol {
					res.Skipped++ // the differences disagree: a kink
					continue
				}
				if r2 := math.Abs(s-n2) / tol; r2 < ratio {
					n, ratio = n2, r2
				}
			}
			res.Checked++
			if math.IsNaN(s) || math.IsNaN(n) {
				ratio = math.Inf(1)
			}
			if ratio > res.Worst.Ratio {
				res.Worst = Mismatch{Input: sIn[k].index, Name: sIn[k].name, Index: j, Symbolic: s, Numeric: n, Ratio: ratio}
			}
		}
	}
	total := res.Checked + res.Skipped
	if total == 0 {
		return res, errors.New("no element to check: every input is in NoGrad or empty")
	}
	if res.Worst.Ratio > 1 {
		return res, fmt.Errorf("gradient mismatch at %v", res.Worst)
	}
	if float64(res.Skipped) > c.MaxSkipFrac*float64(total) {
		return res, fmt.Errorf("%d of %d elements skipped as kinks (more than %.0f%%): move the inputs away from the non-smooth points", res.Skipped, total, 100*c.MaxSkipFrac)
	}
	return res, nil
}

func (c *Case) defaults(dt tensor.Dtype) {
	f32 := dt == tensor.Float32
	if c.Eps == 0 {
		c.Eps = map[bool]float64{true: 1e-2, false: 1e-6}[f32]
	}
	if c.RTol == 0 {
		c.RTol = map[bool]float64{true: 2e-2, false: 1e-5}[f32]
	}
	if c.ATol == 0 {
		c.ATol = map[bool]float64{true: 2e-3, false: 1e-7}[f32]
	}
	if c.MaxSkipFrac == 0 {
		c.MaxSkipFrac = 0.05
	}
}

// leaf is one input node, bound to a private copy of the caller's tensor.
type leaf struct {
	node  *G.Node
	t     *tensor.Dense
	index int    // position among the checked leaves
	name  string // for messages
}

// builder returns a function that builds the case into a graph and returns
// its output and the leaves to differentiate, or nil for an empty case.
func (c *Case) builder() func(g *G.ExprGraph) (*G.Node, []*leaf, error) {
	if c.BuildBound != nil {
		return func(g *G.ExprGraph) (*G.Node, []*leaf, error) {
			out, wrt, err := c.BuildBound(g)
			if err != nil {
				return nil, nil, err
			}
			if out == nil {
				return nil, nil, errors.New("BuildBound returned a nil output")
			}
			if len(wrt) == 0 {
				return nil, nil, errors.New("BuildBound returned no leaf to differentiate")
			}
			ls := make([]*leaf, len(wrt))
			for i, n := range wrt {
				t, ok := n.Value().(*tensor.Dense)
				if !ok {
					return nil, nil, fmt.Errorf("leaf %d (%s) is bound to a %T: bind a *tensor.Dense", i, n.Name(), n.Value())
				}
				ls[i] = &leaf{node: n, t: t, index: i, name: n.Name()}
			}
			return out, ls, checkDtypes(ls)
		}
	}
	if len(c.Inputs) == 0 || c.Build == nil {
		return nil
	}
	return func(g *G.ExprGraph) (*G.Node, []*leaf, error) {
		all := make([]*G.Node, len(c.Inputs))
		var ls []*leaf
		for i, in := range c.Inputs {
			t := in.Clone().(*tensor.Dense)
			name := fmt.Sprintf("input%d", i)
			if in.Shape().IsScalar() {
				all[i] = G.NewScalar(g, in.Dtype(), G.WithName(name), G.WithValue(t))
			} else {
				all[i] = G.NewTensor(g, in.Dtype(), in.Dims(), G.WithShape(in.Shape().Clone()...), G.WithName(name), G.WithValue(t))
			}
			if !slices.Contains(c.NoGrad, i) {
				ls = append(ls, &leaf{node: all[i], t: t, index: i, name: name})
			}
		}
		if len(ls) == 0 {
			return nil, nil, errors.New("no input to differentiate: every input is in NoGrad")
		}
		if err := checkDtypes(ls); err != nil {
			return nil, nil, err
		}
		out, err := c.Build(g, all)
		if err == nil && out == nil {
			err = errors.New("Build returned a nil node")
		}
		return out, ls, err
	}
}

func checkDtypes(ls []*leaf) error {
	dt := ls[0].t.Dtype()
	if dt != tensor.Float32 && dt != tensor.Float64 {
		return fmt.Errorf("%s has dtype %v: use float32 or float64", ls[0].name, dt)
	}
	for _, l := range ls {
		if l.t.Dtype() != dt {
			return fmt.Errorf("%s has dtype %v, %s has %v: use one dtype", l.name, l.t.Dtype(), ls[0].name, dt)
		}
	}
	return nil
}

func (l *leaf) len() int { return l.t.Shape().TotalSize() }

func (l *leaf) get(j int) float64 {
	if l.t.Dtype() == tensor.Float32 {
		return float64(l.t.Float32s()[j])
	}
	return l.t.Float64s()[j]
}

// set writes element j in place: the node stays bound to the same tensor,
// which the machine reads at each run.
func (l *leaf) set(j int, x float64) {
	if l.t.Dtype() == tensor.Float32 {
		l.t.Float32s()[j] = float32(x)
	} else {
		l.t.Float64s()[j] = x
	}
}

func rounded(dt tensor.Dtype, x float64) float64 {
	if dt == tensor.Float32 {
		return float64(float32(x))
	}
	return x
}

// Values copies the elements of a Gorgonia value (a float32 or float64
// scalar or tensor) out as float64, for comparing results in tests of either
// dtype. It panics on anything else.
func Values(v G.Value) []float64 {
	switch x := v.(type) {
	case *G.F32:
		return []float64{float64(*x)}
	case *G.F64:
		return []float64{float64(*x)}
	}
	switch d := v.Data().(type) {
	case []float32:
		return widen(d)
	case []float64:
		return widen(d)
	case float32:
		return []float64{float64(d)}
	case float64:
		return []float64{d}
	}
	panic(fmt.Sprintf("gradcheck: cannot read a %T", v))
}

// widen copies d out as float64.
func widen[T float32 | float64](d []T) []float64 {
	o := make([]float64, len(d))
	for i, e := range d {
		o[i] = float64(e)
	}
	return o
}

// scalar is x as a Gorgonia scalar of dtype dt, rounded to it.
func scalar(dt tensor.Dtype, x float64) G.Value {
	if dt == tensor.Float32 {
		r := G.F32(x)
		return &r
	}
	r := G.F64(x)
	return &r
}

// scaled sets d[i] = g·dir[i], rounded to T.
func scaled[T float32 | float64](d []T, g float64, dir []float64) {
	for i := range d {
		d[i] = T(g * dir[i])
	}
}

// projOp is Σ out·dir (summed in float64): the scalar whose gradient is
// checked. Its gradient is dir itself, scaled by the incoming gradient.
type projOp struct {
	dir   []float64
	dims  int
	shape tensor.Shape
}

func (op *projOp) Arity() int { return 1 }
func (op *projOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	if op.dims == 0 {
		return hm.NewFnType(a, a)
	}
	return hm.NewFnType(&G.TensorType{Dims: op.dims, Of: a}, a)
}
func (op *projOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return tensor.ScalarShape(), nil }
func (op *projOp) ReturnsPtr() bool                               { return false }
func (op *projOp) CallsExtern() bool                              { return false }
func (op *projOp) OverwritesInput() int                           { return -1 }
func (op *projOp) WriteHash(h hash.Hash)                          { fmt.Fprintf(h, "gradcheck.proj%p", op) }
func (op *projOp) Hashcode() uint32                               { return hashOf(op) }
func (op *projOp) String() string                                 { return "gradcheck.Project" }
func (op *projOp) DiffWRT(int) []bool                             { return []bool{true} }

func (op *projOp) Do(v ...G.Value) (G.Value, error) {
	var s float64
	for i, x := range Values(v[0]) {
		s += x * op.dir[i]
	}
	return scalar(v[0].Dtype(), s), nil
}

func (op *projOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	d, err := G.ApplyOp(&projGradOp{p: op}, grad)
	return G.Nodes{d}, err
}

type projGradOp struct{ p *projOp }

func (op *projGradOp) Arity() int { return 1 }
func (op *projGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	if op.p.dims == 0 {
		return hm.NewFnType(a, a)
	}
	return hm.NewFnType(a, &G.TensorType{Dims: op.p.dims, Of: a})
}
func (op *projGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.p.shape.Clone(), nil
}
func (op *projGradOp) ReturnsPtr() bool      { return false }
func (op *projGradOp) CallsExtern() bool     { return false }
func (op *projGradOp) OverwritesInput() int  { return -1 }
func (op *projGradOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "gradcheck.projGrad%p", op) }
func (op *projGradOp) Hashcode() uint32      { return hashOf(op) }
func (op *projGradOp) String() string        { return "gradcheck.ProjectGrad" }

func (op *projGradOp) Do(v ...G.Value) (G.Value, error) {
	var g float64
	switch x := v[0].(type) {
	case *G.F32:
		g = float64(*x)
	case *G.F64:
		g = float64(*x)
	default:
		g = Values(v[0])[0]
	}
	dt := v[0].Dtype()
	if op.p.dims == 0 {
		return scalar(dt, g*op.p.dir[0]), nil
	}
	out := tensor.New(tensor.Of(dt), tensor.WithShape(op.p.shape.Clone()...))
	switch d := out.Data().(type) {
	case []float32:
		scaled(d, g, op.p.dir)
	case []float64:
		scaled(d, g, op.p.dir)
	}
	return out, nil
}

func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
