package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/safetensors"
	"github.com/fulgur-ml/fulgur/strategy"
)

// WeightsOption changes how WithWeights loads a file.
type WeightsOption func(*weightsOptions)

type weightsOptions struct {
	path   string
	strict bool
	prefix string // OnlyPrefix
	strip  string // StripPrefix
	// name names the options in errors (Config.SettingName's words for
	// `trainer.StripPrefix("module.")`); nil: as Go writes them.
	name func(setting string) string
}

// opt is how errors name the option fn, called with arg when one is given
// (`trainer.StripPrefix("module.")`, or `trainer.OnlyPrefix` for the option
// itself).
func (o *weightsOptions) opt(fn string, arg ...string) string {
	s := "trainer." + fn
	if len(arg) > 0 {
		s += "(" + strconv.Quote(arg[0]) + ")"
	}
	if o.name != nil {
		if n := o.name(s); n != "" {
			return n
		}
	}
	return s
}

// WithWeights starts the Fit from the parameters and buffers in the file
// at path, as a Lightning user fine-tunes with
// model.load_state_dict(torch.load(...)) or LitModel.load_from_checkpoint
// before trainer.fit: the weights only, with a fresh optimizer and
// scheduler at epoch 0, global step 0. The file is a safetensors state dict
// (PyTorch's names and layout, as written by
// safetensors.torch.save_file(model.state_dict(), path) or
// infer.SaveStateDict), or a fulgur checkpoint, whose optimizer, loop
// position and callback states are ignored. "last" and "best" name a
// checkpoint as FromCheckpoint's do.
//
// The weights are loaded on every rank after the strategy has set the
// model up and before the sanity check: each rank reads the file, and a
// rank that cannot fails the Fit on every rank. Every tensor's shape must
// match (a mismatch is an error naming the tensor and both shapes); values
// of another dtype (a float64 file for a float32 model, PyTorch's int64
// num_batches_tracked) are converted. A tensor of the model missing from
// the file, or one of the file that the model does not declare, is an
// error listing them all, unless Strict(false) is given. The file's names
// are first stripped of StripPrefix's prefix, then filtered by OnlyPrefix,
// then matched against the model's. It cannot be
// combined with FromCheckpoint, which resumes a run instead; a run that
// restarts from its own checkpoint (elastic restart, SLURM requeue)
// resumes that and ignores the weights.
func WithWeights(path string, opts ...WeightsOption) FitOption {
	return func(o *fitOptions) {
		w := &weightsOptions{path: path, strict: true}
		for _, opt := range opts {
			if opt != nil {
				opt(w)
			}
		}
		o.weights = w
	}
}

// Strict(false) is PyTorch's load_state_dict(strict=False): tensors of the
// model missing from the file keep their initial values and tensors of the
// file that the model does not declare are skipped; both are listed in a
// warning. Shapes must still match, and a file with no name in common
// with the model is an error (the Fit would start from the initial
// weights).
func Strict(strict bool) WeightsOption { return func(o *weightsOptions) { o.strict = strict } }

// OnlyPrefix loads only the tensors whose names start with prefix (as
// "backbone."), in the model and in the file (after StripPrefix); the
// model's others keep their initial values and the file's others are
// ignored. A prefix that no tensor of the model has is an error.
func OnlyPrefix(prefix string) WeightsOption {
	return func(o *weightsOptions) { o.prefix = prefix }
}

// StripPrefix removes prefix from the start of the file's tensor names that
// have it, before OnlyPrefix and the matching, as PyTorch's
// consume_prefix_in_state_dict_if_present(state_dict, prefix): the
// state_dict() of a model wrapped in DistributedDataParallel or
// DataParallel names its tensors "module.conv1.weight", a LightningModule
// holding the network as self.model "model.conv1.weight". Names without
// the prefix are kept as they are; a name present both with and without it
// is an error.
func StripPrefix(prefix string) WeightsOption {
	return func(o *weightsOptions) { o.strip = prefix }
}

// stripPrefix renames the file's tensors as StripPrefix says; it returns
// how many it renamed.
func stripPrefix(file map[string]fileTensor, o *weightsOptions) (map[string]fileTensor, int, error) {
	prefix := o.strip
	if prefix == "" {
		return file, 0, nil
	}
	out := make(map[string]fileTensor, len(file))
	var errs []error
	n := 0
	for name, t := range file {
		short, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if _, both := file[short]; both {
			errs = append(errs, fmt.Errorf("%s: the file has both %q and %q: load it without %s, with %s to pick one of the two", o.opt("StripPrefix", prefix), name, short, o.opt("StripPrefix"), o.opt("OnlyPrefix")))
			continue
		}
		out[short] = t
		n++
	}
	for name, t := range file {
		if _, ok := out[name]; !ok && !strings.HasPrefix(name, prefix) {
			out[name] = t
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return out, n, errors.Join(errs...)
}

// wrapperPrefix is the prefix that the file's names carry where the
// model's do not (a wrapper's "module." or "model."), the most common one;
// "" when there is none.
func wrapperPrefix(file map[string]fileTensor, specs []module.Spec) string {
	model := map[string]bool{}
	for _, s := range specs {
		model[s.Name] = true
	}
	count := map[string]int{}
	best := ""
	for name := range file {
		if model[name] {
			continue
		}
		for _, s := range specs {
			p, ok := strings.CutSuffix(name, s.Name)
			if !ok || !strings.HasSuffix(p, ".") {
				continue
			}
			count[p]++
			if c := count[p]; c > count[best] || c == count[best] && p < best {
				best = p
			}
		}
	}
	return best
}

// fileTensor is one whole tensor of a weights file, as float64s.
type fileTensor struct {
	shape []int
	vals  []float64
}

// readWeightsFile reads the tensors of a safetensors state dict or of a
// fulgur checkpoint (verified; its optimizer state left out). It says which
// of the two the file is.
func readWeightsFile(path string) (map[string]fileTensor, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if st, serr := os.Stat(path); serr == nil && st.IsDir() {
			return nil, "", fmt.Errorf("weights %s is a directory: name a file in it (a state dict, or a checkpoint such as checkpoints/last.ckpt), or pass \"last\" for the newest last.ckpt under the root directory", path)
		}
		return nil, "", fmt.Errorf("weights: %w", err)
	}
	f, err := safetensors.Decode(b)
	if err != nil {
		return nil, "", fmt.Errorf("weights %s: %w", path, err)
	}
	out := map[string]fileTensor{}
	if f.Meta[keyFormat] != CheckpointFormat {
		for _, t := range f.Tensors {
			out[t.Name] = fileTensor{shape: t.Shape, vals: t.Float64s()}
		}
		return out, "state dict", nil
	}
	c, err := readCheckpointFile(path)
	if err != nil {
		return nil, "", err
	}
	// The checkpoint's own dtype, whatever the model's: converted below.
	dtype := tensor.Float32
	for _, name := range c.order {
		if !strings.HasPrefix(name, strategy.OptimizerPrefix) && c.tensors[name].Dtype == "F64" {
			dtype = tensor.Float64
		}
	}
	for _, st := range c.shards {
		if !strings.HasPrefix(st.Name, strategy.OptimizerPrefix) && st.Dtype == tensor.Float64 {
			dtype = tensor.Float64
		}
	}
	sd, err := c.stateDict(dtype, "Precision") // the file's own dtype: never a mismatch
	if err == nil && c.shards != nil {
		sd, err = wholeTensors(sd)
	}
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint %s: %w", path, err)
	}
	for _, t := range sd.Tensors {
		if strings.HasPrefix(t.Name, strategy.OptimizerPrefix) {
			continue
		}
		v := t.Data64
		if t.Dtype == tensor.Float32 {
			v = make([]float64, len(t.Data32))
			for i, x := range t.Data32 {
				v[i] = float64(x)
			}
		}
		out[t.Name] = fileTensor{shape: t.Shape, vals: v}
	}
	return out, "fulgur checkpoint (weights only: its optimizer, loop position and callback states are ignored)", nil
}

// weightsLoad is what matching a weights file against the model gave.
type weightsLoad struct {
	tensors  []strategy.Tensor // whole, in the model's dtype
	missing  []string          // the model's, left at their initial values
	extra    []string          // the file's, skipped
	ignored  int               // the file's outside OnlyPrefix
	stripped int               // the file's names StripPrefix shortened
}

// matchWeights checks the file's tensors against the model's specs and
// converts the ones to load to dtype.
func matchWeights(file map[string]fileTensor, specs []module.Spec, dtype tensor.Dtype, o *weightsOptions) (*weightsLoad, error) {
	w := &weightsLoad{}
	file, stripped, err := stripPrefix(file, o)
	if err != nil {
		return nil, err
	}
	w.stripped = stripped
	var errs []error
	model := map[string]bool{}
	for _, s := range specs {
		if !strings.HasPrefix(s.Name, o.prefix) {
			continue
		}
		model[s.Name] = true
		ft, ok := file[s.Name]
		if !ok {
			w.missing = append(w.missing, fmt.Sprintf("%q %v", s.Name, s.Shape))
			continue
		}
		if !sameWeightShape(ft.shape, s.Shape) {
			msg := fmt.Sprintf("tensor %q has shape %v in the file but %v in the model", s.Name, ft.shape, s.Shape)
			if len(s.Shape) == 2 && len(ft.shape) == 2 && ft.shape[0] == s.Shape[1] && ft.shape[1] == s.Shape[0] {
				msg += ": it is transposed; Linear weights are [out, in] in fulgur as in PyTorch"
			}
			errs = append(errs, errors.New(msg))
			continue
		}
		t := strategy.Tensor{Name: s.Name, Dtype: dtype, Shape: append([]int(nil), s.Shape...), Hi: len(ft.vals)}
		if dtype == tensor.Float32 {
			t.Data32 = make([]float32, len(ft.vals))
			for i, x := range ft.vals {
				t.Data32[i] = float32(x)
			}
		} else {
			t.Data64 = ft.vals
		}
		w.tensors = append(w.tensors, t)
	}
	for name := range file {
		switch {
		case !strings.HasPrefix(name, o.prefix):
			w.ignored++
		case !model[name]:
			w.extra = append(w.extra, fmt.Sprintf("%q %v", name, file[name].shape))
		}
	}
	sort.Strings(w.extra)
	if o.prefix != "" && len(model) == 0 {
		names := make([]string, 0, len(specs))
		for _, s := range specs {
			names = append(names, strconv.Quote(s.Name))
		}
		sort.Strings(names)
		if len(names) > 8 {
			names = append(names[:8], "...")
		}
		msg := fmt.Sprintf("%s matches no tensor of the model (its names: %s): nothing would be loaded; give the start of some of those names", o.opt("OnlyPrefix", o.prefix), strings.Join(names, ", "))
		if p := wrapperPrefix(file, specs); p != "" {
			msg += fmt.Sprintf(". The file's names start with %q where the model's do not: pass %s too (%s applies to the names it leaves)", p, o.opt("StripPrefix", p), o.opt("OnlyPrefix"))
		}
		return nil, errors.New(msg)
	}
	strict := o.strict
	if !o.strict && len(w.tensors) == 0 && len(errs) == 0 {
		// Strict(false) with nothing in common: a Fit "from the weights
		// of a file" that would start from the initial ones.
		errs = append(errs, errors.New("no tensor of the file matches one of the model by name: the Fit would start from the initial weights"))
		strict = true
	}
	if strict {
		for _, m := range w.missing {
			errs = append(errs, fmt.Errorf("tensor %s of the model is missing from the file", m))
		}
		for _, x := range w.extra {
			errs = append(errs, fmt.Errorf("the file has tensor %s that the model does not declare", x))
		}
	}
	if len(errs) == 0 {
		return w, nil
	}
	wrapper := wrapperPrefix(file, specs)
	switch p := wrapper; {
	case p == "module.":
		errs = append([]error{fmt.Errorf(`the file's tensor names start with %q, as the state_dict() of a model wrapped in DistributedDataParallel or DataParallel does: pass %s (PyTorch's consume_prefix_in_state_dict_if_present), or save model.module.state_dict() instead`, p, o.opt("StripPrefix", p))}, errs...)
	case p != "":
		errs = append([]error{fmt.Errorf(`the file's tensor names start with %q where the model's do not, as those of a wrapper holding the network as an attribute do (a LightningModule's self.model): pass %s`, p, o.opt("StripPrefix", p))}, errs...)
	}
	if o.strip != "" && stripped == 0 {
		// As PyTorch's, the prefix is stripped "if present": its absence
		// is only worth saying when the file does not match.
		errs = append([]error{fmt.Errorf("%s: no tensor name of the file starts with %q", o.opt("StripPrefix", o.strip), o.strip)}, errs...)
	}
	fix := "was it saved from another architecture?"
	if wrapper != "" {
		fix = "its names carry a wrapper's prefix: pass " + o.opt("StripPrefix", wrapper)
	} else if o.strict && len(w.missing)+len(w.extra) > 0 {
		fix += " To load the tensors that match and skip the rest, pass " + o.opt("Strict(false)")
		if o.prefix == "" {
			fix += ", or " + o.opt("OnlyPrefix", "backbone.") + " to load only the names under a prefix"
		}
	}
	return nil, fmt.Errorf("the file does not match the model (%s):\n%w", fix, errors.Join(errs...))
}

// sameWeightShape compares shapes, taking PyTorch's 0-dimensional scalars
// (BatchNorm's num_batches_tracked) and fulgur's one-element vectors as the
// same.
func sameWeightShape(a, b []int) bool {
	if len(a)+len(b) == 1 {
		n := 1
		for _, d := range append(append([]int(nil), a...), b...) {
			n *= d
		}
		return n == 1
	}
	return sameShape(a, b)
}

// loadWeights loads fo.weights into the set-up strategy on every rank.
func (t *Trainer) loadWeights(ctx context.Context, o *weightsOptions) error {
	o.name = t.cfg.SettingName
	path, err := o.path, error(nil)
	if path == CkptLast || path == CkptBest {
		path, err = t.checkpointPath(path)
	}
	var w *weightsLoad
	kind := ""
	if err == nil {
		var file map[string]fileTensor
		if file, kind, err = readWeightsFile(path); err == nil {
			if w, err = matchWeights(file, t.specs, t.dtype(), o); err != nil {
				err = fmt.Errorf("weights %s: %w", path, err)
			}
		}
	}
	if err := t.everyRankRead(ctx, "load weights", o.path, err); err != nil {
		return err
	}
	sd := &strategy.StateDict{Tensors: w.tensors}
	if len(w.tensors) < len(t.specs) {
		// The tensors not in the file keep the values the strategy gave
		// them (this rank's part of each, under a sharding strategy).
		own, err := t.strat.SaveState(ctx, strategy.SaveOptions{})
		if err != nil {
			return fmt.Errorf("load weights %s: %w", path, err)
		}
		loaded := map[string]bool{}
		for _, tn := range w.tensors {
			loaded[tn.Name] = true
		}
		for _, tn := range own.Tensors {
			if !loaded[tn.Name] && !strings.HasPrefix(tn.Name, strategy.OptimizerPrefix) {
				sd.Tensors = append(sd.Tensors, tn)
				loaded[tn.Name] = true
			}
		}
		// A tensor of which this rank holds nothing (fsdp: one inside
		// another rank's shard) is named with an empty span: the strategy
		// reads no value of it here.
		for _, s := range t.specs {
			if !loaded[s.Name] {
				tn := strategy.Tensor{Name: s.Name, Dtype: t.dtype(), Shape: append([]int(nil), s.Shape...)}
				if tn.Dtype == tensor.Float32 {
					tn.Data32 = []float32{}
				} else {
					tn.Data64 = []float64{}
				}
				sd.Tensors = append(sd.Tensors, tn)
			}
		}
	}
	lerr := t.strat.LoadState(ctx, sd)
	if lerr != nil {
		lerr = fmt.Errorf("load weights %s: strategy %s: %w", path, t.strat.Info().Name, lerr)
	}
	if err := t.everyRankOK(ctx, "load weights "+path, lerr); err != nil {
		return err
	}
	if !t.state.IsGlobalZero {
		return nil
	}
	ev := t.cfg.Log.Info().Str("path", path).Str("file", kind).Int("tensors", len(w.tensors))
	if o.strip != "" {
		ev = ev.Str("strip_prefix", o.strip).Int("stripped", w.stripped)
	}
	if o.prefix != "" {
		ev = ev.Str("only_prefix", o.prefix).Int("ignored_outside_prefix", w.ignored)
	}
	ev.Msg("Fit starts from the weights of a file, with a fresh optimizer at epoch 0")
	if len(w.missing)+len(w.extra) > 0 {
		t.cfg.Log.Warn().Str("path", path).Strs("missing_kept_initial", w.missing).Strs("unexpected_skipped", w.extra).
			Msg(o.opt("Strict(false)") + ": the model's tensors missing from the file keep their initial values, and the file's tensors the model does not declare are skipped")
	}
	return nil
}

// everyRankOK tells every rank whether a step that has no collective of its
// own succeeded on every rank, so that one failing rank fails them all
// instead of leaving the others in the first step's collectives.
func (t *Trainer) everyRankOK(ctx context.Context, what string, err error) error {
	failed, rerr := t.failedRank(ctx, err)
	if rerr != nil {
		return fmt.Errorf("%s: learn whether every rank succeeded: %w", what, errors.Join(err, rerr))
	}
	if err != nil {
		return err
	}
	if failed >= 0 {
		return fmt.Errorf("%s: failed on rank %d (its error says why)", what, failed)
	}
	return nil
}

// failedRank all-reduces whether err is set on each rank: the highest rank
// whose err was, -1 when none (and on a job of one rank, which has no
// collective), or the reduce's own error.
func (t *Trainer) failedRank(ctx context.Context, err error) (int, error) {
	info := t.strat.Info()
	if info.WorldSize <= 1 {
		return -1, nil
	}
	failed := []float64{0}
	if err != nil {
		failed[0] = float64(info.Rank + 1)
	}
	if rerr := t.strat.Reduce(ctx, failed, []float64{0}, []module.Reduce{module.Max}); rerr != nil {
		return -1, rerr
	}
	return int(failed[0]) - 1, nil
}

// LoadWeightsInto copies into store the parameters and buffers of the
// weights file at path, read as WithWeights reads it for a Fit: a
// safetensors state dict (PyTorch's or infer.SaveStateDict's) or a fulgur
// checkpoint (verified; its optimizer and loop position ignored), with the
// same options. OnlyPrefix("encoder.") takes a sub-module out of a whole
// model's file, as a Lightning user calls model.encoder(x) after
// load_from_checkpoint: the store declares the sub-module under the same
// scope (module.Builder.Scope("encoder")), and the file's other tensors
// are ignored. Values of another dtype are converted to the store's.
// Shapes must match, and without Strict(false) every tensor of the store
// (under OnlyPrefix) must be in the file and the file must hold no other;
// otherwise the error names each one and store is left unchanged. Tensors
// not loaded keep their values.
func LoadWeightsInto(path string, store *module.Store, opts ...WeightsOption) error {
	if store == nil {
		return errors.New("LoadWeightsInto: the store is nil: pass Trainer.Store() after setup, or infer's Model.Store()")
	}
	o := &weightsOptions{path: path, strict: true}
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	file, _, err := readWeightsFile(path)
	if err != nil {
		return err
	}
	specs := make([]module.Spec, 0, len(store.Entries()))
	for _, e := range store.Entries() {
		specs = append(specs, e.Spec)
	}
	w, err := matchWeights(file, specs, store.Dtype(), o)
	if err != nil {
		return fmt.Errorf("weights %s: %w", path, err)
	}
	for _, t := range w.tensors {
		e, _ := store.Lookup(t.Name)
		if d := store.Data32(); d != nil {
			copy(d[e.Offset:e.Offset+e.Len], t.Data32)
		} else {
			copy(store.Data64()[e.Offset:e.Offset+e.Len], t.Data64)
		}
	}
	return nil
}
