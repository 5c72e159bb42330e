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
	"strconv"

	"github.com/fulgur-ml/fulgur/safetensors"
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

// stTensor is one tensor of a safetensors file; stFile a decoded file,
// its tensors in data order; stHeaderEntry a tensor's header entry. The
// format's decoder is package safetensors, which infer reads with too.
type (
	stTensor      = safetensors.Tensor
	stFile        = safetensors.File
	stHeaderEntry = safetensors.Entry
)

// maxHeader bounds the JSON header, as the reference implementation does.
const maxHeader = safetensors.MaxHeader

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

// decodeSafetensors parses a checkpoint or shard file held in b: a
// safetensors file (safetensors.Decode checks its framing, every entry and
// the tiling of the data section) whose tensors are F32 or F64, as the
// trainer writes them.
func decodeSafetensors(b []byte) (*stFile, error) {
	f, err := safetensors.Decode(b)
	if err != nil {
		return nil, err
	}
	for _, t := range f.Tensors {
		if t.Dtype != "F32" && t.Dtype != "F64" {
			return nil, fmt.Errorf("tensor %q: dtype %q is not F32 or F64: the file is not a checkpoint the trainer wrote (a state dict loads with trainer.WithWeights)", t.Name, t.Dtype)
		}
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
