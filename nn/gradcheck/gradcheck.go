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
	Input, Index      int
	Symbolic, Numeric float64
	// Ratio is |s - n| over the tolerance at that element: above 1 fails.
	Ratio float64
}

func (m Mismatch) String() string {
	return fmt.Sprintf("input %d element %d: symbolic %.8g, numeric %.8g (%.3g× the tolerance)", m.Input, m.Index, m.Symbolic, m.Numeric, m.Ratio)
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
	if len(c.Inputs) == 0 || c.Build == nil {
		return res, errors.New("a Case needs Inputs and Build")
	}
	dt := c.Inputs[0].Dtype()
	if dt != tensor.Float32 && dt != tensor.Float64 {
		return res, fmt.Errorf("inputs have dtype %v: use float32 or float64", dt)
	}
	for i, in := range c.Inputs {
		if in.Dtype() != dt {
			return res, fmt.Errorf("input %d has dtype %v, input 0 has %v: use one dtype", i, in.Dtype(), dt)
		}
	}
	c.defaults(dt)
	rng := rand.New(rand.NewPCG(c.Seed, 0x9e3779b97f4a7c15))

	// Symbolic graph: out projected onto r, differentiated.
	gs := G.NewGraph()
	sIn := leaves(gs, c.Inputs)
	out, err := c.Build(gs, nodes(sIn))
	if err != nil {
		return res, fmt.Errorf("build: %w", err)
	}
	if out == nil {
		return res, errors.New("build returned a nil node")
	}
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
	var wrt []int
	var wrtNodes G.Nodes
	for i := range c.Inputs {
		if !slices.Contains(c.NoGrad, i) {
			wrt = append(wrt, i)
			wrtNodes = append(wrtNodes, sIn[i].node)
		}
	}
	grads, err := G.Grad(loss, wrtNodes...)
	if err != nil {
		return res, fmt.Errorf("Grad: %w", err)
	}
	ms := G.NewTapeMachine(gs)
	defer ms.Close()

	// Warm-up run on other values, so state kept from a previous run (a
	// buffer accumulated into instead of overwritten) shows up as an error.
	for _, i := range wrt {
		for j := 0; j < sIn[i].len(); j++ {
			sIn[i].set(j, sIn[i].get(j)*0.5+rng.Float64()-0.5)
		}
	}
	if err := ms.RunAll(); err != nil {
		return res, fmt.Errorf("warm-up run: %w", err)
	}
	ms.Reset()
	for _, i := range wrt {
		if dt == tensor.Float32 {
			copy(sIn[i].t.Float32s(), c.Inputs[i].Float32s())
		} else {
			copy(sIn[i].t.Float64s(), c.Inputs[i].Float64s())
		}
	}
	if err := ms.RunAll(); err != nil {
		return res, fmt.Errorf("symbolic run: %w", err)
	}
	sym := make([][]float64, len(wrt))
	for k, gn := range grads {
		if gn.Value() == nil {
			return res, fmt.Errorf("gradient of input %d has no value after the run", wrt[k])
		}
		sym[k] = values(gn.Value())
		if len(sym[k]) != sIn[wrt[k]].len() {
			return res, fmt.Errorf("gradient of input %d has %d elements, the input has %d", wrt[k], len(sym[k]), sIn[wrt[k]].len())
		}
	}
	ms.Reset()

	// Numeric graph: the output alone.
	gf := G.NewGraph()
	fIn := leaves(gf, c.Inputs)
	fout, err := c.Build(gf, nodes(fIn))
	if err != nil {
		return res, fmt.Errorf("build (numeric graph): %w", err)
	}
	mf := G.NewTapeMachine(gf)
	defer mf.Close()
	f := func() (float64, error) {
		defer mf.Reset()
		if err := mf.RunAll(); err != nil {
			return 0, err
		}
		o := values(fout.Value())
		var s float64
		for i, v := range o {
			s += v * dir[i]
		}
		return s, nil
	}
	numeric := func(i, j int, eps float64) (float64, error) {
		l := fIn[i]
		orig := l.get(j)
		l.set(j, orig+eps)
		lp, err := f()
		if err != nil {
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
	for k, i := range wrt {
		for j := 0; j < fIn[i].len(); j++ {
			n, err := numeric(i, j, c.Eps)
			if err != nil {
				return res, fmt.Errorf("numeric run (input %d element %d): %w", i, j, err)
			}
			s := sym[k][j]
			tol := c.ATol + c.RTol*max(math.Abs(s), math.Abs(n))
			ratio := math.Abs(s-n) / tol
			if ratio > 1 {
				n2, err := numeric(i, j, c.Eps/2)
				if err != nil {
					return res, fmt.Errorf("numeric run (input %d element %d): %w", i, j, err)
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
				res.Worst = Mismatch{Input: i, Index: j, Symbolic: s, Numeric: n, Ratio: ratio}
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
	node *G.Node
	t    *tensor.Dense
}

// leaves makes one input node per tensor, bound to a private copy.
func leaves(g *G.ExprGraph, ins []*tensor.Dense) []*leaf {
	ls := make([]*leaf, len(ins))
	for i, in := range ins {
		c := in.Clone().(*tensor.Dense)
		name := fmt.Sprintf("input%d", i)
		var n *G.Node
		if in.Shape().IsScalar() {
			n = G.NewScalar(g, in.Dtype(), G.WithName(name), G.WithValue(c))
		} else {
			n = G.NewTensor(g, in.Dtype(), in.Dims(), G.WithShape(in.Shape().Clone()...), G.WithName(name), G.WithValue(c))
		}
		ls[i] = &leaf{node: n, t: c}
	}
	return ls
}

func nodes(ls []*leaf) []*G.Node {
	ns := make([]*G.Node, len(ls))
	for i, l := range ls {
		ns[i] = l.node
	}
	return ns
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

// values copies a Value's elements out as float64.
func values(v G.Value) []float64 {
	switch x := v.(type) {
	case *G.F32:
		return []float64{float64(*x)}
	case *G.F64:
		return []float64{float64(*x)}
	}
	switch d := v.Data().(type) {
	case []float32:
		o := make([]float64, len(d))
		for i, e := range d {
			o[i] = float64(e)
		}
		return o
	case []float64:
		return append([]float64(nil), d...)
	case float32:
		return []float64{float64(d)}
	case float64:
		return []float64{d}
	}
	panic(fmt.Sprintf("gradcheck: cannot read a %T", v))
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
	for i, x := range values(v[0]) {
		s += x * op.dir[i]
	}
	if v[0].Dtype() == tensor.Float32 {
		r := G.F32(s)
		return &r, nil
	}
	r := G.F64(s)
	return &r, nil
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
		g = values(v[0])[0]
	}
	dt := v[0].Dtype()
	if op.p.dims == 0 {
		if dt == tensor.Float32 {
			r := G.F32(g * op.p.dir[0])
			return &r, nil
		}
		r := G.F64(g * op.p.dir[0])
		return &r, nil
	}
	out := tensor.New(tensor.Of(dt), tensor.WithShape(op.p.shape.Clone()...))
	switch d := out.Data().(type) {
	case []float32:
		for i := range d {
			d[i] = float32(g * op.p.dir[i])
		}
	case []float64:
		for i := range d {
			d[i] = g * op.p.dir[i]
		}
	}
	return out, nil
}

func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
