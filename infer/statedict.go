package infer

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/safetensors"
	"github.com/fulgur-ml/fulgur/trainer"
)

// The files are safetensors (package safetensors reads them, for trainer
// too); stEntry is a tensor's header entry, as SaveStateDict writes it.
type stEntry = safetensors.Entry

// counter is the buffer PyTorch keeps as a 0-dimensional int64 and fulgur
// as one float ([1]): BatchNorm's count of batches seen.
const counter = "num_batches_tracked"

func isCounter(e module.Entry) bool {
	return e.Buffer && e.Len == 1 && (e.Name == counter || strings.HasSuffix(e.Name, "."+counter))
}

// SaveStateDict writes every parameter and buffer of store to path as a
// safetensors state dict that PyTorch's load_state_dict(strict=True) takes
// for the same architecture. The file is written to a temporary file and
// renamed, so a crash leaves no half-written file at path.
func SaveStateDict(path string, store *module.Store) error {
	if store == nil {
		return errors.New("SaveStateDict: the store is nil: Trainer.Store() is nil before Fit and under fsdp, where no process holds the whole model; " +
			"load the run's checkpoint (trainer.ResolveCheckpoint(root, \"last\")) with infer.New and pass that Model's Store()")
	}
	var buf bytes.Buffer
	if err := encodeStateDict(&buf, store); err != nil {
		return fmt.Errorf("SaveStateDict %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("SaveStateDict: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(buf.Bytes())
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("SaveStateDict %s: %w", path, werr)
	}
	return nil
}

func encodeStateDict(w io.Writer, store *module.Store) error {
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data [][]byte
	off := 0
	for _, e := range store.Entries() {
		var b []byte
		ent := stEntry{Shape: e.Shape}
		switch {
		case isCounter(e):
			ent.Dtype, ent.Shape = "I64", []int{}
			b = binary.LittleEndian.AppendUint64(nil, uint64(int64(storeValue(store, e.Offset))))
		case store.Dtype() == tensor.Float32:
			ent.Dtype = "F32"
			b = make([]byte, 0, 4*e.Len)
			for _, v := range store.Data32()[e.Offset : e.Offset+e.Len] {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
			}
		default:
			ent.Dtype = "F64"
			b = make([]byte, 0, 8*e.Len)
			for _, v := range store.Data64()[e.Offset : e.Offset+e.Len] {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
			}
		}
		if ent.Shape == nil {
			ent.Shape = []int{}
		}
		ent.Offsets = [2]int{off, off + len(b)}
		off += len(b)
		hdr[e.Name] = ent
		data = append(data, b)
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	if pad := (8 - len(js)%8) % 8; pad > 0 { // align the data section
		js = append(js, bytes.Repeat([]byte{' '}, pad)...)
	}
	if _, err := w.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(js)))); err != nil {
		return err
	}
	if _, err := w.Write(js); err != nil {
		return err
	}
	for _, b := range data {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func storeValue(s *module.Store, i int) float64 {
	if d := s.Data32(); d != nil {
		return float64(d[i])
	}
	return s.Data64()[i]
}

// LoadWeights copies into store the parameters and buffers held in the file
// at path: a fulgur checkpoint (checksums verified, optimizer and trainer
// state ignored) or a safetensors state dict written by SaveStateDict or by
// PyTorch. Every tensor of the store must be in the file with the same
// shape, and the file must hold nothing else; otherwise the error names each
// missing, unexpected or mis-shaped tensor and store is left unchanged.
// Values of another floating or integer dtype are converted to the store's.
func LoadWeights(path string, store *module.Store) error {
	if store == nil {
		return errors.New("LoadWeights: the store is nil: pass Model.Store() or Trainer.Store()")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("LoadWeights: %w%s", err, readHint(path, err))
	}
	f, err := decode(b)
	if err != nil {
		return fmt.Errorf("LoadWeights %s: %w", path, err)
	}
	if f.meta["format"] == trainer.CheckpointFormat {
		return trainer.LoadWeights(path, store)
	}
	vals, err := f.match(store)
	if err != nil {
		return fmt.Errorf("LoadWeights %s: %w", path, err)
	}
	for _, e := range store.Entries() {
		v := vals[e.Name]
		if d := store.Data32(); d != nil {
			dst := d[e.Offset : e.Offset+e.Len]
			for i := range dst {
				dst[i] = float32(v[i])
			}
		} else {
			copy(store.Data64()[e.Offset:e.Offset+e.Len], v)
		}
	}
	return nil
}

// readHint says what to pass instead of a path that is no file: a
// directory, or the names trainer.WithCheckpoint takes.
func readHint(path string, err error) string {
	if st, serr := os.Stat(path); serr == nil && st.IsDir() {
		return ": the weights are a file: name a checkpoint in the directory (checkpoints/last.ckpt), or find a run's with trainer.ResolveCheckpoint(root, \"last\")"
	}
	if errors.Is(err, fs.ErrNotExist) && (path == "last" || path == "best") {
		return fmt.Sprintf(": infer reads a file; for a run's %[1]s checkpoint, pass trainer.ResolveCheckpoint(root, %[1]q), which finds it under the run's root directory", path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return ": give a fulgur checkpoint (a run's checkpoints/last.ckpt; trainer.ResolveCheckpoint(root, \"last\") finds the newest and lists those there) or a safetensors state dict"
	}
	return ""
}

// stFile is a decoded file's tensors by name, and its metadata.
type stFile struct {
	tensors map[string]safetensors.Tensor
	meta    map[string]string
}

// decode parses a safetensors file held in b.
func decode(b []byte) (*stFile, error) {
	f, err := safetensors.Decode(b)
	if err != nil {
		return nil, err
	}
	out := &stFile{tensors: make(map[string]safetensors.Tensor, len(f.Tensors)), meta: f.Meta}
	for _, t := range f.Tensors {
		out.tensors[t.Name] = t
	}
	return out, nil
}

// match checks the file against store and returns each store tensor's
// values, or an error naming every problem.
func (f *stFile) match(store *module.Store) (map[string][]float64, error) {
	var errs []error
	out := map[string][]float64{}
	wrapped := false // the file has module.NAME for a missing NAME
	for _, e := range store.Entries() {
		t, ok := f.tensors[e.Name]
		if !ok {
			errs = append(errs, fmt.Errorf("tensor %q %v of the model is missing from the file", e.Name, e.Shape))
			_, p := f.tensors["module."+e.Name]
			wrapped = wrapped || p
			continue
		}
		if !sameShape(t.Shape, e.Shape) {
			msg := fmt.Sprintf("tensor %q has shape %v in the file but %v in the model", e.Name, t.Shape, e.Shape)
			if len(e.Shape) == 2 && len(t.Shape) == 2 && t.Shape[0] == e.Shape[1] && t.Shape[1] == e.Shape[0] {
				msg += ": it is transposed; Linear weights are [out, in] in fulgur as in PyTorch (files from fulgur before that change hold [in, out]: transpose them)"
			}
			errs = append(errs, errors.New(msg))
			continue
		}
		out[e.Name] = t.Float64s()
	}
	var extra []string
	for name := range f.tensors {
		if _, ok := store.Lookup(name); !ok {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		errs = append(errs, fmt.Errorf("the file has tensor %q that the model does not declare", name))
	}
	if wrapped {
		errs = append([]error{errors.New(`the file's tensor names start with "module.", as the state_dict() of a model wrapped in DistributedDataParallel or DataParallel does: save model.module.state_dict() instead, or strip the prefix from the names`)}, errs...)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("the file does not match the model (was it saved from another architecture?):\n%w", errors.Join(errs...))
	}
	return out, nil
}

// sameShape compares shapes, taking PyTorch's 0-dimensional scalars and
// fulgur's one-element vectors as the same.
func sameShape(a, b []int) bool {
	if len(a)+len(b) == 1 {
		return prod(a) == 1 && prod(b) == 1
	}
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

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}
