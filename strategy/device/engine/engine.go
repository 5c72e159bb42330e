// Package engine compiles a module's graphs for one replica and runs them:
// it binds batches to input nodes, runs forward and backward, and gathers the
// gradients into the replica store's flat gradient buffer, each as soon as
// backward has computed it (reported to WithGradReady, so a strategy can
// start reducing while backward runs). It sits behind the
// device layer: strategies own engines and run them on a device.Device;
// infer runs one for inference. It imports module, data, nn (and nn/ops, for
// the gradient sums and input copies it runs itself) and Gorgonia,
// never strategy, trainer or a collective.
//
// A module's steps may use Gorgonia's stock ops beside fulgur's layers, and
// the engine runs them as they are: arithmetic and the broadcasting ops
// (G.Add, G.HadamardProd, G.BroadcastAdd, ...), G.Mul and G.BatchedMatMul,
// the elementwise functions (G.Exp, G.Log, G.Tanh, G.Sigmoid, G.Square,
// G.Sqrt, G.Rectify, G.LeakyRelu, ...), G.SoftMax, G.Concat, G.Slice,
// G.Transpose, G.Reshape, G.Conv2d, G.MaxPool2D, and G.Sum, G.Mean and G.Max
// over every axis or an outer or inner one (their values and gradients
// checked against PyTorch). Where Gorgonia v0.9.17 is wrong, the engine
// never runs the op silently, and decides once, when a graph is compiled:
//
//   - it computes right, on its executor, G.Sum, G.Mean and G.Max over a
//     middle axis of a tensor of four axes or more (G.Mean(x, 2, 3) of
//     [N, C, H, W]; the gradient of a G.BroadcastAdd over one has such a
//     sum), the float64 gradient of G.SoftMax, and the gradient of G.Slice
//     on every run; the TapeMachine (Engine.Tape) refuses the first two;
//   - it refuses G.BatchNorm (use nn.NewBatchNorm2d), G.Dropout and
//     Gorgonia's random nodes (use nn.NewDropout), G.LogSumExp (wrong for
//     a vector, and it fails to build for more axes: use nn.LogSoftmax or
//     the max-shifted composition the error spells out) and, where the loss is
//     differentiated through them, G.GlobalAveragePool2D (use nn.Mean(x,
//     2, 3)), G.Log2, G.InverseSqrt and G.OuterProd, with an error that
//     names the op, its node, the parameters and inputs it is computed from,
//     and the replacement.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
	"github.com/fulgur-ml/fulgur/panics"
)

// Engine runs one replica of a module.
type Engine struct {
	// Tape runs graphs on Gorgonia's TapeMachine instead of the engine's own
	// executor: the reference the executor is tested against.
	Tape   bool
	mod    module.Module
	store  *module.Store
	fields []data.Field
	seed   uint64
	graphs map[key]*compiled
	sync   *module.StatSync // nil: no replica to sync BatchNorm statistics with
	runKey uint64           // read by graph ops through module.Step.RunKey
	ready  func(offset, n int)
	shard  *Sharding // nil: the store holds the parameters
	pool   *unitPool // the sharded engine's unit buffers

	// beforeBackward is called by training runs between the forward and
	// the backward pass (SetBeforeBackward); nil: not called.
	beforeBackward func(loss float64) error
	// commInFlight: WithCommInFlight's; nil: never.
	commInFlight func() bool
	// settingName: WithSettingName's; nil: Go names.
	settingName func(field string) string
}

type key struct {
	mode  module.Mode
	batch int
	// fields names the batch's fields when they are fewer than the
	// engine's (a predict set without labels); "" for all of them.
	fields string
}

type input struct {
	name string
	t32  []float32
	t64  []float64
	size int // values per example
}

type compiled struct {
	g       *G.ExprGraph
	vm      G.VM      // reference path (Tape)
	exec    *executor // default path
	step    *module.Step
	inputs  []input
	loss    *G.Node
	lossVal G.Value
	out     *G.Node
	outVal  G.Value
	scalar  *tensor.Dense // a scalar output's 0-d value, rewritten each run
	grads   []gradBinding
	metrics []module.Metric
	hooks   *shardHooks  // sharded engines only
	fields  []data.Field // the batches' fields
	// readyAfter lists, by executor step, the gradients (indices into
	// grads) that are final once the step has run; gathered and reported
	// then, during the run. Gradients no step computes are gathered after
	// the run. Sharded engines (hooks) reduce-scatter their units'
	// gradients themselves and gather nothing.
	readyAfter [][]int
	run        gatherRun // the training run in progress
}

// gatherRun is what gathering a gradient during a run needs, and the
// run's hook before the backward pass.
type gatherRun struct {
	e                  *Engine
	accumulate, direct bool
	scale              float64
	beforeBackward     func(loss float64) error
	commInFlight       func() bool
}

type gradBinding struct {
	name   string
	node   *G.Node
	offset int
	n      int
	direct bool // the executor may write this gradient straight into the store
	step   int  // the executor step after which it is final; -1: after the run
}

// Result is what one run of a graph produced.
type Result struct {
	Loss    float64         // training graphs only
	Metrics []module.Metric // values the step logged; valid until the next run of the same graph
	// Output is what a predict graph's PredictStep returned (nil for the
	// other modes), valid until the next run. A PredictStep that returned a
	// scalar node gives a 0-dimensional tensor (Output.Dims() == 0) holding
	// its value: predictions are rows, one for each example, so a caller
	// gathering them refuses it (the strategies return
	// strategy.ErrScalarPrediction).
	Output *tensor.Dense
}

// Option is a rare engine setting.
type Option func(*Engine)

// WithGradReady makes training runs call ready(offset, n) as soon as the
// gradient of the parameter at [offset, offset+n) of the store is final in
// the store's gradient buffer (combined and scaled as Run was asked), while
// the rest of the backward pass still runs: a strategy starts reducing a
// gradient bucket once its last gradient is ready. ready runs on the
// goroutine running the graph; the span it names is not written again in
// this run. Every gradient the loss depends on is reported once per
// training run, in an order fixed by the graph's schedule (the same on every
// run of the graph and for every replica building the same graph);
// parameters the loss does not use are not reported. On the TapeMachine path
// (Engine.Tape) gradients are reported after the whole run.
func WithGradReady(ready func(offset, n int)) Option {
	return func(e *Engine) { e.ready = ready }
}

// WithCommInFlight makes training runs in a process with one P
// (GOMAXPROCS=1, a rank pinned to one core) yield the P between the
// backward pass's steps while inFlight reports true: while a strategy's
// reduction of gradients already handed over is in flight, the goroutine
// moving it (which tries its socket or shared memory and yields back) gets
// the core between ops, where it would otherwise wait for the whole
// backward pass (or sysmon's 10 ms) and the reduction would not overlap
// it. While none is in flight the runs do not yield: a yield would hand
// the core to other goroutines (the data loader preparing the next batch)
// whose work would then lengthen the backward pass instead of filling the
// wait for the peers after it. inFlight runs on the goroutine running the
// graph, like WithGradReady's ready.
func WithCommInFlight(inFlight func() bool) Option {
	return func(e *Engine) { e.commInFlight = inFlight }
}

// WithStatSync gives the engine's graphs s to reduce BatchNorm statistics
// across the job's replicas (SyncBatchNorm); all makes every BatchNorm
// sync, otherwise only those built with nn.BatchNormSync. A nil s is no
// syncing. Strategies pass it when they run more than one replica.
func WithStatSync(s module.StatSyncer, all bool) Option {
	return func(e *Engine) { e.sync = module.NewStatSync(s, all) }
}

// WithSettingName makes the advice the engine adds to a step's error name a
// trainer.Config field ("Precision") as name gives it (trainer.Config.
// SettingName, which strategies get in strategy.Setup: a cli's flag); nil,
// or "" for a field: Config.Precision.
func WithSettingName(name func(field string) string) Option {
	return func(e *Engine) { e.settingName = name }
}

// New makes an engine for module m over store; fields describe the batches it
// will be given.
func New(m module.Module, store *module.Store, fields []data.Field, seed uint64, opts ...Option) *Engine {
	e := &Engine{mod: m, store: store, fields: fields, seed: seed, graphs: map[key]*compiled{}}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Store is the replica's store.
func (e *Engine) Store() *module.Store { return e.store }

// Rebind makes the engine build its graphs from m from now on, over the
// same store: the graphs built from the previous module value are dropped.
// The caller has checked that m declares the store's tensors.
func (e *Engine) Rebind(m module.Module) {
	e.mod = m
	e.graphs = map[key]*compiled{}
}

// SetBeforeBackward makes the next training runs call f with the loss once
// the forward pass has computed it and before any op of the backward pass
// runs (Lightning's on_before_backward), on the goroutine running the graph;
// nil calls nothing. An error from f ends the run without a backward pass
// and is returned, wrapped. The forward ops the loss does not need (logged
// metrics) may run after f. On the TapeMachine path (Engine.Tape) the graph
// runs whole: f is called after it, before its gradients reach the store.
// Strategies pass TrainOptions.BeforeBackward before each training run.
func (e *Engine) SetBeforeBackward(f func(loss float64) error) { e.beforeBackward = f }

// SetRunKey sets the key the next training runs draw their in-graph
// randomness from (see module.Step.RunKey); strategies pass
// TrainOptions.Key.
func (e *Engine) SetRunKey(k uint64) { e.runKey = k }

// Compile builds the graph of mode for batches like b, once, without running
// it. Replicas in one process build one at a time (Gorgonia's graph building
// is not safe for concurrent use) but must run together when their graphs
// reduce across replicas (SyncBatchNorm): strategies compile first.
func (e *Engine) Compile(mode module.Mode, b *data.Batch) error {
	_, err := e.graph(mode, b)
	return err
}

// Run executes the graph of mode for batch b. For Train it runs forward and
// backward and writes scale×gradient into the store's gradient buffer, or adds
// it there when accumulate is true.
func (e *Engine) Run(ctx context.Context, mode module.Mode, b *data.Batch, accumulate bool, scale float64) (res Result, err error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	c, err := e.graph(mode, b)
	if err != nil {
		return Result{}, err
	}
	if err := e.bind(c, b); err != nil {
		return Result{}, err
	}
	if e.sync != nil {
		e.sync.SetRun(ctx, scale) // ops reduce statistics under this run's context and weight
	}
	defer func() {
		if r := recover(); r != nil {
			// A panic in the user's code (an op of their own) keeps their
			// frames; one inside fulgur's or Gorgonia's ops is a bug in
			// that op: an error without a trace, the stack on request.
			if pe := panics.Recovered(r); pe.HasUserFrame() {
				err = fmt.Errorf("%s step: %w", mode, pe)
				return
			}
			err = fmt.Errorf("%s step: an op failed: %v (set FULGUR_TRACE=1 for the stack, and report it)", mode, r)
			if os.Getenv("FULGUR_TRACE") != "" {
				err = fmt.Errorf("%w\n%s", err, debug.Stack())
			}
		}
	}()
	if c.hooks != nil {
		c.hooks.start(ctx)
		defer func() {
			if ferr := c.hooks.finish(); ferr != nil && err == nil {
				err = fmt.Errorf("%s step: %w", mode, ferr)
			}
		}()
	}
	if c.exec != nil {
		// Gradients whose op can write into the store do so when they are
		// wanted as they are (no accumulation, no scaling): no copy after.
		direct := !accumulate && scale == 1
		c.run = gatherRun{e: e, accumulate: accumulate, direct: direct, scale: scale, beforeBackward: e.beforeBackward, commInFlight: e.commInFlight}
		err := c.exec.run(direct, c)
		c.run = gatherRun{}
		if err != nil {
			return Result{}, fmt.Errorf("%s step: %w", mode, err)
		}
	} else {
		if err := c.vm.RunAll(); err != nil {
			c.vm.Reset()
			return Result{}, fmt.Errorf("%s step: run graph: %w", mode, err)
		}
		c.vm.Reset()
	}
	if mode == module.Train {
		res.Loss = scalar(c.valueOf(c.loss, c.lossVal))
		if c.exec == nil && e.beforeBackward != nil {
			// The TapeMachine cannot stop between the passes: the hook
			// comes after the run, before the gradients are gathered.
			if err := e.beforeBackward(res.Loss); err != nil {
				return Result{}, fmt.Errorf("%s step: %w", mode, beforeBackwardErr(err))
			}
		}
		for i := range c.grads {
			if c.hooks == nil && (c.exec == nil || c.grads[i].step < 0) {
				e.gatherGrad(c, i, accumulate, scale, false)
			}
		}
	}
	for i, l := range c.step.Logs() {
		if l.Counts != nil {
			c.metrics[i].Counts = countsOf(c.metrics[i].Counts, c.valueOf(l.Node, l.Value))
			c.metrics[i].Weight = float64(realRows(b))
			continue
		}
		c.metrics[i].Value = scalar(c.valueOf(l.Node, l.Value))
		c.metrics[i].Weight = float64(realRows(b))
	}
	res.Metrics = c.metrics
	if c.out != nil {
		res.Output, err = c.output()
		if err != nil {
			return Result{}, fmt.Errorf("%s step: %w", mode, err)
		}
	}
	return res, nil
}

// output is the run's PredictStep output as a tensor: a scalar's value in
// a 0-d tensor of the graph's dtype, which this graph's runs reuse.
func (c *compiled) output() (*tensor.Dense, error) {
	switch v := c.valueOf(c.out, c.outVal).(type) {
	case *tensor.Dense:
		return v, nil
	case *G.F32:
		if c.scalar == nil {
			c.scalar = tensor.New(tensor.FromScalar(float32(0)))
		}
		c.scalar.Set(0, float32(*v))
		return c.scalar, nil
	case *G.F64:
		if c.scalar == nil {
			c.scalar = tensor.New(tensor.FromScalar(float64(0)))
		}
		c.scalar.Set(0, float64(*v))
		return c.scalar, nil
	case nil:
		return nil, fmt.Errorf("PredictStep's output node %q has no value after the run (report it)", c.out.Name())
	default:
		return nil, fmt.Errorf("PredictStep's output node %q holds a %T, not a tensor: return a float32 or float64 node", c.out.Name(), v)
	}
}

func realRows(b *data.Batch) int {
	n := b.Size
	for _, p := range b.Pad {
		if p {
			n--
		}
	}
	return n
}

// scalar reads a one-element value without boxing it (Value.Data returns an
// interface, which allocates on every call).
func scalar(v G.Value) float64 {
	switch d := v.(type) {
	case nil:
		return math.NaN()
	case *G.F32:
		return float64(*d)
	case *G.F64:
		return float64(*d)
	case *tensor.Dense:
		if d.Shape().TotalSize() == 1 {
			switch d.Dtype() {
			case tensor.Float32:
				return float64(d.Float32s()[0])
			case tensor.Float64:
				return d.Float64s()[0]
			}
		}
		return math.NaN()
	}
	switch d := v.Data().(type) {
	case float32:
		return float64(d)
	case float64:
		return d
	case []float32:
		if len(d) == 1 {
			return float64(d[0])
		}
	case []float64:
		if len(d) == 1 {
			return d[0]
		}
	}
	return math.NaN()
}

// countsOf copies a count vector's elements into buf (reused) as float64.
func countsOf(buf []float64, v G.Value) []float64 {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return buf[:0]
	}
	buf = buf[:0]
	switch d.Dtype() {
	case tensor.Float32:
		for _, x := range d.Float32s() {
			buf = append(buf, float64(x))
		}
	case tensor.Float64:
		buf = append(buf, d.Float64s()...)
	}
	return buf
}

// valueOf is n's value after a run: from the executor's table, or the value
// a read op captured on the TapeMachine path.
func (c *compiled) valueOf(n *G.Node, read G.Value) G.Value {
	if c.exec != nil {
		return c.exec.value(n)
	}
	if read != nil {
		return read
	}
	return n.Value()
}

// stepDone gathers the gradients that executor step i made final, during
// the run.
func (c *compiled) stepDone(i int) {
	r := c.run
	if r.e == nil {
		return
	}
	for _, gi := range c.readyAfter[i] {
		r.e.gatherGrad(c, gi, r.accumulate, r.scale, r.direct)
	}
}

// commInFlight reports whether the run's strategy has communication in
// flight (WithCommInFlight).
func (c *compiled) commInFlight() bool {
	f := c.run.commInFlight
	return f != nil && f()
}

// forwardDone calls the run's hook before the backward pass with the loss,
// which the forward steps have computed.
func (c *compiled) forwardDone() error {
	f := c.run.beforeBackward
	if f == nil {
		return nil
	}
	if err := f(scalar(c.exec.value(c.loss))); err != nil {
		return beforeBackwardErr(err)
	}
	return nil
}

func beforeBackwardErr(err error) error { return fmt.Errorf("before the backward pass: %w", err) }

// gatherGrad writes (or adds) scale×gradient i into the store, unless the
// executor wrote it there itself on this direct run, and reports it ready.
func (e *Engine) gatherGrad(c *compiled, i int, accumulate bool, scale float64, direct bool) {
	gb := &c.grads[i]
	if !(direct && gb.direct && c.exec.wroteDirect(gb.node)) {
		e.combineGrad(gb, c.valueOf(gb.node, nil), accumulate, scale)
	}
	if e.ready != nil {
		e.ready(gb.offset, gb.n)
	}
}

func (e *Engine) combineGrad(gb *gradBinding, v G.Value, accumulate bool, scale float64) {
	s := e.store
	if s.Dtype() == tensor.Float32 {
		dst := s.Grad32()[gb.offset : gb.offset+gb.n]
		if d, ok := v.(*tensor.Dense); ok && d.Dtype() == tensor.Float32 {
			Combine(dst, d.Float32s()[:gb.n], float32(scale), accumulate)
			return
		}
		if d, ok := v.(*G.F32); ok {
			Combine(dst, []float32{float32(*d)}, float32(scale), accumulate)
			return
		}
	} else {
		dst := s.Grad64()[gb.offset : gb.offset+gb.n]
		if d, ok := v.(*tensor.Dense); ok && d.Dtype() == tensor.Float64 {
			Combine(dst, d.Float64s()[:gb.n], scale, accumulate)
			return
		}
		if d, ok := v.(*G.F64); ok {
			Combine(dst, []float64{float64(*d)}, scale, accumulate)
			return
		}
	}
	panic(fmt.Sprintf("gradient of %q is a %T of dtype %v, the store holds %v", gb.name, v, v.Dtype(), s.Dtype()))
}

// Combine writes (or adds, when accumulate) scale·src into dst: what a
// training run does with each gradient it reports, and what a strategy
// that takes gradients over (sharded, fsdp) does with the ones it keeps.
func Combine[T float32 | float64](dst, src []T, scale T, accumulate bool) {
	switch {
	case accumulate:
		for i, v := range src {
			dst[i] += v * scale
		}
	case scale == 1:
		copy(dst, src)
	default:
		for i, v := range src {
			dst[i] = v * scale
		}
	}
}

// bindDirectGrads lets the executor write each gradient straight into its
// slice of the store's gradient buffer where the op producing it can (it
// implements G.UsePreallocDoer), saving the copy in gatherGrad. A node
// that is the gradient of two parameters (Gorgonia merges identical
// expressions) is bound to neither, and so is one that later steps read
// (a BatchNorm's scale gradient orders the steps after it): the gradient is
// reported ready, and may be reduced in place, as soon as its step has run.
func (c *compiled) bindDirectGrads(s *module.Store) {
	uses := map[*G.Node]int{}
	for _, gb := range c.grads {
		uses[gb.node]++
	}
	for i := range c.grads {
		gb := &c.grads[i]
		t, err := s.GradTensor(gb.name)
		if err != nil || uses[gb.node] > 1 || c.exec.read(gb.node) {
			continue
		}
		gb.direct = c.exec.setDirect(gb.node, t)
	}
}

func (e *Engine) bind(c *compiled, b *data.Batch) error {
	if b.Data64 != nil {
		return e.bind64(c, b)
	}
	if len(b.Data) != len(c.inputs) {
		return fmt.Errorf("batch has %d fields, the graph expects %d (%v)", len(b.Data), len(c.inputs), fieldNames(c.fields))
	}
	for i, in := range c.inputs {
		src := b.Data[i]
		want := in.size * b.Size
		if len(src) != want {
			return fmt.Errorf("batch field %q holds %d values for %d rows, the graph input %q expects %d (shape %v per row)", in.name, len(src), b.Size, in.name, want, c.fields[i].Shape)
		}
		if in.t32 != nil {
			ops.Copy(in.t32, src)
		} else {
			for j, v := range src {
				in.t64[j] = float64(v)
			}
		}
	}
	return nil
}

// bind64 binds a batch of float64 values (Data64), which only a float64
// store takes: rounding them to float32 would change them.
func (e *Engine) bind64(c *compiled, b *data.Batch) error {
	if b.Data != nil {
		return errors.New("batch has both Data and Data64: set one")
	}
	if e.store.Dtype() != tensor.Float64 {
		return fmt.Errorf("batch holds float64 values (Data64) but the model is %v: give it float32 values in Data", e.store.Dtype())
	}
	if len(b.Data64) != len(c.inputs) {
		return fmt.Errorf("batch has %d fields, the graph expects %d (%v)", len(b.Data64), len(c.inputs), fieldNames(c.fields))
	}
	for i, in := range c.inputs {
		src := b.Data64[i]
		if want := in.size * b.Size; len(src) != want {
			return fmt.Errorf("batch field %q holds %d values for %d rows, the graph input %q expects %d (shape %v per row)", in.name, len(src), b.Size, in.name, want, c.fields[i].Shape)
		}
		ops.Copy(in.t64, src)
	}
	return nil
}

func fieldNames(fs []data.Field) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name
	}
	return out
}

func (e *Engine) graph(mode module.Mode, b *data.Batch) (*compiled, error) {
	if b.Size <= 0 {
		return nil, fmt.Errorf("%s batch has %d rows: a batch needs at least one", mode, b.Size)
	}
	fields, sub, err := fieldsOf(e.fields, b.Fields)
	if err != nil {
		return nil, err
	}
	k := key{mode: mode, batch: b.Size}
	if sub {
		k.fields = strings.Join(fieldNames(fields), ",")
	}
	if c, ok := e.graphs[k]; ok {
		return c, nil
	}
	c, err := e.compile(mode, b.Size, fields)
	if err != nil {
		return nil, err
	}
	e.graphs[k] = c
	return c, nil
}

// fieldsOf checks a batch's fields against those the engine was set up
// for: the same, or some of them with the same shapes, in the same order
// (sub), as a predict set without the labels training read; the step
// reading a field the batch lacks says so when the graph is built.
func fieldsOf(want, got []data.Field) (fields []data.Field, sub bool, err error) {
	if len(got) == len(want) {
		for i := range want {
			if want[i].Name != got[i].Name || !slices.Equal(want[i].Shape, got[i].Shape) {
				return nil, false, fmt.Errorf("batch field %d is %q with shape %v, the model was set up for %q with shape %v", i, got[i].Name, got[i].Shape, want[i].Name, want[i].Shape)
			}
		}
		return want, false, nil
	}
	j := 0
	for _, g := range got {
		for j < len(want) && want[j].Name != g.Name {
			j++
		}
		if j == len(want) || !slices.Equal(want[j].Shape, g.Shape) {
			return nil, false, fmt.Errorf("batch has fields %v, the model was set up for %v: give the same fields, or some of them (leaving out labels a step does not read), with the same shapes and order", got, want)
		}
		j++
	}
	return got, true, nil
}

// Build runs the module's step method for mode on a fresh graph, turning
// panics into errors that name the step.
func Build(m module.Module, store *module.Store, mode module.Mode, batch int, fields []data.Field, seed uint64) (s *module.Step, loss *G.Node, err error) {
	return BuildWith(m, store, mode, batch, fields, seed, nil, nil)
}

// BuildWith is Build with the step's StatSync (nil: none)
// and run key (nil: none).
func BuildWith(m module.Module, store *module.Store, mode module.Mode, batch int, fields []data.Field, seed uint64, sync *module.StatSync, runKey *uint64) (s *module.Step, loss *G.Node, err error) {
	return build(m, store, mode, batch, fields, seed, sync, runKey, nil)
}

// build is BuildWith whose errors' advice names settings by settingName
// (WithSettingName's).
func build(m module.Module, store *module.Store, mode module.Mode, batch int, fields []data.Field, seed uint64, sync *module.StatSync, runKey *uint64, settingName func(string) string) (s *module.Step, loss *G.Node, err error) {
	ins := make([]module.StepInput, len(fields))
	for i, f := range fields {
		ins[i] = module.StepInput{Name: f.Name, Shape: f.Shape}
	}
	g := G.NewGraph()
	s = module.NewStep(g, mode, store, batch, ins, seed)
	s.SetStatSync(sync)
	s.SetRunKey(runKey)
	defer func() {
		if r := recover(); r != nil {
			// The step is the user's code: keep the value and their frames.
			err = fmt.Errorf("%s: %w", stepName(mode), withHint(panics.Recovered(r), store.Dtype(), settingName))
		}
	}()
	switch mode {
	case module.Train:
		loss, err = m.TrainingStep(s)
		if err == nil && loss == nil {
			err = errors.New("returned a nil loss")
		}
		if err == nil && loss.Shape().TotalSize() != 1 {
			err = fmt.Errorf("returned a loss of shape %v: return a scalar (take the mean)", loss.Shape())
		}
	case module.Validate:
		v, ok := m.(module.Validator)
		if !ok {
			return nil, nil, errors.New("the module has no ValidationStep")
		}
		err = v.ValidationStep(s)
	case module.Test:
		v, ok := m.(module.Tester)
		if !ok {
			return nil, nil, errors.New("the module has no TestStep")
		}
		err = v.TestStep(s)
	case module.Predict:
		v, ok := m.(module.Predictor)
		if !ok {
			return nil, nil, errors.New("the module has no PredictStep")
		}
		var out *G.Node
		out, err = v.PredictStep(s)
		if err == nil && out == nil {
			err = errors.New("returned a nil output")
		}
		s.SetOutput(out)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", stepName(mode), withHint(err, store.Dtype(), settingName))
	}
	return s, loss, nil
}

func stepName(m module.Mode) string {
	switch m {
	case module.Train:
		return "TrainingStep"
	case module.Validate:
		return "ValidationStep"
	case module.Test:
		return "TestStep"
	}
	return "PredictStep"
}

func (e *Engine) compile(mode module.Mode, batch int, fields []data.Field) (c *compiled, err error) {
	s, loss, err := build(e.mod, e.store, mode, batch, fields, e.seed, e.sync, &e.runKey, e.settingName)
	if err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: compile graph: %v", stepName(mode), r)
		}
	}()
	if err := problemsError(s.Graph(), vetForward(s, loss)); err != nil {
		return nil, fmt.Errorf("%s: %w", stepName(mode), err)
	}
	c = &compiled{g: s.Graph(), step: s, loss: loss, fields: fields}
	for _, f := range fields {
		n := s.Inputs()[f.Name]
		size := 1
		for _, d := range f.Shape {
			size *= d
		}
		in := input{name: f.Name, size: size}
		shape := append([]int{batch}, f.Shape...)
		var t *tensor.Dense
		if e.store.Dtype() == tensor.Float32 {
			in.t32 = make([]float32, batch*size)
			t = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(in.t32))
		} else {
			in.t64 = make([]float64, batch*size)
			t = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(in.t64))
		}
		if err := G.Let(n, t); err != nil {
			return nil, fmt.Errorf("bind input %q: %w", f.Name, err)
		}
		c.inputs = append(c.inputs, in)
	}
	if mode == module.Train {
		G.Read(loss, &c.lossVal)
		names := s.UsedParams()
		if len(names) == 0 {
			return nil, errors.New("TrainingStep: the loss uses no parameter: nothing to train")
		}
		nodes := make([]*G.Node, len(names))
		for i, name := range names {
			nodes[i], _ = s.Node(name)
		}
		grads, gerr := G.Grad(loss, nodes...)
		if gerr != nil {
			return nil, fmt.Errorf("TrainingStep: differentiate the loss: %w", gerr)
		}
		for i, name := range names {
			ent, _ := e.store.Lookup(name)
			c.grads = append(c.grads, gradBinding{name: name, node: grads[i], offset: ent.Offset, n: ent.Len})
		}

	}
	if out := s.Output(); out != nil {
		c.out = out
		G.Read(out, &c.outVal)
	}
	for _, l := range s.Logs() {
		c.metrics = append(c.metrics, module.Metric{Name: l.Name, Spec: l.Spec, Derive: l.Counts})
	}
	if e.shard != nil {
		return e.compileSharded(c, mode)
	}
	if e.Tape {
		if err := problemsError(c.g, vetTape(c.g)); err != nil {
			return nil, fmt.Errorf("%s: %w", stepName(mode), err)
		}
		c.vm = G.NewTapeMachine(c.g)
	} else if c.exec, err = newExecutor(c.g); err != nil {
		return nil, fmt.Errorf("%s: %w", stepName(mode), err)
	} else {
		if mode == module.Train {
			c.exec.forwardFirst(loss)
		}
		c.bindDirectGrads(e.store)
		c.scheduleGathers()
	}
	return c, nil
}

// scheduleGathers sets, for each gradient, the executor step after which it
// is final: the step computing it.
func (c *compiled) scheduleGathers() {
	c.readyAfter = make([][]int, len(c.exec.steps))
	for i := range c.grads {
		gb := &c.grads[i]
		gb.step = c.exec.stepOf(gb.node)
		if gb.step >= 0 {
			c.readyAfter[gb.step] = append(c.readyAfter[gb.step], i)
			c.exec.notifyAfter(gb.step)
		}
	}
}
