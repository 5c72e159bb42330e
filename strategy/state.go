package strategy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
)

// StateDict is what a strategy saves and loads: named tensors, each with
// the slice of its global tensor this rank holds, and small named blobs
// (optimizer scalars, scheduler state). A strategy that keeps a tensor
// sharded across ranks returns its shard; one that replicates it returns
// all of it (Lo 0, Hi its size). Loading takes, for every tensor this rank
// needs, the span it holds under its own layout from any entry that covers
// it, so a dict saved at one world size loads at another.
type StateDict struct {
	// Tensors: the model's parameters and buffers in store order, then the
	// optimizer's buffers, named OptimizerPrefix + buffer name.
	Tensors []Tensor
	// Blobs by name: BlobOptimizer and BlobScheduler (JSON).
	Blobs map[string][]byte
}

// Tensor is a span of one global tensor.
type Tensor struct {
	// Name is the global tensor's name: a store name, or OptimizerPrefix +
	// an optimizer buffer's name ("optimizer/exp_avg", one value per
	// learnable parameter element, shape [number of parameter elements]).
	Name  string
	Dtype tensor.Dtype // tensor.Float32 (Data32) or tensor.Float64 (Data64)
	Shape []int        // the global tensor's shape
	// Lo and Hi are the span [Lo, Hi) of the flattened (row-major) global
	// tensor held in Data32 or Data64.
	Lo, Hi int
	Data32 []float32
	Data64 []float64
}

// Size is the number of elements of the global tensor.
func (t *Tensor) Size() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Whole reports whether t holds its entire global tensor.
func (t *Tensor) Whole() bool { return t.Lo == 0 && t.Hi == t.Size() }

const (
	// OptimizerPrefix starts the names of optimizer buffers.
	OptimizerPrefix = "optimizer/"
	// BlobOptimizer is the optimizer's name, step count, scalars, span and
	// buffer names (JSON, OptimizerMeta).
	BlobOptimizer = "optimizer"
	// BlobScheduler is the learning-rate scheduler's type and state (JSON,
	// SchedulerMeta).
	BlobScheduler = "scheduler"
)

// OptimizerMeta is the JSON document of BlobOptimizer.
type OptimizerMeta struct {
	Name    string               `json:"name"`
	Step    int64                `json:"step"`
	Lo      int                  `json:"lo"` // the span of the saved buffers
	Hi      int                  `json:"hi"`
	Scalars map[string]JSONFloat `json:"scalars"`
	Buffers []string             `json:"buffers"`
}

// SchedulerMeta is the JSON document of BlobScheduler.
type SchedulerMeta struct {
	Type  string               `json:"type"`
	State map[string]JSONFloat `json:"state"`
}

// JSONFloat is a float64 that survives JSON when NaN or infinite.
type JSONFloat float64

func (f JSONFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

func (f *JSONFloat) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"NaN"`:
		*f = JSONFloat(math.NaN())
		return nil
	case `"+Inf"`:
		*f = JSONFloat(math.Inf(1))
		return nil
	case `"-Inf"`:
		*f = JSONFloat(math.Inf(-1))
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("%s is not a number", b)
	}
	*f = JSONFloat(v)
	return nil
}

// Lookup returns the entry named name, or nil.
func (sd *StateDict) Lookup(name string) *Tensor {
	for i := range sd.Tensors {
		if sd.Tensors[i].Name == name {
			return &sd.Tensors[i]
		}
	}
	return nil
}

// Span returns the values [lo, hi) of the global tensor name as float64,
// assembled from the entries that cover them, or an error naming what is
// missing. Strategies whose layout is their own (fsdp) load through it.
func (sd *StateDict) Span(name string, lo, hi int) ([]float64, error) { return sd.span(name, lo, hi) }

// span returns the values [lo, hi) of the global tensor name as float64,
// assembled from the entries that cover them (whole tensors, or shards such
// as the ones each rank of a sharded run saves).
func (sd *StateDict) span(name string, lo, hi int) ([]float64, error) {
	var parts []*Tensor
	for i := range sd.Tensors {
		if t := &sd.Tensors[i]; t.Name == name {
			parts = append(parts, t)
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("tensor %q is missing from the state", name)
	}
	sort.SliceStable(parts, func(i, j int) bool { return parts[i].Lo < parts[j].Lo })
	out := make([]float64, hi-lo)
	at := lo // everything before at is filled
	for _, t := range parts {
		if t.Hi <= at || t.Lo > at {
			continue
		}
		end := min(t.Hi, hi)
		if t.Dtype == tensor.Float32 {
			for j, v := range t.Data32[at-t.Lo : end-t.Lo] {
				out[at-lo+j] = float64(v)
			}
		} else {
			copy(out[at-lo:], t.Data64[at-t.Lo:end-t.Lo])
		}
		if at = end; at == hi {
			break
		}
	}
	if at < hi {
		return nil, fmt.Errorf("tensor %q: the saved spans do not cover [%d, %d), which this rank holds (nothing for [%d, ...))", name, lo, hi, at)
	}
	return out, nil
}

// Check reports every entry whose data does not match its dtype, shape and
// span.
func (sd *StateDict) Check() error {
	var errs []error
	for i := range sd.Tensors {
		t := &sd.Tensors[i]
		n := len(t.Data32)
		if t.Dtype == tensor.Float64 {
			n = len(t.Data64)
		} else if t.Dtype != tensor.Float32 {
			errs = append(errs, fmt.Errorf("tensor %q is %v: use float32 or float64", t.Name, t.Dtype))
			continue
		}
		if t.Lo < 0 || t.Hi < t.Lo || t.Hi > t.Size() || n != t.Hi-t.Lo {
			errs = append(errs, fmt.Errorf("tensor %q %v: span [%d, %d) with %d values does not fit the tensor's %d elements", t.Name, t.Shape, t.Lo, t.Hi, n, t.Size()))
		}
	}
	return errors.Join(errs...)
}

// storeTensors returns the model's parameters and buffers as whole tensors
// viewing st's memory (valid until the next step).
func storeTensors(st *module.Store) ([]Tensor, error) {
	var out []Tensor
	for _, e := range st.Entries() {
		if strings.HasPrefix(e.Name, OptimizerPrefix) {
			return nil, fmt.Errorf("model tensor %q starts with %q, which state dicts reserve for optimizer state: rename it", e.Name, OptimizerPrefix)
		}
		t := Tensor{Name: e.Name, Dtype: st.Dtype(), Shape: slices.Clone(e.Shape), Lo: 0, Hi: e.Len}
		if st.Dtype() == tensor.Float32 {
			t.Data32 = st.Data32()[e.Offset : e.Offset+e.Len]
		} else {
			t.Data64 = st.Data64()[e.Offset : e.Offset+e.Len]
		}
		out = append(out, t)
	}
	return out, nil
}

// SaveReplicaState builds a rank's state dict: the whole model of st, and
// the optimizer's and scheduler's state (the optimizer's buffers over its
// span). It is for strategy implementations, whose SaveState it serves.
func SaveReplicaState(st *module.Store, opt optim.Optimizer, sched optim.Scheduler) (*StateDict, error) {
	ts, err := storeTensors(st)
	if err != nil {
		return nil, err
	}
	sd := &StateDict{Tensors: ts, Blobs: map[string][]byte{}}
	if opt != nil {
		os := opt.State()
		meta := OptimizerMeta{Name: opt.Name(), Step: os.Step, Lo: os.Lo, Hi: os.Hi, Scalars: JSONFloats(os.Scalars)}
		for name := range os.Buffers {
			meta.Buffers = append(meta.Buffers, name)
		}
		sort.Strings(meta.Buffers)
		for _, name := range meta.Buffers {
			sd.Tensors = append(sd.Tensors, Tensor{Name: OptimizerPrefix + name, Dtype: tensor.Float64, Shape: []int{st.NumParams()}, Lo: os.Lo, Hi: os.Hi, Data64: os.Buffers[name]})
		}
		if sd.Blobs[BlobOptimizer], err = json.Marshal(meta); err != nil {
			return nil, fmt.Errorf("encode the optimizer's state: %w", err)
		}
	}
	if sched != nil {
		b, err := json.Marshal(SchedulerMeta{Type: fmt.Sprintf("%T", sched), State: JSONFloats(sched.State())})
		if err != nil {
			return nil, fmt.Errorf("encode the scheduler's state: %w", err)
		}
		sd.Blobs[BlobScheduler] = b
	}
	return sd, nil
}

// LoadReplicaState checks sd against st, opt and sched before changing
// anything, then copies the model's tensors into st and the optimizer's
// span [lo, hi) into opt. Optimizer and scheduler state load when sd has
// them. It is for strategy implementations, whose LoadState it serves.
func LoadReplicaState(sd *StateDict, st *module.Store, opt optim.Optimizer, sched optim.Scheduler, lo, hi int) error {
	if sd == nil {
		return errors.New("LoadState: the state dict is nil")
	}
	if err := sd.Check(); err != nil {
		return err
	}
	if err := checkStoreState(sd, st, true); err != nil {
		return err
	}
	var ost *optim.State
	if b, ok := sd.Blobs[BlobOptimizer]; ok && opt != nil {
		var meta OptimizerMeta
		if err := json.Unmarshal(b, &meta); err != nil {
			return fmt.Errorf("optimizer state: %w", err)
		}
		if meta.Name != opt.Name() {
			return fmt.Errorf("the checkpoint's optimizer is %q but the module configures %q: configure the same optimizer to resume", meta.Name, opt.Name())
		}
		ost = &optim.State{Step: meta.Step, Lo: lo, Hi: hi, Scalars: Floats(meta.Scalars), Buffers: map[string][]float64{}}
		for _, name := range meta.Buffers {
			v, err := sd.span(OptimizerPrefix+name, lo, hi)
			if err != nil {
				return fmt.Errorf("optimizer buffer %q: %w", name, err)
			}
			ost.Buffers[name] = v
		}
	}
	var schedState map[string]float64
	if b, ok := sd.Blobs[BlobScheduler]; ok {
		var meta SchedulerMeta
		if err := json.Unmarshal(b, &meta); err != nil {
			return fmt.Errorf("scheduler state: %w", err)
		}
		if sched == nil {
			return fmt.Errorf("the checkpoint has a %s learning-rate scheduler but the module configures none: configure the same scheduler to resume", meta.Type)
		}
		if typ := fmt.Sprintf("%T", sched); typ != meta.Type {
			return fmt.Errorf("the checkpoint's scheduler is %s but the module configures %s: configure the same scheduler to resume (its position is the checkpoint's)", meta.Type, typ)
		}
		schedState = Floats(meta.State)
	}
	if ost != nil {
		if err := opt.LoadState(*ost); err != nil {
			return err
		}
	}
	if schedState != nil {
		if err := sched.LoadState(schedState); err != nil {
			return fmt.Errorf("scheduler state: %w", err)
		}
	}
	copyStoreState(sd, st)
	return nil
}

// CheckTensors reports every model tensor of st that sd lacks or holds
// with another dtype or shape, and every tensor sd has that the model
// lacks. It does not look at spans: a strategy that keeps tensors sharded
// (fsdp) loads the spans it holds through Span, which names what is not
// covered.
func CheckTensors(sd *StateDict, st *module.Store) error { return checkStoreState(sd, st, false) }

// checkStoreState reports every model tensor sd lacks, holds with another
// dtype or shape, or (whole) does not cover in its spans, and every tensor sd has
// that the model lacks.
func checkStoreState(sd *StateDict, st *module.Store, whole bool) error {
	var errs []error
	var missing, extra []string
	model := map[string]bool{}
	for _, e := range st.Entries() {
		model[e.Name] = true
		t := sd.Lookup(e.Name)
		switch {
		case t == nil:
			missing = append(missing, fmt.Sprintf("%q %v", e.Name, e.Shape))
		case t.Dtype != st.Dtype():
			errs = append(errs, fmt.Errorf("tensor %q is %s in the checkpoint but the model computes in %s", e.Name, dtypeName(t.Dtype), dtypeName(st.Dtype())))
		case !slices.Equal(t.Shape, e.Shape):
			errs = append(errs, fmt.Errorf("tensor %q has shape %v in the checkpoint but %v in the model", e.Name, t.Shape, e.Shape))
		case whole && !t.Whole():
			// Spans of several ranks (a sharded checkpoint of fsdp) make
			// the whole tensor when together they cover it.
			if _, err := sd.span(e.Name, 0, t.Size()); err != nil {
				errs = append(errs, fmt.Errorf("%w: every rank of this strategy holds the whole model", err))
			}
		}
	}
	for _, t := range sd.Tensors {
		if !model[t.Name] && !strings.HasPrefix(t.Name, OptimizerPrefix) {
			extra = append(extra, fmt.Sprintf("%q", t.Name))
		}
	}
	// One line for each kind, whatever the count: a checkpoint of another
	// architecture lacks or adds dozens of tensors.
	errs = append(errs,
		namesError(missing, "tensor %s of the model is missing from the checkpoint", "%d tensors of the model are missing from the checkpoint (%s)"),
		namesError(extra, "the checkpoint has tensor %s that the model does not declare", "the checkpoint has %d tensors that the model does not declare (%s)"))
	return errors.Join(errs...)
}

// namesError is nil for no names, the sentence one for a single name and
// many, with the count and the first few, for more; either asks whether
// the checkpoint belongs to another model.
func namesError(names []string, one, many string) error {
	const another = ": was it written for another model?"
	switch len(names) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf(one+another, names[0])
	}
	return fmt.Errorf(many+another, len(names), someOf(names))
}

// someOf joins the first few of names, saying how many more there are.
func someOf(names []string) string {
	const shown = 6
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}

// copyStoreState copies the checked model tensors of sd into st, each
// assembled from its spans where sd holds it in parts.
func copyStoreState(sd *StateDict, st *module.Store) {
	for _, e := range st.Entries() {
		t := sd.Lookup(e.Name)
		if !t.Whole() {
			v, _ := sd.span(e.Name, 0, e.Len) // covered: checkStoreState checked it
			if st.Dtype() == tensor.Float32 {
				for i, x := range v {
					st.Data32()[e.Offset+i] = float32(x)
				}
			} else {
				copy(st.Data64()[e.Offset:e.Offset+e.Len], v)
			}
			continue
		}
		if st.Dtype() == tensor.Float32 {
			copy(st.Data32()[e.Offset:e.Offset+e.Len], t.Data32)
		} else {
			copy(st.Data64()[e.Offset:e.Offset+e.Len], t.Data64)
		}
	}
}

// LoadStore copies the model tensors of sd into st, after checking that
// every one is there, whole, with st's dtype and shape. Nothing else of sd
// is used: it loads weights for evaluation or inference.
func LoadStore(sd *StateDict, st *module.Store) error {
	if st == nil {
		return errors.New("LoadStore: the store is nil")
	}
	if err := sd.Check(); err != nil {
		return err
	}
	if err := checkStoreState(sd, st, true); err != nil {
		return err
	}
	copyStoreState(sd, st)
	return nil
}

func dtypeName(dt tensor.Dtype) string {
	if dt == tensor.Float64 {
		return "F64"
	}
	return "F32"
}

// JSONFloats converts m for JSON.
func JSONFloats(m map[string]float64) map[string]JSONFloat {
	out := make(map[string]JSONFloat, len(m))
	for k, v := range m {
		out[k] = JSONFloat(v)
	}
	return out
}

// Floats converts m back from JSONFloats.
func Floats(m map[string]JSONFloat) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = float64(v)
	}
	return out
}
