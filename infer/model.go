package infer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rs/zerolog"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/internal/typednil"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Config says how to build a Model. Zero values are documented per field.
type Config struct {
	// Inputs are the batch fields the module's PredictStep reads, with the
	// shape of one example, as a Dataset's Fields give them
	// ({Name: "x", Shape: []int{1, 28, 28}}). Required.
	Inputs []data.Field
	// Weights is the file to load: a fulgur checkpoint or a safetensors
	// state dict (SaveStateDict's, or PyTorch's). Required unless
	// InitialWeights is set: a model that silently predicts with random
	// weights (a ModelCheckpoint's LastModelPath or BestModelPath is "" when no
	// checkpoint was saved) is an error, not a result.
	Weights string
	// WeightsOptions load a part of the Weights file, as trainer.WithWeights
	// takes them (trainer.LoadWeightsInto): trainer.OnlyPrefix("encoder.")
	// loads a module that declares only a trained model's encoder, under
	// the same scope (module.Builder.Scope("encoder")), from the whole
	// model's checkpoint or state dict, ignoring the file's other tensors;
	// trainer.StripPrefix and trainer.Strict(false) as there; a file of
	// the other precision is converted, as there. nil: the file holds
	// exactly the module's tensors.
	WeightsOptions []trainer.WeightsOption
	// InitialWeights, with Weights "", keeps the weights drawn from Seed:
	// for a model whose weights you then set yourself (Store, LoadWeights)
	// or a test.
	InitialWeights bool
	// Precision is "32" (float32, the default) or "64" (float64), as in
	// trainer.Config; it must match a checkpoint's.
	Precision string
	// Seed draws the initial weights (what Weights then replaces).
	Seed uint64
	// MaxBatchSizes is how many batch sizes the Model keeps a predict graph
	// built for. Each graph holds its activations (a small ResNet's for
	// batches of 1 to 64 rows are 340 MB in all), so a service whose batch
	// size varies would otherwise grow with every new size; the least
	// recently used graph is dropped and built again when its size returns.
	// 0: 8; -1: no limit.
	MaxBatchSizes int
}

// Validate fills defaults and reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Inputs) == 0 {
		errs = append(errs, errors.New("Inputs is empty: name the batch fields PredictStep reads, e.g. {Name: \"x\", Shape: []int{1, 28, 28}}"))
	}
	seen := map[string]bool{}
	for i, f := range c.Inputs {
		if f.Name == "" || seen[f.Name] {
			errs = append(errs, fmt.Errorf("Inputs[%d] has name %q: give every field a distinct, non-empty name", i, f.Name))
		}
		seen[f.Name] = true
		for _, d := range f.Shape {
			if d < 1 {
				errs = append(errs, fmt.Errorf("Inputs[%d] (%q) has shape %v: every dimension must be 1 or more", i, f.Name, f.Shape))
				break
			}
		}
	}
	if c.Weights == "" && !c.InitialWeights {
		errs = append(errs, errors.New("Weights is \"\": name the checkpoint or state dict to load (a ModelCheckpoint's LastModelPath and BestModelPath are \"\" when it saved none), or set InitialWeights to predict with the random initial weights"))
	}
	if c.Weights != "" && c.InitialWeights {
		errs = append(errs, fmt.Errorf("Weights is %q and InitialWeights is set: use one", c.Weights))
	}
	switch {
	case c.MaxBatchSizes == 0:
		c.MaxBatchSizes = 8
	case c.MaxBatchSizes < -1:
		errs = append(errs, fmt.Errorf("MaxBatchSizes is %d: use 1 or more, 0 for 8, or -1 for no limit", c.MaxBatchSizes))
	}
	switch c.Precision {
	case "":
		c.Precision = "32"
	case "32", "64":
	default:
		errs = append(errs, fmt.Errorf("Precision is %q: use \"32\" or \"64\"", c.Precision))
	}
	return errors.Join(errs...)
}

// Model is a module with its weights, ready to predict batches in eval
// mode (BatchNorm uses its running statistics, Dropout is off). Predict may
// be called from many goroutines at once (an HTTP handler's): the calls run
// one at a time, since a Model's graphs hold their inputs and results in
// buffers of their own; for predictions in parallel, build one Model per
// worker (each holds its own copy of the weights).
type Model struct {
	mod    module.Module
	store  *module.Store
	fields []data.Field
	seed   uint64
	// graphs are the engines of the batch sizes seen last, one size each,
	// the most recently used last: at most maxSizes (-1: no limit).
	graphs   []sizedEngine
	maxSizes int
	prec     string // Config.Precision: "32" or "64"
	// turn is held by the Predict call running the engine: a channel, not
	// a mutex, so that a call waiting for its turn ends with its context.
	turn chan struct{}
}

// New configures m, loads cfg.Weights into it and returns a Model that
// runs m's PredictStep.
func New(m module.Module, cfg Config) (*Model, error) {
	if m == nil {
		return nil, errors.New("infer.New: the module is nil")
	}
	if _, ok := m.(module.Predictor); !ok {
		return nil, fmt.Errorf("infer.New: %T has no PredictStep: implement module.Predictor, returning the output node", m)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("infer.New: %w", err)
	}
	// Pick the matrix multiply for the process (BLIS, else OpenBLAS, when
	// the dynamic loader finds them; gonum otherwise) as a Trainer does,
	// before any graph runs: a multiply run first would settle it on gonum,
	// and a Trainer in the same process would then fail to start.
	if err := ops.CheckKernels(); err != nil {
		return nil, fmt.Errorf("infer.New: float32 kernels: %w", err)
	}
	if _, err := blas.Choose(zerolog.Nop(), blas.ChooseOptions{}); err != nil {
		return nil, fmt.Errorf("infer.New: matrix multiply: %w", err)
	}
	dt := tensor.Float32
	if cfg.Precision == "64" {
		dt = tensor.Float64
	}
	b := module.NewBuilder(dt)
	if err := typednil.Call(m, "module", m.Configure, b); err != nil {
		return nil, fmt.Errorf("infer.New: Configure: %w", err)
	}
	specs, err := b.Specs()
	if err != nil {
		return nil, fmt.Errorf("infer.New: Configure: %w", err)
	}
	store, err := module.NewStore(specs, dt, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("infer.New: %w", err)
	}
	if cfg.Weights != "" && len(cfg.WeightsOptions) > 0 {
		if err := trainer.LoadWeightsInto(cfg.Weights, store, cfg.WeightsOptions...); err != nil {
			return nil, fmt.Errorf("infer.New: %w", err)
		}
	} else if cfg.Weights != "" {
		if err := LoadWeights(cfg.Weights, store); err != nil {
			if strings.Contains(err.Error(), "that the model does not declare") {
				// A part of a whole model (its encoder), most likely.
				return nil, fmt.Errorf("infer.New: %w\nTo load a part of the file (a sub-module declared under the same scope, such as a trained autoencoder's encoder), set WeightsOptions: []trainer.WeightsOption{trainer.OnlyPrefix(\"encoder.\")}", err)
			}
			return nil, fmt.Errorf("infer.New: %w", err)
		}
	}
	fields := make([]data.Field, len(cfg.Inputs))
	for i, f := range cfg.Inputs {
		fields[i] = data.Field{Name: f.Name, Shape: append([]int(nil), f.Shape...)}
	}
	model := &Model{mod: m, store: store, fields: fields, seed: cfg.Seed, maxSizes: cfg.MaxBatchSizes, prec: cfg.Precision, turn: make(chan struct{}, 1)}
	// Build the graph of one row now: Inputs that do not fit PredictStep
	// are New's error, not the first request's.
	if err := model.engineFor(1).Compile(module.Predict, &data.Batch{Size: 1, Fields: fields}); err != nil {
		return nil, fmt.Errorf("infer.New: building the predict graph for Inputs %s (when they are not what PredictStep reads, set Inputs to its fields and per-example shapes): %w", describe(fields), err)
	}
	return model, nil
}

type sizedEngine struct {
	rows int
	eng  *engine.Engine
}

// engineFor returns the engine for batches of rows, building it when the
// size is new and dropping the least recently used beyond maxSizes. The
// caller holds the turn (or owns the Model, in New).
func (m *Model) engineFor(rows int) *engine.Engine {
	for i, g := range m.graphs {
		if g.rows == rows {
			if i != len(m.graphs)-1 {
				copy(m.graphs[i:], m.graphs[i+1:])
				m.graphs[len(m.graphs)-1] = g
			}
			return g.eng
		}
	}
	if m.maxSizes > 0 && len(m.graphs) >= m.maxSizes {
		n := copy(m.graphs, m.graphs[1:])
		m.graphs[n] = sizedEngine{}
		m.graphs = m.graphs[:n]
	}
	e := engine.New(m.mod, m.store, m.fields, m.seed)
	m.graphs = append(m.graphs, sizedEngine{rows, e})
	return e
}

// checkFinite finds the first NaN or infinite input value: it would make
// its row's predictions NaN, which a caller taking the largest logit reads
// as class 0.
func (m *Model) checkFinite(b *data.Batch) error {
	for f, col := range b.Data {
		for i, v := range col {
			if v != v || v > math.MaxFloat32 || v < -math.MaxFloat32 {
				return notFinite(b, f, i, float64(v))
			}
		}
	}
	for f, col := range b.Data64 {
		for i, v := range col {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return notFinite(b, f, i, v)
			}
		}
	}
	return nil
}

func notFinite(b *data.Batch, f, i int, v float64) error {
	name, per := fmt.Sprint(f), 1
	if f < len(b.Fields) {
		name, per = fmt.Sprintf("%q", b.Fields[f].Name), max(b.Fields[f].Size(), 1)
	}
	return fmt.Errorf("field %s of row %d holds %v at value %d of the row: a NaN or infinite input makes the row's predictions NaN; replace the value (a missing one by 0 or the training mean) or leave the row out", name, i/per, v, i%per)
}

// describe writes fields as name[shape] pairs.
func describe(fs []data.Field) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = fmt.Sprintf("%s%v", f.Name, f.Shape)
	}
	return strings.Join(s, ", ")
}

// Store holds the model's parameters and buffers (SaveStateDict writes it).
// Change them (LoadWeights) only while no Predict call runs.
func (m *Model) Store() *module.Store { return m.store }

// Inputs are the batch fields Predict expects.
func (m *Model) Inputs() []data.Field { return m.fields }

// Batch makes a batch of rows examples for a float32 model (Precision
// "32") from one slice per input field, each holding rows × the field's
// size values in row-major order. A float64 model takes Batch64's batches.
func (m *Model) Batch(rows int, fields ...[]float32) (*data.Batch, error) {
	if m.prec == "64" {
		return nil, errors.New(`Batch: the model's Precision is "64": it takes float64 values: make the batch with Batch64 (float64(v) converts a float32 value exactly)`)
	}
	if err := m.checkBatch("Batch", rows, len(fields), func(i int) int { return len(fields[i]) }); err != nil {
		return nil, err
	}
	return &data.Batch{Size: rows, Fields: m.fields, Data: fields}, nil
}

// Batch64 makes a batch of rows examples for a float64 model (Precision
// "64") from one slice per input field, each holding rows × the field's
// size values in row-major order; the values reach the model unrounded. A
// float32 model takes Batch's batches.
func (m *Model) Batch64(rows int, fields ...[]float64) (*data.Batch, error) {
	if m.prec != "64" {
		return nil, errors.New(`Batch64: the model's Precision is "32": it takes float32 values: make the batch with Batch, or build the Model with Precision "64" (from the same weights file) to predict in float64`)
	}
	if err := m.checkBatch("Batch64", rows, len(fields), func(i int) int { return len(fields[i]) }); err != nil {
		return nil, err
	}
	return &data.Batch{Size: rows, Fields: m.fields, Data64: fields}, nil
}

// checkBatch checks the number of field slices and their lengths.
func (m *Model) checkBatch(call string, rows, n int, length func(i int) int) error {
	if n != len(m.fields) {
		return fmt.Errorf("%s: %d field slices given, the model reads %d (%s)", call, n, len(m.fields), fieldNames(m.fields))
	}
	if rows < 1 {
		return fmt.Errorf("%s: rows is %d: use 1 or more", call, rows)
	}
	for i, f := range m.fields {
		if want := rows * f.Size(); length(i) != want {
			return fmt.Errorf("%s: field %q holds %d values; %d rows of shape %v need %d", call, f.Name, length(i), rows, f.Shape, want)
		}
	}
	return nil
}

// Predict runs one batch through the module's PredictStep and returns its
// output, one row per example (a copy the caller keeps), in the model's
// precision. A NaN or infinite input value is an error naming its row:
// the row's predictions would be NaN. ctx is checked before the batch runs
// and while the call waits for the Model's calls before it; a batch that
// has started runs to its end. The batch comes from Batch or Batch64, or from a data.Loader
// (float32 values, which a float64 model converts exactly, as
// trainer.Predict does); of a loader's fields, those not in Inputs (a test
// set's labels) are left out, and the values of the others, found by name,
// are checked and read.
func (m *Model) Predict(ctx context.Context, b *data.Batch) (*tensor.Dense, error) {
	if ctx == nil {
		return nil, errors.New("Predict: the context is nil: pass context.Background()")
	}
	if b == nil {
		return nil, errors.New("Predict: the batch is nil: make one with Model.Batch (Model.Batch64 for a float64 model)")
	}
	b = m.inputsOf(b)
	if err := m.checkFinite(b); err != nil {
		return nil, fmt.Errorf("Predict: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("Predict: the context is done (%w): nothing was predicted; pass a live context", err)
	}
	select {
	case m.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("Predict: the context ended (%w) while the call waited for the Model's calls before it: nothing was predicted; give each call the time the calls queued before it take, or a Model per worker", ctx.Err())
	}
	defer func() { <-m.turn }()
	res, err := m.engineFor(b.Size).Run(ctx, module.Predict, b, false, 1)
	if err != nil {
		return nil, fmt.Errorf("Predict: %w", err)
	}
	if res.Output == nil || res.Output.Dims() == 0 {
		return nil, errors.New("Predict: PredictStep returned a scalar: Predict returns rows, one for each example of the batch; return a tensor whose first axis is the batch, as [batch] or [batch, classes]")
	}
	return res.Output.Clone().(*tensor.Dense), nil
}

// inputsOf is b with only the fields the model reads, in the model's order,
// when b holds others besides them (a labelled set's loader gives its labels
// too): the values are shared, not copied. Otherwise b as it is, whose
// fields the engine checks and names when they do not fit.
func (m *Model) inputsOf(b *data.Batch) *data.Batch {
	if len(b.Fields) <= len(m.fields) {
		return b
	}
	out := &data.Batch{Size: b.Size, Indices: b.Indices, Pad: b.Pad}
	for _, f := range m.fields {
		i := slices.IndexFunc(b.Fields, func(g data.Field) bool { return g.Name == f.Name })
		if i < 0 || (b.Data != nil && i >= len(b.Data)) || (b.Data64 != nil && i >= len(b.Data64)) {
			return b
		}
		out.Fields = append(out.Fields, b.Fields[i])
		if b.Data != nil {
			out.Data = append(out.Data, b.Data[i])
		}
		if b.Data64 != nil {
			out.Data64 = append(out.Data64, b.Data64[i])
		}
	}
	return out
}

func fieldNames(fs []data.Field) string {
	n := make([]string, len(fs))
	for i, f := range fs {
		n[i] = f.Name
	}
	return strings.Join(n, ", ")
}
