package module

import (
	"fmt"
	"sort"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Mode says what a graph is built for.
type Mode int

const (
	Train Mode = iota
	Validate
	Test
	Predict
)

func (m Mode) String() string {
	switch m {
	case Train:
		return "train"
	case Validate:
		return "validate"
	case Test:
		return "test"
	case Predict:
		return "predict"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Reduce says how a logged value is combined over the batches of an epoch
// and across ranks.
type Reduce int

const (
	Mean Reduce = iota // weighted by batch size
	Sum                // the batches' values added, unweighted (Lightning's reduce_fx="sum")
	Max                // the largest of the batches' values (reduce_fx="max")
	Min                // the smallest (reduce_fx="min")
)

// LogSpec is a logged value's resolved options.
type LogSpec struct {
	OnStep   bool   // record every (LogEveryNSteps) step
	OnEpoch  bool   // record the epoch aggregate
	ProgBar  bool   // show in the progress bar
	SyncDist bool   // reduce across ranks before recording
	Reduce   Reduce // how steps and ranks are combined
}

// LogOption changes how a value passed to Step.Log is recorded.
type LogOption func(*LogSpec)

// OnStep records (or not) the value at each logged step. Only training
// steps have per-step records: an evaluation loop (validation, test)
// records one value, the mean of its batches, named name_epoch when
// OnEpoch is set too (the trainer warns once per name).
func OnStep(on bool) LogOption { return func(s *LogSpec) { s.OnStep = on } }

// OnEpoch records (or not) the epoch aggregate of the value.
func OnEpoch(on bool) LogOption { return func(s *LogSpec) { s.OnEpoch = on } }

// ProgBar shows the value in the progress bar.
func ProgBar() LogOption { return func(s *LogSpec) { s.ProgBar = true } }

// SyncDist reduces the value across ranks (as Reduce says) before recording it.
func SyncDist() LogOption { return func(s *LogSpec) { s.SyncDist = true } }

// ReduceBy sets how the value is combined over steps and ranks (default Mean).
func ReduceBy(r Reduce) LogOption { return func(s *LogSpec) { s.Reduce = r } }

// Logged is one value a step asked to log; its Value is filled each time the
// graph runs.
type Logged struct {
	Name  string
	Spec  LogSpec
	Node  *G.Node // the scalar node logged, or a count metric's count vector
	Value G.Value // set by the read op at run time
	// Counts is the metric that derives values from Node's counts, for a
	// value logged with LogCounts; nil for a scalar.
	Counts CountMetric
	read   *G.Node
}

// CountMetric is a metric whose state is a vector of counts (correct and
// total rows, a confusion matrix): the trainer sums the vectors over the
// batches of an epoch and across every rank, and derives the values once,
// from the summed counts. A mean of per-batch or per-rank values would be
// wrong for precision, recall and F1 whenever batches or ranks hold
// different numbers of each class.
type CountMetric interface {
	// Values puts into out the values derived from counts, keyed by name
	// and its suffixes ("val" → "val_acc", "val_f1_class3").
	Values(name string, counts []float64, out map[string]float64)
}

// Float reads the last value as float64.
func (l *Logged) Float() float64 {
	switch v := l.Value.Data().(type) {
	case float32:
		return float64(v)
	case float64:
		return v
	case []float32:
		if len(v) == 1 {
			return float64(v[0])
		}
	case []float64:
		if len(v) == 1 {
			return v[0]
		}
	}
	return 0
}

// Step is handed to a module's step methods: it gives the graph to build in,
// the batch's symbolic inputs and the parameters bound to this replica's
// store, and collects the values the module logs.
//
// Param, Buffer and Input panic on a name that does not exist; the trainer
// turns such panics during graph building into errors that name the step.
type Step struct {
	g         *G.ExprGraph
	mode      Mode
	store     *Store
	batchSize int
	seed      uint64

	inputs     map[string]*G.Node
	nodes      map[string]*G.Node
	paramOrder []string
	logs       []*Logged
	output     *G.Node
	extras     map[string]any
	runKey     *uint64
	statSync   *StatSync
	layerIO    map[string][2][]int // nil unless RecordLayerIO was called
}

// RecordLayerIO makes the step keep the shapes layers report through
// LayerIO (a model summary's graph, built once for an example batch).
func (s *Step) RecordLayerIO() { s.layerIO = map[string][2][]int{} }

// Summarizing reports that the graph is only built to learn layer shapes
// for a model summary and never runs: a TrainingStep that counts its calls
// or keeps state can leave this one out.
func (s *Step) Summarizing() bool { return s.layerIO != nil }

// LayerIO records the input and output of the layer named name (the name
// it gave Builder.Layer), for summaries; a no-op unless RecordLayerIO was
// called. Layers call it at the end of Forward.
func (s *Step) LayerIO(name string, in, out *G.Node) {
	if s.layerIO == nil || in == nil || out == nil {
		return
	}
	if _, seen := s.layerIO[name]; !seen { // a layer applied twice: its first use
		s.layerIO[name] = [2][]int{append([]int(nil), in.Shape()...), append([]int(nil), out.Shape()...)}
	}
}

// LayerShapes fills the input and output shapes of layers from what the
// step recorded.
func (s *Step) LayerShapes(layers []LayerInfo) {
	for i := range layers {
		if io, ok := s.layerIO[layers[i].Name]; ok {
			layers[i].InShape, layers[i].OutShape = io[0], io[1]
		}
	}
}

// StepInput describes one symbolic batch input.
type StepInput struct {
	Name  string
	Shape []int // per example, without the batch dimension
}

// NewStep makes a Step that builds into g. Strategies and tests call it;
// modules only receive Steps. Input nodes get shape [batchSize, shape...].
func NewStep(g *G.ExprGraph, mode Mode, store *Store, batchSize int, inputs []StepInput, seed uint64) *Step {
	s := &Step{g: g, mode: mode, store: store, batchSize: batchSize, seed: seed,
		inputs: map[string]*G.Node{}, nodes: map[string]*G.Node{}, extras: map[string]any{}}
	for _, in := range inputs {
		shape := append([]int{batchSize}, in.Shape...)
		s.inputs[in.Name] = G.NewTensor(g, store.Dtype(), len(shape), G.WithShape(shape...), G.WithName("input."+in.Name))
	}
	return s
}

// Graph is the graph being built.
func (s *Step) Graph() *G.ExprGraph { return s.g }

// Mode is what the graph is for.
func (s *Step) Mode() Mode { return s.mode }

// Training reports whether the graph is a training graph (dropout active,
// BatchNorm using batch statistics and updating running ones).
func (s *Step) Training() bool { return s.mode == Train }

// Dtype is the dtype of the graph and its parameters.
func (s *Step) Dtype() tensor.Dtype { return s.store.Dtype() }

// BatchSize is the number of rows of every input node.
func (s *Step) BatchSize() int { return s.batchSize }

// Seed is a per-replica seed for randomness inside the graph (dropout).
func (s *Step) Seed() uint64 { return s.seed }

// Store is the replica's parameter store.
func (s *Step) Store() *Store { return s.store }

// Input returns the symbolic input for the batch field name.
func (s *Step) Input(name string) *G.Node {
	n, ok := s.inputs[name]
	if !ok {
		names := make([]string, 0, len(s.inputs))
		for k := range s.inputs {
			names = append(names, k)
		}
		sort.Strings(names)
		panic(fmt.Errorf("step input %q does not exist: the batch has fields %v", name, names))
	}
	return n
}

// Inputs returns every input node by field name.
func (s *Step) Inputs() map[string]*G.Node { return s.inputs }

// Param returns the node of a learnable parameter, bound to the store's
// memory. Asking twice returns the same node.
func (s *Step) Param(name string) *G.Node { return s.tensorNode(name, false) }

// Buffer returns the node of a buffer, bound to the store's memory.
func (s *Step) Buffer(name string) *G.Node { return s.tensorNode(name, true) }

func (s *Step) tensorNode(name string, buffer bool) *G.Node {
	if n, ok := s.nodes[name]; ok {
		return n
	}
	e, ok := s.store.Lookup(name)
	if !ok {
		panic(fmt.Errorf("tensor %q was not declared in Configure: declare it with Builder.Param or Builder.Buffer", name))
	}
	if e.Buffer != buffer {
		kind := map[bool]string{false: "Param", true: "Buffer"}
		panic(fmt.Errorf("tensor %q was declared as a %s: ask for it with Step.%s", name, kind[e.Buffer], kind[e.Buffer]))
	}
	t := s.store.view(e, false)
	var n *G.Node
	if len(e.Shape) == 0 {
		n = G.NewScalar(s.g, s.store.Dtype(), G.WithName(name), G.WithValue(t))
	} else {
		n = G.NewTensor(s.g, s.store.Dtype(), len(e.Shape), G.WithShape(e.Shape...), G.WithName(name), G.WithValue(t))
	}
	s.nodes[name] = n
	if !buffer {
		s.paramOrder = append(s.paramOrder, name)
	}
	return n
}

// BufferTensor returns the store view of a buffer, for ops that update it in
// place (BatchNorm running statistics).
func (s *Step) BufferTensor(name string) *tensor.Dense {
	s.tensorNode(name, true)
	e, _ := s.store.Lookup(name)
	return s.store.view(e, false)
}

// UsedParams lists the learnable parameters the graph uses, in first-use order.
func (s *Step) UsedParams() []string { return s.paramOrder }

// Node returns the node bound to a parameter or buffer already used in the graph.
func (s *Step) Node(name string) (*G.Node, bool) {
	n, ok := s.nodes[name]
	return n, ok
}

// Log records a scalar node's value under name each time the graph runs.
// Defaults follow Lightning: in training, on step and not on epoch; in
// validation and test, on epoch and not on step. ReservedMetricName says
// which names are refused.
func (s *Step) Log(name string, n *G.Node, opts ...LogOption) {
	if n == nil {
		panic(fmt.Errorf("Log(%q): the node is nil", name))
	}
	if !n.IsScalar() && n.Shape().TotalSize() != 1 {
		panic(fmt.Errorf("Log(%q): the node has shape %v: log a scalar (reduce it first)", name, n.Shape()))
	}
	s.log(name, n, nil, opts)
}

// LogCounts records a count metric: counts is a vector node holding this
// batch's counts (m's layout) and m derives the logged values from counts
// summed over the epoch's batches and, always, across ranks (SyncDist is
// implied: a metric is computed from the job's counts). On-step values, where
// asked for, are derived from the batch's own counts. Defaults are Log's.
func (s *Step) LogCounts(name string, counts *G.Node, m CountMetric, opts ...LogOption) {
	if counts == nil {
		panic(fmt.Errorf("LogCounts(%q): the counts node is nil", name))
	}
	if m == nil {
		panic(fmt.Errorf("LogCounts(%q): the metric is nil", name))
	}
	if counts.Dims() != 1 {
		panic(fmt.Errorf("LogCounts(%q): the counts node has shape %v: want a vector", name, counts.Shape()))
	}
	s.log(name, counts, m, append(opts, SyncDist()))
}

func (s *Step) log(name string, n *G.Node, m CountMetric, opts []LogOption) {
	if msg := ReservedMetricName(name); msg != "" {
		panic(fmt.Errorf("Log(%q): %s", name, msg))
	}
	for _, l := range s.logs {
		if l.Name == name {
			panic(fmt.Errorf("Log(%q) is called twice in one step: use distinct names", name))
		}
	}
	spec := LogSpec{OnStep: s.mode == Train, OnEpoch: s.mode != Train}
	for _, o := range opts {
		o(&spec)
	}
	if m != nil {
		spec.Reduce = Sum
	}
	l := &Logged{Name: name, Spec: spec, Node: n, Counts: m}
	l.read = G.Read(n, &l.Value)
	s.logs = append(s.logs, l)
}

// Logs lists the values logged so far.
func (s *Step) Logs() []*Logged { return s.logs }

// SetOutput records the node a predict step returns (the trainer does this).
func (s *Step) SetOutput(n *G.Node) { s.output = n }

// Output is the node set by SetOutput.
func (s *Step) Output() *G.Node { return s.output }

// Extra returns a per-step value that layers can share (a custom executor's
// state, for instance), keyed by name.
func (s *Step) Extra(key string) (any, bool) {
	v, ok := s.extras[key]
	return v, ok
}

// SetExtra stores a per-step value under key.
func (s *Step) SetExtra(key string, v any) { s.extras[key] = v }

// StatSync is how layers reduce batch statistics across the job's replicas
// (SyncBatchNorm); nil when the step's replica has no one to sync with.
func (s *Step) StatSync() *StatSync { return s.statSync }

// SetStatSync gives the step's layers ss (the engine does this before the
// module builds the step).
func (s *Step) SetStatSync(ss *StatSync) { s.statSync = ss }

// RunKey points at the key of the run in progress: the engine sets it before
// each run from the trainer's position (epoch and batch), so randomness drawn
// inside the graph (dropout masks) can be a function of (Seed, key) alone and
// a resumed run draws what the uninterrupted one drew. nil outside an engine.
func (s *Step) RunKey() *uint64 { return s.runKey }

// SetRunKey binds the run key (the engine does this before the module
// builds the step).
func (s *Step) SetRunKey(k *uint64) { s.runKey = k }

// Metric is one logged value after a graph ran, with the weight (rows in
// the batch) used when averaging over batches.
type Metric struct {
	Name   string
	Spec   LogSpec
	Value  float64
	Weight float64
	// Counts is a count metric's counts for this batch (Derive says how to
	// turn summed counts into values); nil for a scalar.
	Counts []float64
	Derive CountMetric
}

// Values calls f with each value m stands for: its Value under its Name for
// a scalar, the values derived from its Counts (in name order) for a count
// metric.
func (m *Metric) Values(f func(name string, v float64)) {
	if m.Derive == nil {
		f(m.Name, m.Value)
		return
	}
	out := map[string]float64{}
	m.Derive.Values(m.Name, m.Counts, out)
	names := make([]string, 0, len(out))
	for k := range out {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		f(k, out[k])
	}
}

// ReservedMetricName says why name cannot be a logged metric's name ("" when
// it can): every logger writes a row's global step as "step" (metrics.csv's
// column, metrics.jsonl's key, TensorBoard's x axis) and the trainer the
// epoch as "epoch", so a metric of either name would replace them in some
// loggers and vanish in others; a metric needs a name. "evaluation" marks
// the row a Validate or Test logs (trainer.EvaluationColumn), so a metric
// of that name would make its rows look like one.
func ReservedMetricName(name string) string {
	switch name {
	case "":
		return "a metric needs a name"
	case "evaluation":
		return fmt.Sprintf("the name %q is the loggers' mark of the row a Validate or Test logs: name the metric otherwise, such as %q", name, "my_"+name)
	case "step", "epoch":
		return fmt.Sprintf("the name %q is the loggers' own column of each row (the global step and the epoch): name the metric otherwise, such as %q", name, "my_"+name)
	}
	return ""
}
