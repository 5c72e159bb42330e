package trainer

import (
	"context"
	"errors"
	"iter"
	"maps"
	"slices"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
)

// State is what a hook sees of the run: a copy made for each callback, so
// that nothing a callback does to it reaches the trainer. Metrics and
// Weights are read-only views of the trainer's values and Layers returns a
// copy; all are valid for the duration of the hook call only (copy what
// must be kept). A callback changes the run only through the methods below
// (LogMetrics, SaveCheckpoint, Warn) and by returning errors or Stop.
type State struct {
	Stage        string // "fit", "validate", "test" or "predict"
	Epoch        int    // 0-based current epoch
	GlobalStep   int    // optimizer steps taken
	BatchIdx     int    // the training batch within the epoch (in the per-batch hooks of an evaluation loop, its batch)
	Rank         int
	WorldSize    int
	IsGlobalZero bool
	RootDir      string
	// LogDir is the run's directory (Config.LogDir; by default a new
	// RootDir/lightning_logs/version_N per Fit, the same on every rank):
	// callbacks given no path of their own write there. In Validate, Test
	// and Predict, the Fit's before them, else Config.LogDir ("" when
	// neither is).
	LogDir    string
	MaxEpochs int
	MaxSteps  int
	LR        float64
	// Metrics holds the latest value of every logged metric (Lightning's
	// callback_metrics).
	Metrics Metrics
	// Weights is the model's parameters and buffers (empty under fsdp,
	// where no process holds them all: see Weights).
	Weights Weights
	// ResumedFrom is the checkpoint this Fit resumed from (Lightning's
	// trainer.ckpt_path), "" when it started afresh: ModelCheckpoint never
	// deletes it.
	ResumedFrom string
	// FastDevRun is true for smoke-test runs (no checkpoints are written).
	FastDevRun bool
	// SanityChecking is true during Fit's sanity check (Lightning's
	// trainer.sanity_checking), whose validation batches run before
	// training, on the initial weights: the validation hooks run then,
	// with its metrics, which reach no logger. A callback that acts on a
	// Fit's validation metrics (ModelCheckpoint, EarlyStopping) returns
	// early while it is set.
	SanityChecking bool
	// HasValidation is true in a Fit given a validation loader: validation
	// runs at the end of the epochs CheckValEveryNEpoch selects (and at
	// ValCheckInterval), so a callback waiting for its metrics acts there.
	HasValidation bool
	// NumTrainBatches is the number of training batches in this epoch
	// (the first epoch's from OnTrainStart on; 0 before).
	NumTrainBatches int
	// Loss is the training loss of the last batch.
	Loss float64
	// GradNorm is the global L2 norm of the last optimizer step's reduced
	// gradients before clipping, computed when a BeforeOptimizerStepHook
	// or Config.LogGradNorm asks for it (0 otherwise).
	GradNorm float64
	// Optimizer is the optimizer's registry name ("adam", "sgd", ...).
	Optimizer string
	// LogEveryNSteps is the trainer's step-logging interval.
	LogEveryNSteps int

	layers []module.LayerInfo
	save   func(ctx context.Context, path string) error
	saving func(path string) bool
	log    func(m map[string]float64) error
	warn   func(msg string)
	rank0  func(ctx context.Context, v float64) (float64, error)
}

// Layers lists the module's layers for summaries (a copy).
func (s *State) Layers() []module.LayerInfo {
	out := make([]module.LayerInfo, len(s.layers))
	for i, l := range s.layers {
		l.InShape, l.OutShape = slices.Clone(l.InShape), slices.Clone(l.OutShape)
		out[i] = l
	}
	return out
}

// runState is where the run stands; the trainer alone writes it, and hooks
// see a State made from it (view). Its scalars are State's; Metrics, Store
// and Layers (the live values) shadow State's views.
type runState struct {
	State
	Metrics map[string]float64
	// stepNewer holds the bare names of the metrics logged per step and
	// per epoch whose step value was logged after their epoch value (a
	// step of the epoch after), for Metrics.Get.
	stepNewer map[string]bool
	// fromVal holds the names of the metrics whose latest value a
	// validation logged (or a callback at a validation's end), for
	// Metrics.FromValidation.
	fromVal map[string]bool
	// inValEnd is true while validation-end hooks run.
	inValEnd bool
	Store    *module.Store
	// noStore says why Store is nil once the model is set up (a strategy
	// that holds no whole replica, fsdp): what State.Weights answers; its
	// counts and dtype come from specs and dtype then.
	noStore string
	specs   []module.Spec
	dtype   tensor.Dtype
	// noGrad says why Store has no gradient buffer (sharded_stage2).
	noGrad string
	Layers []module.LayerInfo
}

// view is the State hooks see now: scalars copied, the rest behind
// read-only views (no allocation).
func (r *runState) view() State {
	v := r.State
	v.Metrics, v.Weights, v.layers = Metrics{m: r.Metrics, stepNewer: r.stepNewer, fromVal: r.fromVal}, Weights{st: r.Store, why: r.noStore, specs: r.specs, dtype: r.dtype, noGrad: r.noGrad}, r.Layers
	return v
}

// setStepNewer records whether the step value of the metric logged per
// step and per epoch as name is its latest.
func (r *runState) setStepNewer(name string, newer bool) {
	if !newer {
		delete(r.stepNewer, name)
		return
	}
	if r.stepNewer == nil {
		r.stepNewer = map[string]bool{}
	}
	r.stepNewer[name] = true
}

// setMetric records a metric's latest value and whether validation
// logged it.
func (r *runState) setMetric(name string, v float64, validation bool) {
	r.Metrics[name] = v
	if !validation {
		delete(r.fromVal, name)
		return
	}
	if r.fromVal == nil {
		r.fromVal = map[string]bool{}
	}
	r.fromVal[name] = true
}

var errNoWeights = errors.New("no weights: the model is not set up in this stage")

// Metrics is a read-only view of metric values by name.
type Metrics struct {
	m         map[string]float64
	stepNewer map[string]bool
	fromVal   map[string]bool
}

// MetricsOf returns a view of a copy of m (for tests of callbacks, which
// build a State themselves).
func MetricsOf(m map[string]float64) Metrics { return Metrics{m: maps.Clone(m)} }

// Get returns the value of the metric called name and whether it was
// logged. A metric logged both per step and per epoch is kept as
// name_step and name_epoch; as in Lightning's callback_metrics, its bare
// name gives the one logged last: the epoch value at the end of an epoch,
// the step value during the next (so that a checkpoint every N steps,
// monitoring "train_loss", is ranked by the loss of its step, not by the
// mean of the epoch before), the step value before the first epoch ends.
// A monitor of "train_loss" needs no suffix.
func (m Metrics) Get(name string) (float64, bool) {
	k, ok := m.key(name)
	return m.m[k], ok
}

// key is the name under which Get finds name's value.
func (m Metrics) key(name string) (string, bool) {
	if _, ok := m.m[name]; ok {
		return name, true
	}
	if _, ok := m.m[name+"_step"]; !ok {
		return "", false
	}
	if _, ok := m.m[name+"_epoch"]; ok && !m.stepNewer[name] {
		return name + "_epoch", true
	}
	return name + "_step", true
}

// FromValidation reports whether the value Get returns for name was logged
// by a validation (by the module's ValidationStep, or by a callback when a
// validation ended): it measures the weights of the step that validation
// ran at, not those of later training steps. False for a metric training
// logged, and for one not logged.
func (m Metrics) FromValidation(name string) bool {
	k, ok := m.key(name)
	return ok && m.fromVal[k]
}

// Len is the number of metrics.
func (m Metrics) Len() int { return len(m.m) }

// Names returns the metrics' names, sorted.
func (m Metrics) Names() []string { return slices.Sorted(maps.Keys(m.m)) }

// All yields every metric and its value, in no particular order.
func (m Metrics) All() iter.Seq2[string, float64] { return maps.All(m.m) }

// Map returns a copy of the metrics.
func (m Metrics) Map() map[string]float64 {
	out := make(map[string]float64, len(m.m))
	maps.Copy(out, m.m)
	return out
}

// Weights is a read-only view of a model's parameters and buffers: values
// come out as copies. Its zero value holds nothing. Under a strategy that
// keeps no whole model in any process (fsdp: each rank holds 1/N),
// State.Weights has the counts and dtype but no values: Tensor says where
// the weights are, Entries is nil and SHA256 "".
type Weights struct {
	st  *module.Store
	why string // why st is nil, when the model is set up
	// The model's tensors and dtype when st is nil (fsdp).
	specs []module.Spec
	dtype tensor.Dtype
	// noGrad says why st has no gradients (sharded_stage2).
	noGrad string
}

// Dtype is the element type of the weights (Float32 or Float64).
func (w Weights) Dtype() tensor.Dtype {
	if w.st == nil {
		if w.specs != nil {
			return w.dtype
		}
		return tensor.Float32
	}
	return w.st.Dtype()
}

// NumParams is the number of trainable elements (parameters come before
// buffers).
func (w Weights) NumParams() int {
	if w.st == nil {
		return w.count(false)
	}
	return w.st.NumParams()
}

// Len is the number of elements, parameters and buffers.
func (w Weights) Len() int {
	if w.st == nil {
		return w.count(true)
	}
	return w.st.Len()
}

// count sums the specs' sizes, the buffers' too when buffers is true.
func (w Weights) count(buffers bool) int {
	n := 0
	for _, sp := range w.specs {
		if buffers || !sp.Buffer {
			n += sp.Size()
		}
	}
	return n
}

// Entries lists the tensors in store order (copies).
func (w Weights) Entries() []module.Entry {
	if w.st == nil {
		return nil
	}
	out := slices.Clone(w.st.Entries())
	for i := range out {
		out[i].Shape = slices.Clone(out[i].Shape)
	}
	return out
}

// Tensor returns a copy of the named tensor's values.
func (w Weights) Tensor(name string) (*tensor.Dense, error) {
	return w.copyOf(name, false)
}

// GradTensor returns a copy of the named parameter's current gradient, or
// an error when the strategy keeps no gradient buffer in this process
// (sharded_stage2 hands each gradient to a reduce-scatter as backward
// produces it; State.GradNorm is the reduced gradients' norm there too).
func (w Weights) GradTensor(name string) (*tensor.Dense, error) {
	return w.copyOf(name, true)
}

func (w Weights) copyOf(name string, grad bool) (*tensor.Dense, error) {
	if w.st == nil {
		if w.why != "" {
			return nil, errors.New(w.why)
		}
		return nil, errNoWeights
	}
	var t *tensor.Dense
	var err error
	if grad && w.noGrad != "" {
		return nil, errors.New(w.noGrad)
	}
	if grad {
		t, err = w.st.GradTensor(name)
	} else {
		t, err = w.st.Tensor(name)
	}
	if err != nil {
		return nil, err
	}
	return t.Clone().(*tensor.Dense), nil
}

// SHA256 is the hex SHA-256 of the values in store order.
func (w Weights) SHA256() string {
	if w.st == nil {
		return ""
	}
	return w.st.SHA256()
}
