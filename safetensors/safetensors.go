package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// MaxHeader bounds the JSON header, as the reference implementation does.
const MaxHeader = 100 << 20

// Tensor is one tensor of a file.
type Tensor struct {
	Name  string
	Dtype string // "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8" or "BOOL"
	Shape []int
	Data  []byte // little-endian values, C order
}

// File is a decoded file: its tensors in the order of their data, and its
// metadata (nil when the header has none).
type File struct {
	Tensors []Tensor
	Meta    map[string]string
}

// Entry is a tensor's entry in the header.
type Entry struct {
	Dtype   string `json:"dtype"`
	Shape   []int  `json:"shape"`
	Offsets [2]int `json:"data_offsets"`
}

// DtypeSize is the bytes of one element of dtype, or 0 for a dtype this
// package does not read.
func DtypeSize(dtype string) int {
	switch dtype {
	case "F64", "I64":
		return 8
	case "F32", "I32":
		return 4
	case "F16", "BF16", "I16":
		return 2
	case "I8", "U8", "BOOL":
		return 1
	}
	return 0
}

// Decode parses a whole file held in b. It checks the framing, every
// entry's dtype, shape and offsets, and that the tensors tile the data
// section exactly, naming the tensor at fault. The tensors' Data alias b.
func Decode(b []byte) (*File, error) {
	f, err := decode(b)
	if err != nil {
		if what := torchSave(b); what != "" {
			return nil, fmt.Errorf("the file is a torch.save file (%s, as .pt and .pth files are), not safetensors: fulgur does not read pickles (loading one runs code); in PyTorch, write the weights with safetensors.torch.save_file(model.state_dict(), path)", what)
		}
		return nil, err
	}
	return f, nil
}

func decode(b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("the file is %d bytes, shorter than the 8-byte header length that starts a safetensors file: it is truncated or not safetensors", len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > MaxHeader {
		return nil, fmt.Errorf("the header length field says %d bytes, more than the %d allowed: the file is corrupt or not safetensors", n, MaxHeader)
	}
	if uint64(len(b)-8) < n {
		return nil, fmt.Errorf("the header length field says %d bytes but only %d follow: the file is truncated, corrupt, or not safetensors", n, len(b)-8)
	}
	hb := b[8 : 8+n]
	data := b[8+n:]
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hb))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("the header is not a JSON object (%v): the file is corrupt or not safetensors", err)
	}
	if rest := bytes.TrimRight(hb[dec.InputOffset():], " "); len(rest) > 0 {
		return nil, fmt.Errorf("the header has %d bytes after its JSON object that are not padding: the file is corrupt", len(rest))
	}
	f := &File{}
	if m, ok := raw["__metadata__"]; ok {
		d := json.NewDecoder(bytes.NewReader(m))
		if err := d.Decode(&f.Meta); err != nil {
			return nil, fmt.Errorf("header field __metadata__ is not a map of strings: %v: the file is corrupt", err)
		}
		delete(raw, "__metadata__")
	}
	offs := make(map[string]int, len(raw))
	for name, r := range raw {
		var e Entry
		d := json.NewDecoder(bytes.NewReader(r))
		d.DisallowUnknownFields()
		if err := d.Decode(&e); err != nil {
			return nil, fmt.Errorf("tensor %q: header entry is malformed: %v: the file is corrupt", name, err)
		}
		size := DtypeSize(e.Dtype)
		if size == 0 {
			return nil, fmt.Errorf("tensor %q has dtype %q: fulgur reads F64, F32, F16, BF16 and integer tensors (I64, I32, I16, I8, U8, BOOL)", name, e.Dtype)
		}
		elems := 1
		for _, d := range e.Shape {
			if d < 0 || (d > 0 && elems > math.MaxInt/8/d) {
				return nil, fmt.Errorf("tensor %q: shape %v is invalid: the file is corrupt", name, e.Shape)
			}
			elems *= d
		}
		lo, hi := e.Offsets[0], e.Offsets[1]
		if lo < 0 || hi < lo {
			return nil, fmt.Errorf("tensor %q: data offsets [%d, %d) are invalid: the file is corrupt", name, lo, hi)
		}
		if hi-lo != elems*size {
			return nil, fmt.Errorf("tensor %q: data offsets [%d, %d) span %d bytes but shape %v of %s needs %d: the file is corrupt", name, lo, hi, hi-lo, e.Shape, e.Dtype, elems*size)
		}
		if hi > len(data) {
			return nil, fmt.Errorf("tensor %q: its data ends at byte %d of the data section, which has only %d bytes: the file is truncated", name, hi, len(data))
		}
		f.Tensors = append(f.Tensors, Tensor{Name: name, Dtype: e.Dtype, Shape: e.Shape, Data: data[lo:hi:hi]})
		offs[name] = lo
	}
	// The tensors must tile the data section: no gaps, no overlaps.
	sort.Slice(f.Tensors, func(i, j int) bool {
		a, b := f.Tensors[i], f.Tensors[j]
		return offs[a.Name] < offs[b.Name] || (offs[a.Name] == offs[b.Name] && len(a.Data) < len(b.Data))
	})
	pos := 0
	for _, t := range f.Tensors {
		if lo := offs[t.Name]; lo != pos {
			return nil, fmt.Errorf("tensor %q starts at byte %d of the data section, but the previous tensor ends at %d: the offsets overlap or leave a gap, so the file is corrupt", t.Name, lo, pos)
		}
		pos += len(t.Data)
	}
	if pos != len(data) {
		return nil, fmt.Errorf("the data section has %d bytes but its tensors cover %d: the file has trailing bytes or is corrupt", len(data), pos)
	}
	return f, nil
}

// torchSave says what kind of torch.save output b starts with: a zip
// archive (PyTorch 1.6 and later) or a bare pickle (protocol 2 to 5, as
// older versions wrote), or "" for neither.
func torchSave(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("PK\x03\x04")):
		return "a zip archive"
	case len(b) >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5:
		return "a Python pickle"
	}
	return ""
}

// Float64s decodes the tensor's values, of any dtype DtypeSize knows, as
// float64s (exact for every dtype but I64 beyond 2^53); nil for another
// dtype.
func (t Tensor) Float64s() []float64 {
	size := DtypeSize(t.Dtype)
	if size == 0 {
		return nil
	}
	out := make([]float64, len(t.Data)/size)
	le := binary.LittleEndian
	for i := range out {
		p := t.Data[i*size:]
		switch t.Dtype {
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
		default: // U8, BOOL
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
