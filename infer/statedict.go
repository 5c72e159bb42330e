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
	"github.com/fulgur-ml/fulgur/trainer"
)

// The safetensors format: 8 bytes little-endian header length N, N bytes of
// JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}} plus an
// optional "__metadata__" map of strings), then the tensors' little-endian
// bytes. trainer's checkpoints use the same framing.

type stEntry struct {
	Dtype   string `json:"dtype"`
	Shape   []int  `json:"shape"`
	Offsets [2]int `json:"data_offsets"`
}

// maxHeader bounds the JSON header, as the reference implementation does.
const maxHeader = 100 << 20

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
	return ""
}

// torchSaveFile says what kind of torch.save output b starts with: a zip
// archive (PyTorch 1.6 and later) or a bare pickle (protocol 2 to 5, as
// older versions wrote), or "" for neither.
func torchSaveFile(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("PK\x03\x04")):
		return "a zip archive"
	case len(b) >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5:
		return "a Python pickle"
	}
	return ""
}

type stTensor struct {
	name  string
	dtype string
	shape []int
	data  []byte
}

type stFile struct {
	tensors map[string]stTensor
	meta    map[string]string
}

var dtypeSizes = map[string]int{"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}

// decode parses the framing and header of a safetensors file held in b and
// checks that every tensor's bytes lie inside the file and match its shape.
func decode(b []byte) (*stFile, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("the file is %d bytes, shorter than the 8-byte header length that starts a safetensors file: it is truncated or not safetensors", len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > maxHeader || n > uint64(len(b)-8) {
		if what := torchSaveFile(b); what != "" {
			return nil, fmt.Errorf("the file is %s, as torch.save writes (.pt, .pth), not safetensors: fulgur does not read pickles (loading one runs code); in PyTorch, write the weights with safetensors.torch.save_file(model.state_dict(), path)", what)
		}
		return nil, fmt.Errorf("the header length field says %d bytes but the file has %d after it (at most %d allowed): it is truncated, corrupt, or not safetensors", n, len(b)-8, maxHeader)
	}
	data := b[8+n:]
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimRight(b[8:8+n], " "), &raw); err != nil {
		return nil, fmt.Errorf("the header is not a JSON object (%v): the file is corrupt or not safetensors", err)
	}
	f := &stFile{tensors: map[string]stTensor{}}
	if m, ok := raw["__metadata__"]; ok {
		if err := json.Unmarshal(m, &f.meta); err != nil {
			return nil, fmt.Errorf("header field __metadata__ is not a map of strings: %v", err)
		}
		delete(raw, "__metadata__")
	}
	for name, r := range raw {
		var e stEntry
		if err := json.Unmarshal(r, &e); err != nil {
			return nil, fmt.Errorf("tensor %q: header entry is malformed: %v", name, err)
		}
		size, ok := dtypeSizes[e.Dtype]
		if !ok {
			return nil, fmt.Errorf("tensor %q has dtype %q: fulgur reads F64, F32, F16, BF16 and integer tensors", name, e.Dtype)
		}
		elems := 1
		for _, d := range e.Shape {
			if d < 0 || (d > 0 && elems > math.MaxInt/8/d) {
				return nil, fmt.Errorf("tensor %q: shape %v is invalid: the file is corrupt", name, e.Shape)
			}
			elems *= d
		}
		lo, hi := e.Offsets[0], e.Offsets[1]
		if lo < 0 || hi < lo || hi > len(data) || hi-lo != elems*size {
			return nil, fmt.Errorf("tensor %q (%s %v): data offsets [%d, %d) do not fit its %d bytes in the %d-byte data section: the file is truncated or corrupt", name, e.Dtype, e.Shape, lo, hi, elems*size, len(data))
		}
		f.tensors[name] = stTensor{name: name, dtype: e.Dtype, shape: e.Shape, data: data[lo:hi]}
	}
	return f, nil
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
		if !sameShape(t.shape, e.Shape) {
			msg := fmt.Sprintf("tensor %q has shape %v in the file but %v in the model", e.Name, t.shape, e.Shape)
			if len(e.Shape) == 2 && len(t.shape) == 2 && t.shape[0] == e.Shape[1] && t.shape[1] == e.Shape[0] {
				msg += ": it is transposed; Linear weights are [out, in] in fulgur as in PyTorch (files from fulgur before that change hold [in, out]: transpose them)"
			}
			errs = append(errs, errors.New(msg))
			continue
		}
		out[e.Name] = t.values()
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

// values decodes the tensor's bytes as float64s.
func (t stTensor) values() []float64 {
	size := dtypeSizes[t.dtype]
	out := make([]float64, len(t.data)/size)
	le := binary.LittleEndian
	for i := range out {
		p := t.data[i*size:]
		switch t.dtype {
		case "F64":
			out[i] = math.Float64frombits(le.Uint64(p))
		case "F32":
			out[i] = float64(math.Float32frombits(le.Uint32(p)))
		case "F16":
			out[i] = half(le.Uint16(p))
		case "BF16":
			out[i] = float64(math.Float32frombits(uint32(le.Uint16(p)) << 16))
		case "I64":
			out[i] = float64(int64(le.Uint64(p)))
		case "I32":
			out[i] = float64(int32(le.Uint32(p)))
		case "I16":
			out[i] = float64(int16(le.Uint16(p)))
		case "I8":
			out[i] = float64(int8(p[0]))
		case "U8", "BOOL":
			out[i] = float64(p[0])
		}
	}
	return out
}

// half decodes an IEEE 754 binary16 value.
func half(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1+frac/1024, exp-15)
}
