package trainer

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
)

// A sharded checkpoint (Config.ShardedCheckpoint) is an index file at the
// checkpoint's path, a fulgur checkpoint without tensors whose metadata
// lists its shard files under keyShards, and one shard file per rank beside
// it, PATH.rank<R>-of-<N>: a fulgur checkpoint (format, version, checksums)
// holding the spans rank R's SaveState returned, each stored flat as
// "<name>@<lo>" with its global tensor's name, shape and span under
// keySpans.
//
// The index also records, under keyShardSums, a digest of each shard file
// it was saved with (shardDigest), and reading refuses a shard of another
// save beside it (copied there, or written by another job saving to the
// same path) instead of assembling a model from two saves. A save over an
// earlier one writes the other set of names (shardPath's slots), so a rank
// killed during a save leaves the earlier index beside its own shards.
const (
	keyShards    = "fulgur.shards"
	keySpans     = "fulgur.spans"
	keyShardSums = "fulgur.shard_digests"
)

// shardDigestWords is how many 16-bit words of a shard's digest the ranks
// exchange (each is exact in a float64 of the strategy's Reduce).
const shardDigestWords = 4

// shardDigest identifies a shard file by its checksums (keySums, which
// cover every tensor and metadata field): the first 64 bits of their
// SHA-256, as 16 hex digits.
func shardDigest(meta map[string]string) string {
	s := sha256.Sum256([]byte(meta[keySums]))
	return hex.EncodeToString(s[:2*shardDigestWords])
}

type ckptSpan struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
	Lo    int    `json:"lo"`
	Hi    int    `json:"hi"`
}

// shardPath is rank r of n's shard file of the checkpoint at path, in
// slot 0 (PATH.rank<R>-of-<N>) or 1 (the same with altSuffix). A save over
// an earlier one at the same world size writes the slot its index does not
// name (freeSlot), so the earlier checkpoint stays whole until the new index
// replaces it: a rank that dies before writing its shard (an elastic job's
// rank killed at a checkpoint step) leaves the earlier save to resume from.
func shardPath(path string, r, n, slot int) string {
	p := fmt.Sprintf("%s.rank%d-of-%d", path, r, n)
	if slot == 1 {
		p += altSuffix
	}
	return p
}

const altSuffix = ".alt"

// shardFileName matches a shard file's name (shardPath): the index's name,
// the rank and the ranks.
var shardFileName = regexp.MustCompile(`^(.+)\.rank(\d+)-of-(\d+)(\.alt)?$`)

// freeSlot is the slot of shardPath that a sharded save of n ranks at
// path writes: the one that the index there now (if any) does not name.
func freeSlot(path string, n int) int {
	// The header only: PATH may hold a whole checkpoint of a save that was
	// not sharded.
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var nb [8]byte
	if _, err := io.ReadFull(f, nb[:]); err != nil {
		return 0
	}
	hn := binary.LittleEndian.Uint64(nb[:])
	if hn > maxHeader {
		return 0
	}
	hb := make([]byte, hn)
	if _, err := io.ReadFull(f, hb); err != nil {
		return 0
	}
	var hdr struct {
		Meta map[string]string `json:"__metadata__"`
	}
	var files []string
	if json.Unmarshal(hb, &hdr) != nil || json.Unmarshal([]byte(hdr.Meta[keyShards]), &files) != nil {
		return 0
	}
	if slices.Contains(files, filepath.Base(shardPath(path, 0, n, 0))) {
		return 1
	}
	return 0
}

// errShardFile is parseCheckpoint's error for one rank's shard file, which
// readCheckpointFile turns into shardFileError.
var errShardFile = errors.New("a shard file")

// shardFileError says that path, read as a checkpoint, is one rank's shard
// file of a sharded checkpoint, and names the index to pass instead (these
// files lie beside it, so a user picks one: before, the error was the
// shard's missing trainer state, 'metadata field "fulgur.trainer": EOF').
func shardFileError(path string) error {
	m := shardFileName.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return fmt.Errorf("checkpoint %s: the file is one rank's shard of a sharded checkpoint, which holds part of each tensor: pass the checkpoint's index file, which reads every shard", path)
	}
	index := filepath.Join(filepath.Dir(path), m[1])
	return fmt.Errorf("checkpoint %s: the file is rank %s's shard of the %s-rank sharded checkpoint %s, which holds part of each tensor: pass the index, %s, which reads every shard", path, m[2], m[3], index, index)
}

// readCheckpointFile reads and verifies the checkpoint at path: every
// checksum, and every shard when it is a sharded checkpoint's index.
func readCheckpointFile(path string) (*checkpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := parseCheckpoint(b)
	if err == nil {
		err = c.readShards(path)
	}
	if errors.Is(err, errShardFile) {
		return nil, shardFileError(path)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return c, nil
}

// writeShardedCheckpoint writes every rank's shard of the state to each
// path, then (rank 0, once every rank has written) the index.
func (t *Trainer) writeShardedCheckpoint(ctx context.Context, paths []string) error {
	sd, err := t.strat.SaveState(ctx, strategy.SaveOptions{})
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", paths[0], err)
	}
	info := t.strat.Info()
	r, n := info.Rank, info.WorldSize
	// Every rank asks its module, as with one file; a failure is told to
	// the others with the shards'.
	extra, werr := t.moduleCheckpoint(ctx)
	tensors, meta, err := encodeShard(sd, t.dtype())
	if err != nil && werr == nil {
		werr = err
	}
	// Rank 0 picks each path's free slot (the ranks may not all see the
	// file there, on several machines without a shared filesystem) and
	// every rank learns it.
	slots := make([]float64, len(paths))
	ops := make([]module.Reduce, max(len(paths), 1+n*shardDigestWords))
	for i := range ops {
		ops[i] = module.Max
	}
	if t.state.IsGlobalZero {
		for i, path := range paths {
			slots[i] = float64(freeSlot(path, n))
		}
	}
	if err := t.strat.Reduce(ctx, slots, make([]float64, len(slots)), ops[:len(slots)]); err != nil {
		return fmt.Errorf("checkpoint %s: %w", paths[0], err)
	}
	for i, path := range paths {
		if werr != nil {
			break
		}
		werr = writeCheckpointFile(&t.cfg, shardPath(path, r, n, int(slots[i])), func(w io.Writer) error { return encodeSafetensors(w, tensors, meta) })
	}
	// Every rank learns whether every shard is written before the index
	// names them, and rank 0 each shard's digest, in words of 16 bits
	// (the others' slots 0, so Max gathers them).
	failed := make([]float64, 1+n*shardDigestWords)
	if werr != nil {
		failed[0] = 1
	} else {
		d, _ := hex.DecodeString(shardDigest(meta))
		for i := range shardDigestWords {
			failed[1+r*shardDigestWords+i] = float64(int(d[2*i])<<8 | int(d[2*i+1]))
		}
	}
	if err := t.strat.Reduce(ctx, failed, make([]float64, len(failed)), ops[:len(failed)]); err != nil {
		return fmt.Errorf("checkpoint %s: %w", paths[0], errors.Join(werr, err))
	}
	if werr != nil {
		return fmt.Errorf("checkpoint %s: rank %d's shard: %w", paths[0], r, werr)
	}
	if failed[0] > 0 {
		return fmt.Errorf("checkpoint %s: another rank could not write its shard (its error names it)", paths[0])
	}
	if !t.state.IsGlobalZero {
		return nil
	}
	digests := make([]string, n)
	for q := range digests {
		d := make([]byte, 2*shardDigestWords)
		for i := range shardDigestWords {
			w := int(failed[1+q*shardDigestWords+i])
			d[2*i], d[2*i+1] = byte(w>>8), byte(w)
		}
		digests[q] = hex.EncodeToString(d)
	}
	sums, err := json.Marshal(digests)
	if err != nil {
		return err
	}
	for i, path := range paths {
		files := make([]string, n)
		for q := range files {
			files[q] = filepath.Base(shardPath(path, q, n, int(slots[i])))
		}
		b, err := json.Marshal(files)
		if err != nil {
			return err
		}
		if extra == nil {
			extra = map[string]string{}
		}
		extra[keyShards] = string(b)
		extra[keyShardSums] = string(sums)
		idx, imeta, err := t.encodeCheckpoint(&strategy.StateDict{Blobs: sd.Blobs}, extra)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		if err := writeCheckpointFile(&t.cfg, path, func(w io.Writer) error { return encodeSafetensors(w, idx, imeta) }); err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		if err := removeStaleShards(path, files); err != nil {
			return err
		}
	}
	return nil
}

// removeStaleShards deletes the shard files beside the checkpoint at path
// that its index (just written; naming files, nil for a single file) does
// not name: those of the save before it (the other slot), of an earlier
// save at another world size, or sharded where this one is not, which
// nothing would ever read or delete.
func removeStaleShards(path string, files []string) error {
	shards, _ := filepath.Glob(globEscape(path) + ".rank*-of-*")
	var errs []error
	for _, p := range shards {
		if slices.Contains(files, filepath.Base(p)) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("checkpoint %s: remove the shard files of an earlier save: %w", path, errors.Join(errs...))
	}
	return nil
}

// encodeShard stores sd's spans flat, named "<name>@<lo>", with their
// global tensors under keySpans.
func encodeShard(sd *strategy.StateDict, dtype tensor.Dtype) ([]stTensor, map[string]string, error) {
	var tensors []stTensor
	spans := map[string]ckptSpan{}
	for i := range sd.Tensors {
		tn := &sd.Tensors[i]
		key := tn.Name + "@" + strconv.Itoa(tn.Lo)
		if _, dup := spans[key]; dup {
			return nil, nil, fmt.Errorf("the state holds two spans of %q starting at %d", tn.Name, tn.Lo)
		}
		spans[key] = ckptSpan{Name: tn.Name, Shape: tn.Shape, Lo: tn.Lo, Hi: tn.Hi}
		shape := []int{tn.Hi - tn.Lo}
		switch {
		case tn.Dtype == tensor.Float64 && strings.HasPrefix(tn.Name, strategy.OptimizerPrefix):
			tensors = append(tensors, optTensor(key, shape, tn.Data64, dtype == tensor.Float32))
		case tn.Dtype == tensor.Float64:
			tensors = append(tensors, stTensor{Name: key, Dtype: "F64", Shape: shape, Data: f64Bytes(tn.Data64)})
		default:
			tensors = append(tensors, stTensor{Name: key, Dtype: "F32", Shape: shape, Data: f32Bytes(tn.Data32)})
		}
	}
	b, err := json.Marshal(spans)
	if err != nil {
		return nil, nil, err
	}
	meta := map[string]string{keyFormat: CheckpointFormat, keyVersion: strconv.Itoa(CheckpointVersion), keySpans: string(b)}
	if err := signCheckpoint(tensors, meta); err != nil {
		return nil, nil, err
	}
	return tensors, meta, nil
}

// readShards reads and verifies the shard files the index c (read from
// path) lists, into c.shards; it does nothing for a single-file
// checkpoint.
func (c *checkpoint) readShards(path string) error {
	v, ok := c.meta[keyShards]
	if !ok {
		return nil
	}
	var files []string
	if err := strictJSON(v, &files); err != nil || len(files) == 0 {
		return corrupt(fmt.Errorf("metadata field %q: %v: the index is corrupt", keyShards, err))
	}
	// Indexes written before the digests were recorded have none.
	var digests []string
	if v, ok := c.meta[keyShardSums]; ok {
		if err := strictJSON(v, &digests); err != nil || len(digests) != len(files) {
			return corrupt(fmt.Errorf("metadata field %q: %d digests for %d shard files (%v): the index is corrupt", keyShardSums, len(digests), len(files), err))
		}
	}
	c.shards = []strategy.Tensor{}
	for i, f := range files {
		if f != filepath.Base(f) {
			return corrupt(fmt.Errorf("metadata field %q names %q, not a file beside the index: the index is corrupt", keyShards, f))
		}
		sp := filepath.Join(filepath.Dir(path), f)
		b, err := os.ReadFile(sp)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("shard %s: %w: every process reads every rank's shard file of a sharded checkpoint, beside its index, so a job on several machines needs them on a shared filesystem that every machine sees (or a copy of all of them beside the index on each)", f, err)
		}
		if err != nil {
			return fmt.Errorf("shard %s: %w (a sharded checkpoint needs every rank's file beside its index)", f, err)
		}
		s, digest, err := parseShard(b)
		if err != nil {
			return fmt.Errorf("shard %s: %w", f, err)
		}
		if digests != nil && digest != digests[i] {
			return corrupt(fmt.Errorf("shard %s is not the file the index was saved with (its digest is %s, the index recorded %s): it is of another save (a shard file copied there, or another job saving to the same path); resume from another checkpoint, or put this save's shard files beside it", f, digest, digests[i]))
		}
		c.shards = append(c.shards, s...)
	}
	return nil
}

// parseShard verifies a shard file and returns its spans and its digest.
func parseShard(b []byte) ([]strategy.Tensor, string, error) {
	f, err := decodeSafetensors(b)
	if err != nil {
		return nil, "", corrupt(err)
	}
	var version int
	if err := checkMeta(f.Meta, &version); err != nil {
		return nil, "", err
	}
	var sums map[string]string
	if err := strictJSON(f.Meta[keySums], &sums); err != nil {
		return nil, "", corrupt(fmt.Errorf("metadata field %q: %v: the file is corrupt", keySums, err))
	}
	for k, v := range f.Meta {
		if k != keySums && sums["meta:"+k] != metaSum(k, v) {
			return nil, "", corrupt(fmt.Errorf("metadata field %q: SHA-256 mismatch: the file is corrupt", k))
		}
	}
	var spans map[string]ckptSpan
	if err := strictJSON(f.Meta[keySpans], &spans); err != nil {
		return nil, "", corrupt(fmt.Errorf("metadata field %q: %v: the file is corrupt", keySpans, err))
	}
	var out []strategy.Tensor
	for _, tn := range f.Tensors {
		if sums["tensor:"+tn.Name] != tensorSum(tn) {
			return nil, "", corrupt(fmt.Errorf("tensor %q (%s %v): SHA-256 mismatch: the file is corrupt", tn.Name, tn.Dtype, tn.Shape))
		}
		sp, ok := spans[tn.Name]
		if !ok {
			return nil, "", corrupt(fmt.Errorf("tensor %q has no span in %q: the file is corrupt", tn.Name, keySpans))
		}
		st := strategy.Tensor{Name: sp.Name, Shape: sp.Shape, Lo: sp.Lo, Hi: sp.Hi}
		switch {
		case strings.HasPrefix(sp.Name, strategy.OptimizerPrefix):
			st.Dtype, st.Data64 = tensor.Float64, tn.Float64s()
		case tn.Dtype == "F64":
			st.Dtype, st.Data64 = tensor.Float64, tn.Float64s()
		default:
			st.Dtype = tensor.Float32
			for _, x := range tn.Float64s() {
				st.Data32 = append(st.Data32, float32(x))
			}
		}
		out = append(out, st)
	}
	sd := &strategy.StateDict{Tensors: out}
	if err := sd.Check(); err != nil {
		return nil, "", corrupt(fmt.Errorf("%w: the file is corrupt", err))
	}
	return out, shardDigest(f.Meta), nil
}

// wholeTensors assembles every tensor of sd whole from its spans.
func wholeTensors(sd *strategy.StateDict) (*strategy.StateDict, error) {
	out := &strategy.StateDict{Blobs: sd.Blobs}
	seen := map[string]bool{}
	var names []string
	for _, t := range sd.Tensors {
		if !seen[t.Name] {
			seen[t.Name] = true
			names = append(names, t.Name)
		}
	}
	for _, name := range names {
		t := sd.Lookup(name)
		v, err := sd.Span(name, 0, t.Size())
		if err != nil {
			return nil, err
		}
		w := strategy.Tensor{Name: name, Dtype: t.Dtype, Shape: slices.Clone(t.Shape), Lo: 0, Hi: t.Size()}
		if t.Dtype == tensor.Float32 {
			w.Data32 = make([]float32, len(v))
			for i, x := range v {
				w.Data32[i] = float32(x)
			}
		} else {
			w.Data64 = v
		}
		out.Tensors = append(out.Tensors, w)
	}
	return out, nil
}

// RemoveCheckpoint deletes the checkpoint at path: the file, or a sharded
// checkpoint's index and every shard file beside it. A missing file is no
// error.
func RemoveCheckpoint(path string) error {
	shards, _ := filepath.Glob(globEscape(path) + ".rank*-of-*")
	var errs []error
	for _, p := range append(shards, path) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// globEscape quotes the glob metacharacters of a path.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
