package trainer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
)

// A checkpoint is one safetensors file (see checkpoint_safetensors.go)
// holding the strategy's state dict (strategy.SaveState with Full: every
// tensor whole) and the trainer's own state:
//
//   - the model's parameters and buffers, one tensor each under its store
//     name, in store order, in the model's dtype: safetensors.safe_open or
//     load_file in Python reads them as they are;
//   - the optimizer's state buffers as tensors named "optimizer/<buffer>"
//     (for example "optimizer/exp_avg"), each covering the optimizer's span;
//   - in "__metadata__": "format" ("fulgur-checkpoint"), "format_version",
//     and JSON documents "fulgur.trainer" (loop position, global step, seed,
//     metrics), "fulgur.optimizer", "fulgur.scheduler", "fulgur.callbacks"
//     (each Stateful callback's bytes by name) and "fulgur.hparams";
//   - "fulgur.sha256": a JSON map from "tensor:<name>" and "meta:<key>" to
//     the SHA-256 of that tensor (name, dtype, shape and bytes) or metadata
//     entry. Every byte of the file is covered either by a checksum or by
//     the strict parse of the framing, so a flipped byte or a cut is
//     reported, naming the tensor or field.
//
// Files are written to a temporary file in the same directory, synced,
// renamed over the target and the directory synced: a crash mid-write leaves
// the previous file in place.

// CheckpointFormat is the "format" metadata value of fulgur checkpoints.
const CheckpointFormat = "fulgur-checkpoint"

// CheckpointVersion is the format version this package writes and the
// newest it reads. Version 2 stores Linear weights [out, in] (PyTorch's
// layout); version 1 stored them [in, out]. A version-1 file does not say
// which of its 2-D tensors are Linear weights (a square one has the same
// shape either way), so its 2-D tensors are refused with an error rather
// than guessed at, and fulgur before version 2 refuses version-2 files.
const CheckpointVersion = 2

// ErrCorruptCheckpoint is matched, with errors.Is, by the error of a Fit
// FromCheckpoint, of Validate, Test and Predict WithCheckpoint, of
// LoadWeights, VerifyCheckpoint and ReadCheckpointInfo
// when the file's contents are not a whole fulgur checkpoint: cut short, a
// byte changed since it was written (a checksum differs), a sharded
// checkpoint's shard file not the one its index was saved with, or not a
// checkpoint at all (another format, a weights-only state dict). A program
// that resumes from its newest checkpoint can fall back to an older one on
// it. The error's text says what is wrong; it does not match a file that
// cannot be read (a missing one matches os.ErrNotExist), a checkpoint newer
// than CheckpointVersion, nor a whole checkpoint that does not fit the
// model.
var ErrCorruptCheckpoint = errors.New("corrupt checkpoint")

// corruptError marks a checkpoint's content error as ErrCorruptCheckpoint
// and keeps its text.
type corruptError struct{ err error }

func (e corruptError) Error() string        { return e.err.Error() }
func (e corruptError) Unwrap() error        { return e.err }
func (e corruptError) Is(target error) bool { return target == ErrCorruptCheckpoint }

func corrupt(err error) error {
	if err == nil {
		return nil
	}
	return corruptError{err}
}

const (
	keyFormat    = "format"
	keyVersion   = "format_version"
	keyTrainer   = "fulgur.trainer"
	keyOptimizer = "fulgur.optimizer"
	keyScheduler = "fulgur.scheduler"
	keyCallbacks = "fulgur.callbacks"
	keyHParams   = "fulgur.hparams"
	keyModule    = "fulgur.module" // module.CheckpointSaver's bytes
	keySums      = "fulgur.sha256"
)

// loopPos is where a run stands in the fit loop, as a checkpoint taken now
// would resume it.
type loopPos struct {
	Epoch int `json:"epoch"`
	// Batch is the next training batch of Epoch to run; it equals the
	// epoch's batch count once all have run.
	Batch int `json:"batch_idx"`
	// Validated: the epoch's end-of-epoch logging and validation have run;
	// what remains is the per-epoch scheduler step and the epoch-end hooks.
	Validated bool `json:"validated"`
	// ValPending: a mid-epoch validation (ValCheckInterval) is due before
	// batch Batch runs.
	ValPending bool `json:"val_pending"`

	midWindow bool // inside a gradient accumulation window: not resumable
}

// epochsDone is how many epochs had run in full when the checkpoint was
// written: Epoch, plus one when all its training batches had run (the
// loop's end of the epoch counts it then, as endEpoch does).
func (ts ckptTrainer) epochsDone() int {
	if ts.TrainBatches > 0 && ts.Batch >= ts.TrainBatches {
		return ts.Epoch + 1
	}
	return ts.Epoch
}

type ckptTrainer struct {
	loopPos
	GlobalStep            int                `json:"global_step"`
	Seed                  uint64             `json:"seed"`
	Deterministic         bool               `json:"deterministic"`
	WorldSize             int                `json:"world_size"`
	Precision             string             `json:"precision"`
	Strategy              string             `json:"strategy"`
	TrainBatchSize        int                `json:"train_batch_size"`
	TrainBatches          int                `json:"train_batches"`
	AccumulateGradBatches int                `json:"accumulate_grad_batches"`
	Metrics               map[string]jfloat  `json:"metrics"`
	EpochAggs             map[string]ckptAgg `json:"epoch_aggregates"`
	LastTrainLoss         jfloat             `json:"last_train_loss"`
	Written               string             `json:"written"`
	// LogRows is how many LogMetrics calls rank 0 had made at GlobalStep
	// when the checkpoint was written (RowResumer); nil in older files.
	LogRows *int `json:"log_rows_at_step,omitempty"`
	// EpochCkpt is the default epoch checkpoint kept so far (Config's
	// default checkpoints), which a run resumed in the same run directory
	// replaces with its next one.
	EpochCkpt string `json:"default_epoch_checkpoint,omitempty"`
	// ValMetrics names the metrics a validation logged last
	// (Metrics.FromValidation).
	ValMetrics []string `json:"validation_metrics,omitempty"`
}

type ckptAgg struct {
	Reduce   int    `json:"reduce"`
	OnStep   bool   `json:"on_step"`
	OnEpoch  bool   `json:"on_epoch"`
	ProgBar  bool   `json:"prog_bar"`
	SyncDist bool   `json:"sync_dist"`
	Sum      jfloat `json:"sum"`
	Weight   jfloat `json:"weight"`
	Max      jfloat `json:"max"`
	Min      jfloat `json:"min"`
	N        int    `json:"n"`
	// Counts is a count metric's summed counts (module.Step.LogCounts).
	Counts []float64 `json:"counts,omitempty"`
}

// jfloat is a float64 that survives JSON when NaN or infinite.
type jfloat = strategy.JSONFloat

func dtypeName(dt tensor.Dtype) string {
	if dt == tensor.Float64 {
		return "F64"
	}
	return "F32"
}

// saveCheckpoint writes a checkpoint of the run to path; asked during a
// callback hook, it writes once every callback has run the hook. Every rank
// calls it at the same point; rank 0 writes.
func (t *Trainer) saveCheckpoint(ctx context.Context, path string) error {
	if path == "" {
		return errors.New("SaveCheckpoint: the path is empty: pass a file name such as checkpoints/last.ckpt")
	}
	if t.pos.midWindow {
		return fmt.Errorf("SaveCheckpoint at epoch %d batch %d: the batch is inside a gradient accumulation window (%s %d), whose partial gradients a checkpoint cannot hold: save after the optimizer step (when GlobalStep changes), and set %s to a multiple of %[3]s", t.state.Epoch, t.state.BatchIdx, t.cfg.name("AccumulateGradBatches"), t.accum, t.cfg.name("ValCheckInterval"))
	}
	if t.hooking {
		for _, s := range t.saves {
			if s.path == path {
				return nil
			}
		}
		t.saves = append(t.saves, pendingSave{owner: t.hookOwner, path: path})
		return nil
	}
	return t.writeCheckpoint(ctx, path)
}

type pendingSave struct{ owner, path string }

// savePending reports whether a callback asked for a checkpoint at path in
// the hook running now (State.SavePending).
func (t *Trainer) savePending(path string) bool {
	if !t.hooking {
		return false
	}
	for _, s := range t.saves {
		if s.path == path {
			return true
		}
	}
	return false
}

// SaveCheckpoint writes a checkpoint of the model, optimizer, scheduler,
// callbacks and loop position to path (rank 0 writes; call it on every
// rank), for example after Fit. During Fit, callbacks use
// State.SaveCheckpoint.
func (t *Trainer) SaveCheckpoint(ctx context.Context, path string) error {
	if ctx == nil {
		return errNilContext("SaveCheckpoint")
	}
	if t.strat == nil {
		return errors.New("SaveCheckpoint: nothing to save before Fit, Validate, Test or Predict has set the model up")
	}
	if path == "" {
		return errors.New("SaveCheckpoint: the path is empty: pass a file name such as model.ckpt")
	}
	return t.writeCheckpoint(ctx, path)
}

// writeCheckpoint writes the run's state to every path now, on rank 0,
// encoding it once.
func (t *Trainer) writeCheckpoint(ctx context.Context, paths ...string) error {
	if len(paths) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	defer t.span("checkpoint save")()
	if t.cfg.ShardedCheckpoint {
		return t.writeShardedCheckpoint(ctx, paths)
	}
	sd, err := t.strat.SaveState(ctx, strategy.SaveOptions{Full: true}) // every rank: it may gather shards
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", paths[0], err)
	}
	extra, err := t.moduleCheckpoint(ctx)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", paths[0], err)
	}
	if !t.state.IsGlobalZero {
		return nil
	}
	tensors, meta, err := t.encodeCheckpoint(sd, extra)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", paths[0], err)
	}
	for _, path := range paths {
		if err := writeCheckpointFile(&t.cfg, path, func(w io.Writer) error { return encodeSafetensors(w, tensors, meta) }); err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		if err := removeStaleShards(path, nil); err != nil {
			return err
		}
	}
	return nil
}

// encodeCheckpoint encodes sd's tensors (whole) and the run's state, with
// extra metadata entries (a sharded checkpoint's index lists its shards).
func (t *Trainer) encodeCheckpoint(sd *strategy.StateDict, extra map[string]string) ([]stTensor, map[string]string, error) {
	var tensors []stTensor
	for i := range sd.Tensors {
		tn := &sd.Tensors[i]
		if !tn.Whole() {
			return nil, nil, fmt.Errorf("strategy %s returned [%d, %d) of tensor %q, not all of its %d elements: a checkpoint file holds whole tensors", t.strat.Info().Name, tn.Lo, tn.Hi, tn.Name, tn.Size())
		}
		switch {
		case tn.Dtype == tensor.Float64 && strings.HasPrefix(tn.Name, strategy.OptimizerPrefix):
			tensors = append(tensors, optTensor(tn.Name, tn.Shape, tn.Data64, t.dtype() == tensor.Float32))
		case tn.Dtype == tensor.Float64:
			tensors = append(tensors, stTensor{Name: tn.Name, Dtype: "F64", Shape: tn.Shape, Data: f64Bytes(tn.Data64)})
		default:
			tensors = append(tensors, stTensor{Name: tn.Name, Dtype: "F32", Shape: tn.Shape, Data: f32Bytes(tn.Data32)})
		}
	}
	meta := map[string]string{keyFormat: CheckpointFormat, keyVersion: strconv.Itoa(CheckpointVersion)}
	put := func(key string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode %s: %w", key, err)
		}
		meta[key] = string(b)
		return nil
	}

	ts := ckptTrainer{
		loopPos: t.pos, GlobalStep: t.state.GlobalStep, Seed: t.cfg.Seed, Deterministic: t.cfg.Deterministic,
		WorldSize: t.state.WorldSize, Precision: t.cfg.Precision, Strategy: t.strat.Info().Name,
		TrainBatchSize: t.trainBS, TrainBatches: t.trainNB, AccumulateGradBatches: t.accum,
		Metrics: strategy.JSONFloats(t.state.Metrics), EpochAggs: map[string]ckptAgg{}, LastTrainLoss: jfloat(t.stats.LastTrainLoss),
		Written: t.cfg.Now().UTC().Format(time.RFC3339Nano),
	}
	ts.EpochCkpt = t.lastEpochCkpt
	ts.ValMetrics = slices.Sorted(maps.Keys(t.state.fromVal))
	if t.logStep == t.state.GlobalStep {
		rows := t.logRows
		ts.LogRows = &rows
	} else {
		ts.LogRows = new(int) // nothing logged at this step yet
	}
	for name, a := range t.epochAgg {
		if t.pos.Batch == 0 && !t.pos.Validated {
			break // a new epoch starts with no aggregates
		}
		ts.EpochAggs[name] = ckptAgg{
			Reduce: int(a.spec.Reduce), OnStep: a.spec.OnStep, OnEpoch: a.spec.OnEpoch, ProgBar: a.spec.ProgBar, SyncDist: a.spec.SyncDist,
			Sum: jfloat(a.sum), Weight: jfloat(a.weight), Max: jfloat(a.max), Min: jfloat(a.min), N: a.n, Counts: a.counts,
		}
	}
	if err := put(keyTrainer, ts); err != nil {
		return nil, nil, err
	}

	for blob, key := range map[string]string{strategy.BlobOptimizer: keyOptimizer, strategy.BlobScheduler: keyScheduler} {
		if b, ok := sd.Blobs[blob]; ok {
			meta[key] = string(b)
		}
	}
	cbs := map[string][]byte{}
	for _, cb := range t.cfg.Callbacks {
		sf, ok := cb.(Stateful)
		if !ok {
			continue
		}
		name := cb.Name()
		if _, dup := cbs[name]; dup {
			return nil, nil, fmt.Errorf("two stateful callbacks are named %q, so their states would collide: give each a distinct name", name)
		}
		b, err := stateDictOf(sf)
		if err != nil {
			return nil, nil, fmt.Errorf("callbacks/%s.StateDict: %w", name, err)
		}
		cbs[name] = b
	}
	if err := put(keyCallbacks, cbs); err != nil {
		return nil, nil, err
	}
	if h, ok := t.mod.(module.HParamser); ok {
		hp, err := hparamsOf(h)
		if err != nil {
			return nil, nil, err
		}
		if b, err := json.Marshal(hp); err == nil {
			meta[keyHParams] = string(b)
		} else {
			t.cfg.Log.Warn().Err(err).Msg("checkpoint: the module's HParams are not JSON-encodable; left out")
		}
	}

	for k, v := range extra {
		meta[k] = v
	}
	if err := signCheckpoint(tensors, meta); err != nil {
		return nil, nil, err
	}
	return tensors, meta, nil
}

// signCheckpoint adds keySums to meta: the SHA-256 of every tensor and
// metadata entry.
func signCheckpoint(tensors []stTensor, meta map[string]string) error {
	sums := map[string]string{}
	for _, tn := range tensors {
		sums["tensor:"+tn.Name] = tensorSum(tn)
	}
	for k, v := range meta {
		sums["meta:"+k] = metaSum(k, v)
	}
	b, err := json.Marshal(sums)
	if err != nil {
		return fmt.Errorf("encode %s: %w", keySums, err)
	}
	meta[keySums] = string(b)
	return nil
}

// optTensor stores an optimizer buffer in float32 when the model is float32
// and every value is a float32 exactly (always, for float32 optimizer
// state), else in float64.
func optTensor(name string, shape []int, v []float64, f32 bool) stTensor {
	if f32 {
		exact := true
		for _, x := range v {
			if float64(float32(x)) != x && !math.IsNaN(x) {
				exact = false
				break
			}
		}
		if exact {
			w := make([]float32, len(v))
			for i, x := range v {
				w[i] = float32(x)
			}
			return stTensor{Name: name, Dtype: "F32", Shape: shape, Data: f32Bytes(w)}
		}
	}
	return stTensor{Name: name, Dtype: "F64", Shape: shape, Data: f64Bytes(v)}
}

// checkpoint is a parsed, verified checkpoint file.
type checkpoint struct {
	version   int
	tensors   map[string]stTensor
	order     []string // tensor names in data order
	trainer   ckptTrainer
	opt       *strategy.OptimizerMeta
	sched     *strategy.SchedulerMeta
	callbacks map[string][]byte
	module    []byte // module.CheckpointSaver's entry; nil when none
	hparams   string
	meta      map[string]string
	// shards: a sharded checkpoint's spans, read from its shard files
	// (readShards); nil for a single file.
	shards []strategy.Tensor
}

// parseCheckpoint verifies the framing and every checksum of a whole file
// and decodes its trainer state.
func parseCheckpoint(b []byte) (*checkpoint, error) {
	f, err := decodeSafetensors(b)
	if err != nil {
		return nil, corrupt(err)
	}
	c := &checkpoint{tensors: map[string]stTensor{}, meta: f.Meta}
	for _, t := range f.Tensors {
		c.tensors[t.Name] = t
		c.order = append(c.order, t.Name)
	}
	if err := checkMeta(f.Meta, &c.version); err != nil {
		return nil, err
	}
	if _, ok := f.Meta[keySpans]; ok {
		return nil, errShardFile
	}
	var sums map[string]string
	if err := strictJSON(f.Meta[keySums], &sums); err != nil {
		return nil, corrupt(fmt.Errorf("metadata field %q: %v: the file is corrupt", keySums, err))
	}
	for _, t := range f.Tensors {
		want, ok := sums["tensor:"+t.Name]
		if !ok {
			return nil, corrupt(fmt.Errorf("tensor %q has no checksum in %q: the file is corrupt or was edited", t.Name, keySums))
		}
		if tensorSum(t) != want {
			return nil, corrupt(fmt.Errorf("tensor %q (%s %v): SHA-256 mismatch: its bytes, dtype or shape changed since it was written, so the file is corrupt", t.Name, t.Dtype, t.Shape))
		}
	}
	for k, v := range f.Meta {
		if k == keySums {
			continue
		}
		want, ok := sums["meta:"+k]
		if !ok {
			return nil, corrupt(fmt.Errorf("metadata field %q has no checksum in %q: the file is corrupt or was edited", k, keySums))
		}
		if metaSum(k, v) != want {
			return nil, corrupt(fmt.Errorf("metadata field %q: SHA-256 mismatch: the file is corrupt", k))
		}
	}
	for k := range sums {
		kind, name, _ := strings.Cut(k, ":")
		_, isT := c.tensors[name]
		_, isM := f.Meta[name]
		if (kind == "tensor" && !isT) || (kind == "meta" && !isM) || (kind != "tensor" && kind != "meta") {
			return nil, corrupt(fmt.Errorf("%q lists %q, which the file lacks: the file is corrupt", keySums, k))
		}
	}
	if err := strictJSON(f.Meta[keyTrainer], &c.trainer); err != nil {
		return nil, corrupt(fmt.Errorf("metadata field %q: %v", keyTrainer, err))
	}
	if err := c.trainer.validate(); err != nil {
		return nil, corrupt(fmt.Errorf("metadata field %q: %v", keyTrainer, err))
	}
	if s, ok := f.Meta[keyOptimizer]; ok {
		c.opt = &strategy.OptimizerMeta{}
		if err := strictJSON(s, c.opt); err != nil {
			return nil, corrupt(fmt.Errorf("metadata field %q: %v", keyOptimizer, err))
		}
	}
	if s, ok := f.Meta[keyScheduler]; ok {
		c.sched = &strategy.SchedulerMeta{}
		if err := strictJSON(s, c.sched); err != nil {
			return nil, corrupt(fmt.Errorf("metadata field %q: %v", keyScheduler, err))
		}
	}
	if s, ok := f.Meta[keyCallbacks]; ok {
		if err := strictJSON(s, &c.callbacks); err != nil {
			return nil, corrupt(fmt.Errorf("metadata field %q: %v", keyCallbacks, err))
		}
	}
	if s, ok := f.Meta[keyModule]; ok {
		if err := strictJSON(s, &c.module); err != nil {
			return nil, corrupt(fmt.Errorf("metadata field %q: %v", keyModule, err))
		}
	}
	c.hparams = f.Meta[keyHParams]
	return c, nil
}

func checkMeta(meta map[string]string, version *int) error {
	if meta[keyFormat] != CheckpointFormat {
		if _, ok := meta[keyFormat]; !ok {
			return corrupt(fmt.Errorf("the file is a safetensors file without fulgur's trainer state (no %q metadata): it holds weights only; resume needs a checkpoint written by the trainer", keyFormat))
		}
		return corrupt(fmt.Errorf("metadata field %q is %q, not %q: the file is not a fulgur checkpoint, or is corrupt", keyFormat, meta[keyFormat], CheckpointFormat))
	}
	v, err := strconv.Atoi(meta[keyVersion])
	if err != nil || v < 1 {
		return corrupt(fmt.Errorf("metadata field %q is %q: want a version number from 1 to %d: the file is corrupt", keyVersion, meta[keyVersion], CheckpointVersion))
	}
	if v > CheckpointVersion {
		return fmt.Errorf("metadata field %q is %d, newer than the %d this fulgur reads: upgrade fulgur to load it", keyVersion, v, CheckpointVersion)
	}
	*version = v
	if _, ok := meta[keySums]; !ok {
		return corrupt(fmt.Errorf("metadata field %q is missing: the file is corrupt or was edited", keySums))
	}
	return nil
}

func strictJSON(s string, v any) error {
	d := json.NewDecoder(strings.NewReader(s))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func (s *ckptTrainer) validate() error {
	var errs []error
	for name, v := range map[string]int{"epoch": s.Epoch, "batch_idx": s.Batch, "global_step": s.GlobalStep} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("field %q is %d: it is never negative, so the file is corrupt", name, v))
		}
	}
	for name, a := range s.EpochAggs {
		if a.Reduce < int(module.Mean) || a.Reduce > int(module.Min) {
			errs = append(errs, fmt.Errorf("field \"epoch_aggregates\": %q has reduce %d, not 0..3", name, a.Reduce))
		}
	}
	return errors.Join(errs...)
}

// resume loads the checkpoint at path into the set-up run and returns the
// epoch to start from; the batch position is left in t.resumeAt.
func (t *Trainer) resume(ctx context.Context, path string) (int, error) {
	c, err := readCheckpointFile(path)
	if err != nil {
		err = fmt.Errorf("resume: %w", err)
	}
	if err := t.everyRankRead(ctx, "resume from checkpoint", path, err); err != nil {
		return 0, err
	}
	if err := t.apply(ctx, c); err != nil {
		return 0, fmt.Errorf("resume from checkpoint %s: %w", path, err)
	}
	ts := c.trainer
	if t.strat.Info().GlobalZero { // every rank resumes the same: one line for the job
		t.cfg.Log.Info().Str("path", path).Int("epoch", ts.Epoch).Int("batch", ts.Batch).Int("global_step", ts.GlobalStep).Msg("resumed from checkpoint")
	}
	return ts.Epoch, nil
}

// everyRankRead tells every rank whether every rank read the checkpoint:
// one that could not (a shard file only on another machine's disk) would
// otherwise leave the others waiting in the first step's collectives until
// they time out. It returns this rank's error, or one naming a rank that
// failed.
func (t *Trainer) everyRankRead(ctx context.Context, what, path string, readErr error) error {
	failed, err := t.failedRank(ctx, readErr)
	if err != nil {
		return fmt.Errorf("%s %s: learn whether every rank read it: %w", what, path, errors.Join(readErr, err))
	}
	if readErr != nil {
		return readErr
	}
	if failed >= 0 {
		return fmt.Errorf("%s %s: rank %d could not read it (its error says why): every process reads the whole file, every shard file of a sharded checkpoint, so a job on several machines needs it on a shared filesystem that every machine sees", what, path, failed)
	}
	return nil
}

// apply checks everything that can be checked before changing anything,
// then restores the strategy's state (weights, optimizer, scheduler), the
// callbacks and the loop state.
func (t *Trainer) apply(ctx context.Context, c *checkpoint) error {
	sd, err := c.stateDict(t.dtype(), t.cfg.name("Precision"))
	if err != nil {
		return err
	}
	ts := c.trainer
	if ts.Seed != t.cfg.Seed {
		t.cfg.Log.Warn().Uint64("checkpoint_seed", ts.Seed).Uint64("seed", t.cfg.Seed).Msg("resuming with another Seed: dropout draws differ from the interrupted run's (the data order is the loaders' own Seed)")
	}
	if ts.WorldSize != t.state.WorldSize {
		t.cfg.Log.Warn().Int("checkpoint_world_size", ts.WorldSize).Int("world_size", t.state.WorldSize).Msg("resuming with another world size: the epoch goes on at the samples the checkpoint's ranks had trained, rounded down to whole batches of this world")
	}
	if c.opt == nil {
		return fmt.Errorf("metadata field %q is missing: the checkpoint holds no optimizer state", keyOptimizer)
	}
	if sched := t.sched; c.sched == nil && sched != nil {
		return fmt.Errorf("metadata field %q is missing: the checkpoint was written without a scheduler but the module configures %T: configure the same (no) scheduler to resume", keyScheduler, sched)
	}
	if err := t.strat.LoadState(ctx, sd); err != nil {
		return fmt.Errorf("strategy %s: load the checkpoint's state: %w", t.strat.Info().Name, err)
	}
	// The module before the callbacks, as Lightning restores them.
	if err := t.loadModuleCheckpoint(ctx, c); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, cb := range t.cfg.Callbacks {
		sf, ok := cb.(Stateful)
		if !ok {
			continue
		}
		name := cb.Name()
		b, ok := c.callbacks[name]
		if !ok {
			t.cfg.Log.Warn().Str("callback", name).Msg("the checkpoint holds no state for this callback; it starts fresh")
			continue
		}
		seen[name] = true
		if err := guarded(func() error { return sf.LoadStateDict(b) }); err != nil {
			return fmt.Errorf("callbacks/%s.LoadStateDict: %w", name, err)
		}
	}
	for name := range c.callbacks {
		if !seen[name] {
			t.cfg.Log.Warn().Str("callback", name).Msg("the checkpoint holds state for a callback this run lacks; ignored")
		}
	}

	t.state.GlobalStep = ts.GlobalStep
	t.state.Epoch = ts.Epoch
	t.state.Metrics = strategy.Floats(ts.Metrics)
	t.state.fromVal = nil
	for _, n := range ts.ValMetrics {
		if v, ok := t.state.Metrics[n]; ok {
			t.state.setMetric(n, v, true)
		}
	}
	t.stats.LastTrainLoss = float64(ts.LastTrainLoss)
	// The run's epochs so far, which a Fit with nothing left to train
	// reports as they are (an epoch it completes sets its own count).
	t.stats.Epochs = ts.epochsDone()
	t.logStep, t.logRows = ts.GlobalStep, -1
	if ts.EpochCkpt != "" && t.state.LogDir != "" && sameDir(filepath.Dir(ts.EpochCkpt), filepath.Join(t.state.LogDir, "checkpoints")) {
		// Resumed in the same run directory: its epoch checkpoint is this
		// run's previous one (another run directory's stays untouched).
		t.lastEpochCkpt = ts.EpochCkpt
	}
	if ts.LogRows != nil {
		t.logRows = *ts.LogRows
	}
	pos := ts.loopPos
	t.resumeWorld = ts.WorldSize // pos.Batch is converted to this world by takeUpPosition
	t.resumeAt = &pos
	t.resumeAggs = map[string]*agg{}
	for name, a := range ts.EpochAggs {
		t.resumeAggs[name] = &agg{
			spec: module.LogSpec{OnStep: a.OnStep, OnEpoch: a.OnEpoch, ProgBar: a.ProgBar, SyncDist: a.SyncDist, Reduce: module.Reduce(a.Reduce)},
			sum:  float64(a.Sum), weight: float64(a.Weight), max: float64(a.Max), min: float64(a.Min), n: a.N, counts: a.Counts,
		}
	}
	t.resumeBS = ts.TrainBatchSize
	return nil
}

// batchAtWorld is where a run at world ranks with per-rank batches of bs
// re-enters the epoch that a checkpoint of a run at from ranks with batches
// of fromBS left at p.Batch (each rank's batch index). The
// DistributedSampler deals the epoch's order out in turn, so the ranks at
// from had trained its first p.Batch×from×fromBS samples: that global
// offset carries over, rounded down to whole global batches of the new
// world, so that no sample of the epoch is skipped and less than one global
// batch is trained twice (with gradient accumulation, down to a whole
// window of accum batches, so no window is cut). An elastic restart with
// fewer ranks resumes this way. At the same world size the batch index
// carries over as it is (a changed batch size is warned about in the loop).
func batchAtWorld(p loopPos, from, world, fromBS, bs, accum int) int {
	if from == world || from < 1 || world < 1 || bs < 1 || p.Batch == 0 {
		return p.Batch
	}
	if p.Validated {
		return math.MaxInt32 // the epoch's batches have all run at any world size
	}
	if fromBS < 1 { // a checkpoint that did not record its batch size
		fromBS = bs
	}
	b := p.Batch * from * fromBS / (world * bs)
	if accum > 1 {
		b -= b % accum
	}
	return b
}

// stateDict returns the checkpoint's tensors and optimizer and scheduler
// state as a strategy state dict of whole tensors, after refusing what no
// model of dtype can load: tensors of another precision, and the 2-D
// tensors of a version-1 file.
func (c *checkpoint) stateDict(dtype tensor.Dtype, precision string) (*strategy.StateDict, error) {
	dt := dtypeName(dtype)
	sd := &strategy.StateDict{Blobs: map[string][]byte{}}
	var errs []error
	// Tensors of another precision, each named once (a sharded checkpoint
	// has a piece of a tensor per shard), reported as one error.
	var otherDtype []string
	fileDtype := ""
	seen := map[string]bool{}
	wrongDtype := func(name, dtype string) {
		if !seen[name] {
			seen[name] = true
			otherDtype = append(otherDtype, fmt.Sprintf("%q", name))
		}
		fileDtype = dtype
	}
	for _, name := range c.order {
		tn := c.tensors[name]
		st := strategy.Tensor{Name: name, Shape: tn.Shape}
		if strings.HasPrefix(name, strategy.OptimizerPrefix) {
			st.Dtype, st.Data64 = tensor.Float64, tn.Float64s()
			st.Hi = len(st.Data64)
			if c.opt != nil {
				// The buffers cover the optimizer's span of the parameters.
				st.Shape, st.Lo, st.Hi = []int{c.opt.Hi}, c.opt.Lo, c.opt.Lo+len(st.Data64)
			}
			sd.Tensors = append(sd.Tensors, st)
			continue
		}
		switch {
		case tn.Dtype != dt:
			wrongDtype(name, tn.Dtype)
			continue
		case c.version < 2 && len(tn.Shape) == 2:
			errs = append(errs, fmt.Errorf("tensor %q %v: the checkpoint is format_version %d, which stored Linear weights [in, out]; fulgur now stores them [out, in] as PyTorch does, and the file cannot say which 2-D tensors are Linear weights: train again, or transpose the Linear weights with the fulgur that wrote the file", name, tn.Shape, c.version))
			continue
		}
		st.Dtype = dtype
		if dtype == tensor.Float32 {
			st.Data32 = make([]float32, len(tn.Data)/4)
			for i := range st.Data32 {
				st.Data32[i] = math.Float32frombits(binary.LittleEndian.Uint32(tn.Data[4*i:]))
			}
			st.Hi = len(st.Data32)
		} else {
			st.Data64 = tn.Float64s()
			st.Hi = len(st.Data64)
		}
		sd.Tensors = append(sd.Tensors, st)
	}
	for _, st := range c.shards {
		if !strings.HasPrefix(st.Name, strategy.OptimizerPrefix) && st.Dtype != dtype {
			wrongDtype(st.Name, dtypeName(st.Dtype))
			continue
		}
		sd.Tensors = append(sd.Tensors, st)
	}
	if len(otherDtype) > 0 {
		errs = append([]error{fmt.Errorf("the checkpoint holds %s tensors (%s) but the model computes in %s: set %s to %q to match the checkpoint",
			fileDtype, strings.Join(otherDtype, ", "), dt, precision, map[string]string{"F32": "32", "F64": "64"}[fileDtype])}, errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for key, blob := range map[string]string{keyOptimizer: strategy.BlobOptimizer, keyScheduler: strategy.BlobScheduler} {
		if v, ok := c.meta[key]; ok {
			sd.Blobs[blob] = []byte(v)
		}
	}
	return sd, nil
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// CheckpointInfo describes a checkpoint from its header.
type CheckpointInfo struct {
	Path    string
	Version int
	// Epoch and BatchIdx are where training resumes: the next batch to run.
	Epoch    int
	BatchIdx int
	// EpochsDone is how many epochs the weights were trained for in full:
	// Epoch, plus one when all of Epoch's batches had run (what Stats.Epochs
	// and the epoch of Validate's and Test's logged rows take from it).
	EpochsDone int
	GlobalStep int
	// Tensors lists the model's tensor names (optimizer state excluded), in
	// file order.
	Tensors []string
	// BestModelPath is the best checkpoint a ModelCheckpoint had recorded
	// when this one was written ("" when none did).
	BestModelPath string
	// HParams is what the module's HParams returned when the checkpoint was
	// written, read back from JSON (numbers are float64), nil when the
	// module had none: a program holding only the file builds the module
	// again from them (Lightning's checkpoint["hyper_parameters"]), since a
	// module of other sizes cannot load its weights.
	HParams map[string]any
	// Written is when the checkpoint was saved, as it records it (the
	// saving trainer's clock); zero when the record is unreadable. Unlike
	// ModTime, a copy that does not keep timestamps leaves it as it was.
	Written time.Time
	ModTime time.Time
	Size    int64
}

// ReadCheckpointInfo reads a checkpoint's header (not its tensor data) and
// checks the checksum of its trainer state. Use VerifyCheckpoint to check
// every byte.
func ReadCheckpointInfo(path string) (CheckpointInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return CheckpointInfo{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return CheckpointInfo{}, err
	}
	var nb [8]byte
	if _, err := io.ReadFull(f, nb[:]); err != nil {
		return CheckpointInfo{}, corrupt(fmt.Errorf("checkpoint %s: the file is %d bytes, shorter than the 8-byte header length: it is truncated or not a checkpoint", path, fi.Size()))
	}
	n := binary.LittleEndian.Uint64(nb[:])
	if n > maxHeader || int64(n) > fi.Size()-8 {
		return CheckpointInfo{}, corrupt(fmt.Errorf("checkpoint %s: the header length field says %d bytes but the file has %d after it: it is truncated, corrupt, or not a checkpoint", path, n, fi.Size()-8))
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(f, hb); err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	var hdr struct {
		Meta map[string]string `json:"__metadata__"`
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimRight(hb, " "), &raw); err != nil {
		return CheckpointInfo{}, corrupt(fmt.Errorf("checkpoint %s: the header is not a JSON object: %v: the file is corrupt", path, err))
	}
	if m, ok := raw["__metadata__"]; ok {
		if err := json.Unmarshal(m, &hdr.Meta); err != nil {
			return CheckpointInfo{}, corrupt(fmt.Errorf("checkpoint %s: header field __metadata__: %v", path, err))
		}
	}
	info := CheckpointInfo{Path: path, ModTime: fi.ModTime(), Size: fi.Size()}
	if err := checkMeta(hdr.Meta, &info.Version); err != nil {
		return info, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if _, ok := hdr.Meta[keySpans]; ok {
		return info, shardFileError(path)
	}
	var sums map[string]string
	if err := json.Unmarshal([]byte(hdr.Meta[keySums]), &sums); err != nil || sums["meta:"+keyTrainer] != metaSum(keyTrainer, hdr.Meta[keyTrainer]) {
		return info, corrupt(fmt.Errorf("checkpoint %s: metadata field %q: SHA-256 mismatch: the file is corrupt", path, keyTrainer))
	}
	var ts ckptTrainer
	if err := strictJSON(hdr.Meta[keyTrainer], &ts); err != nil {
		return info, corrupt(fmt.Errorf("checkpoint %s: metadata field %q: %v", path, keyTrainer, err))
	}
	info.Epoch, info.BatchIdx, info.GlobalStep, info.EpochsDone = ts.Epoch, ts.Batch, ts.GlobalStep, ts.epochsDone()
	if w, err := time.Parse(time.RFC3339Nano, ts.Written); err == nil {
		info.Written = w
	}
	if hp, ok := hdr.Meta[keyHParams]; ok {
		if sums["meta:"+keyHParams] != metaSum(keyHParams, hp) {
			return info, corrupt(fmt.Errorf("checkpoint %s: metadata field %q: SHA-256 mismatch: the file is corrupt", path, keyHParams))
		}
		if err := json.Unmarshal([]byte(hp), &info.HParams); err != nil {
			return info, corrupt(fmt.Errorf("checkpoint %s: metadata field %q: %v: the file is corrupt", path, keyHParams, err))
		}
	}
	if cb, ok := hdr.Meta[keyCallbacks]; ok {
		if sums["meta:"+keyCallbacks] != metaSum(keyCallbacks, cb) {
			return info, corrupt(fmt.Errorf("checkpoint %s: metadata field %q: SHA-256 mismatch: the file is corrupt", path, keyCallbacks))
		}
		info.BestModelPath = bestRecorded(cb)
	}
	type named struct {
		name string
		off  int
	}
	var ns []named
	for k, r := range raw {
		if k == "__metadata__" || strings.HasPrefix(k, strategy.OptimizerPrefix) {
			continue
		}
		var e stHeaderEntry
		if err := json.Unmarshal(r, &e); err == nil {
			ns = append(ns, named{k, e.Offsets[0]})
		}
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i].off < ns[j].off })
	for _, x := range ns {
		info.Tensors = append(info.Tensors, x.name)
	}
	return info, nil
}

// VerifyCheckpoint reads a whole checkpoint and checks its framing and
// every checksum: a file that fails matches ErrCorruptCheckpoint.
func VerifyCheckpoint(path string) (CheckpointInfo, error) {
	info, err := ReadCheckpointInfo(path)
	if err != nil {
		return info, err
	}
	_, err = readCheckpointFile(path)
	return info, err
}

// LoadWeights copies the parameters and buffers of the checkpoint at path
// into store, after checking every checksum and that every tensor's name,
// dtype and shape match. Nothing else of the run is restored.
func LoadWeights(path string, store *module.Store) error {
	if store == nil {
		return errors.New("LoadWeights: the store is nil: pass Trainer.Store() after setup")
	}
	sd, _, err := readStateDict(path, store.Dtype(), "Precision")
	if err != nil {
		return err
	}
	if err := strategy.LoadStore(sd, store); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return nil
}

// readStateDict reads and verifies the checkpoint at path and returns its
// state for a model of dtype; precision names the setting that picks it.
func readStateDict(path string, dtype tensor.Dtype, precision string) (*strategy.StateDict, *checkpoint, error) {
	c, err := readCheckpointFile(path)
	if err != nil {
		return nil, nil, err
	}
	sd, err := c.stateDict(dtype, precision)
	if err == nil && c.shards != nil {
		sd, err = wholeTensors(sd)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return sd, c, nil
}

// LatestCheckpoint returns the newest checkpoint (*.ckpt) under root: the
// one written last by the time each records (CheckpointInfo.Written), then
// by modification time, then by global step. Files that are not readable
// checkpoints are skipped.
func LatestCheckpoint(root string) (string, error) {
	infos, skipped, err := listCheckpoints(root)
	if err != nil {
		return "", err
	}
	var best *CheckpointInfo
	for i := range infos {
		if best == nil || newerCheckpoint(infos[i], *best) {
			best = &infos[i]
		}
	}
	if best == nil {
		msg := fmt.Sprintf("no checkpoint (*.ckpt) under %s", root)
		if len(skipped) > 0 {
			msg += "; unreadable: " + strings.Join(skipped, "; ")
		}
		return "", errors.New(msg)
	}
	return best.Path, nil
}

// newerCheckpoint orders checkpoints for "latest" and "last": by the time
// each records it was written, which a copy without timestamps (cp -r, a
// download) keeps where it renews the modification time; then, for files
// that record the same time (copies of one file) or none, by modification
// time; then by global step. Not by global step first: a fresh run written
// after a longer one has fewer steps and is still the newest, as Lightning's
// "last" (by modification time) takes it.
func newerCheckpoint(a, b CheckpointInfo) bool {
	if !a.Written.IsZero() && !b.Written.IsZero() && !a.Written.Equal(b.Written) {
		return a.Written.After(b.Written)
	}
	return a.ModTime.After(b.ModTime) || (a.ModTime.Equal(b.ModTime) && a.GlobalStep > b.GlobalStep)
}

// skipBatches returns l starting its epochs at batch first, for a run that
// resumes mid-epoch: the sampler's order is cut, so the skipped batches are
// never read.
func skipBatches(l *data.Loader, first int) *data.Loader {
	if first <= 0 {
		return l
	}
	c := l.Config()
	return l.WithSampler(skipSampler{s: c.Sampler, n: first * c.BatchSize})
}

type skipSampler struct {
	s data.Sampler
	n int
}

func (k skipSampler) Order(epoch, n int) ([]int, []bool) {
	idx, pad := k.s.Order(epoch, n)
	cut := min(k.n, len(idx))
	if pad != nil {
		pad = pad[cut:]
	}
	return idx[cut:], pad
}

func (k skipSampler) Validate() error {
	if v, ok := k.s.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}
