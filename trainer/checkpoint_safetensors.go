package trainer

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
)

// The safetensors format (https://github.com/huggingface/safetensors):
//
//	8 bytes   N, little-endian uint64: the length of the header
//	N bytes   a JSON object: for each tensor name {"dtype", "shape",
//	          "data_offsets": [begin, end]} (byte offsets into the data
//	          section), plus "__metadata__": a string-to-string map;
//	          padded with spaces
//	rest      the data section: each tensor's values, little-endian, C order
//
// Nothing in it is executable: reading it is parsing JSON and copying bytes.

// stTensor is one tensor of a safetensors file.
type stTensor struct {
	Name  string
	Dtype string // "F32" or "F64"
	Shape []int
	Data  []byte // little-endian values
	off   int    // start in the data section (decoded files only)
}

type stHeaderEntry struct {
	Dtype   string `json:"dtype"`
	Shape   []int  `json:"shape"`
	Offsets [2]int `json:"data_offsets"`
}

// maxHeader bounds the JSON header, as the reference implementation does.
const maxHeader = 100 << 20

func dtypeSize(dt string) int {
	switch dt {
	case "F32":
		return 4
	case "F64":
		return 8
	}
	return 0
}

// encodeSafetensors writes tensors (in the order given) and meta to w.
func encodeSafetensors(w io.Writer, tensors []stTensor, meta map[string]string) error {
	hdr := make(map[string]any, len(tensors)+1)
	off := 0
	for _, t := range tensors {
		if _, dup := hdr[t.Name]; dup || t.Name == "__metadata__" {
			return fmt.Errorf("tensor name %q is used twice or reserved", t.Name)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		hdr[t.Name] = stHeaderEntry{Dtype: t.Dtype, Shape: shape, Offsets: [2]int{off, off + len(t.Data)}}
		off += len(t.Data)
	}
	if len(meta) > 0 {
		hdr["__metadata__"] = meta
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return fmt.Errorf("encode header: %w", err)
	}
	// Pad to 8 bytes so the data section is aligned, as the reference
	// writer does.
	if pad := (8 - len(js)%8) % 8; pad > 0 {
		js = append(js, bytes.Repeat([]byte{' '}, pad)...)
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(js)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(js); err != nil {
		return err
	}
	for _, t := range tensors {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}

// stFile is a parsed safetensors file; Tensors are in data order.
type stFile struct {
	Tensors []stTensor
	Meta    map[string]string
}

// decodeSafetensors parses a whole file held in b. It checks the framing,
// every entry's dtype, shape and offsets, and that the tensors tile the data
// section exactly, naming the tensor at fault.
func decodeSafetensors(b []byte) (*stFile, error) {
	return decodeSafetensorsOf(b, dtypeSize, "F32 or F64")
}

// decodeSafetensorsOf is decodeSafetensors taking the dtypes size knows
// (which names them, for the error).
func decodeSafetensorsOf(b []byte, size func(string) int, which string) (*stFile, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("the file is %d bytes, shorter than the 8-byte header length that starts a safetensors file: it is truncated or not a checkpoint", len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > maxHeader {
		return nil, fmt.Errorf("the header length field says %d bytes, more than the %d allowed: the file is corrupt or not a checkpoint", n, maxHeader)
	}
	if uint64(len(b)-8) < n {
		return nil, fmt.Errorf("the header length field says %d bytes but only %d follow: the file is truncated, or not a checkpoint", n, len(b)-8)
	}
	hb := b[8 : 8+n]
	data := b[8+n:]
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hb))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("the header is not a JSON object: %v: the file is corrupt", err)
	}
	if rest := bytes.TrimRight(hb[dec.InputOffset():], " "); len(rest) > 0 {
		return nil, fmt.Errorf("the header has %d bytes after its JSON object that are not padding: the file is corrupt", len(rest))
	}
	f := &stFile{}
	if m, ok := raw["__metadata__"]; ok {
		d := json.NewDecoder(bytes.NewReader(m))
		if err := d.Decode(&f.Meta); err != nil {
			return nil, fmt.Errorf("header field __metadata__ is not a map of strings: %v: the file is corrupt", err)
		}
		delete(raw, "__metadata__")
	}
	for name, r := range raw {
		var e stHeaderEntry
		d := json.NewDecoder(bytes.NewReader(r))
		d.DisallowUnknownFields()
		if err := d.Decode(&e); err != nil {
			return nil, fmt.Errorf("tensor %q: header entry is malformed: %v: the file is corrupt", name, err)
		}
		size := size(e.Dtype)
		if size == 0 {
			return nil, fmt.Errorf("tensor %q: dtype %q is not %s", name, e.Dtype, which)
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
		f.Tensors = append(f.Tensors, stTensor{Name: name, Dtype: e.Dtype, Shape: e.Shape, Data: data[lo:hi:hi], off: lo})
	}
	// The tensors must tile the data section: no gaps, no overlaps.
	sort.Slice(f.Tensors, func(i, j int) bool {
		a, b := f.Tensors[i], f.Tensors[j]
		return a.off < b.off || (a.off == b.off && len(a.Data) < len(b.Data))
	})
	pos := 0
	for _, t := range f.Tensors {
		if lo := t.off; lo != pos {
			return nil, fmt.Errorf("tensor %q starts at byte %d of the data section, but the previous tensor ends at %d: the offsets overlap or leave a gap, so the file is corrupt", t.Name, lo, pos)
		}
		pos += len(t.Data)
	}
	if pos != len(data) {
		return nil, fmt.Errorf("the data section has %d bytes but its tensors cover %d: the file has trailing bytes or is corrupt", len(data), pos)
	}
	return f, nil
}

// tensorSum is the checksum of one tensor: its name, dtype, shape and bytes.
func tensorSum(t stTensor) string {
	h := sha256.New()
	io.WriteString(h, t.Name)
	h.Write([]byte{0})
	io.WriteString(h, t.Dtype)
	for _, d := range t.Shape {
		h.Write([]byte{0})
		io.WriteString(h, strconv.Itoa(d))
	}
	h.Write([]byte{1})
	h.Write(t.Data)
	return hex.EncodeToString(h.Sum(nil))
}

// metaSum is the checksum of one metadata entry.
func metaSum(key, value string) string {
	h := sha256.New()
	io.WriteString(h, key)
	h.Write([]byte{0})
	io.WriteString(h, value)
	return hex.EncodeToString(h.Sum(nil))
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func f64Bytes(v []float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

// values64 decodes a tensor's bytes as float64s.
func values64(t stTensor) []float64 {
	switch t.Dtype {
	case "F32":
		out := make([]float64, len(t.Data)/4)
		for i := range out {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:])))
		}
		return out
	case "F64":
		out := make([]float64, len(t.Data)/8)
		for i := range out {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
		}
		return out
	}
	return nil
}
