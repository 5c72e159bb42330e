package launch

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// Result is what rank 0 of a ddp_spawn job hands back to the process that
// launched it: the final parameters and buffers (one flat buffer, in store
// order) and the figures of its Fit.
type Result struct {
	// Layout names every tensor of the store as "name:offset:len", so the
	// launching process can check it loads the same model.
	Layout  []string           `json:"layout"`
	Metrics map[string]float64 `json:"metrics"`
	Stats   map[string]float64 `json:"stats"`
	Notes   map[string]string  `json:"notes,omitempty"`
	// Callbacks holds the callbacks' states by name.
	Callbacks map[string][]byte `json:"callbacks,omitempty"`
	SHA256    string            `json:"sha256"`
	Data32    []float32         `json:"-"`
	Data64    []float64         `json:"-"`
}

var resultMagic = [8]byte{'f', 'u', 'l', 'g', 'u', 'r', 'R', '1'}

type resultHeader struct {
	Result
	Dtype string `json:"dtype"`
	Len   int    `json:"len"`
}

// WriteResult writes r to path atomically (a temporary file renamed into
// place), so the reader never sees half a result.
func WriteResult(path string, r *Result) error {
	h := resultHeader{Result: *r, Dtype: "float32", Len: len(r.Data32)}
	if r.Data64 != nil {
		h.Dtype, h.Len = "float64", len(r.Data64)
	}
	hdr, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("launch: encode result: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".result-*")
	if err != nil {
		return fmt.Errorf("launch: write result: %w", err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriterSize(tmp, 1<<20)
	w.Write(resultMagic[:])
	binary.Write(w, binary.LittleEndian, uint32(len(hdr)))
	w.Write(hdr)
	var b [8]byte
	for _, v := range r.Data32 {
		binary.LittleEndian.PutUint32(b[:4], math.Float32bits(v))
		w.Write(b[:4])
	}
	for _, v := range r.Data64 {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
		w.Write(b[:])
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return fmt.Errorf("launch: write result %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("launch: write result %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("launch: write result: %w", err)
	}
	return nil
}

// ReadResult reads a result written by WriteResult.
func ReadResult(path string) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("launch: rank 0 wrote no result at %s: did its Fit finish?", path)
		}
		return nil, fmt.Errorf("launch: read result: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var magic [8]byte
	var n uint32
	if _, err := io.ReadFull(r, magic[:]); err != nil || magic != resultMagic {
		return nil, fmt.Errorf("launch: %s is not a ddp_spawn result", path)
	}
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil || n > 64<<20 {
		return nil, fmt.Errorf("launch: %s: bad header length", path)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("launch: %s: truncated header: %w", path, err)
	}
	var h resultHeader
	if err := json.Unmarshal(hdr, &h); err != nil {
		return nil, fmt.Errorf("launch: %s: header: %w", path, err)
	}
	res := h.Result
	var b [8]byte
	switch h.Dtype {
	case "float32":
		res.Data32 = make([]float32, h.Len)
		for i := range res.Data32 {
			if _, err := io.ReadFull(r, b[:4]); err != nil {
				return nil, fmt.Errorf("launch: %s: truncated data: %w", path, err)
			}
			res.Data32[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[:4]))
		}
	case "float64":
		res.Data64 = make([]float64, h.Len)
		for i := range res.Data64 {
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return nil, fmt.Errorf("launch: %s: truncated data: %w", path, err)
			}
			res.Data64[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[:]))
		}
	default:
		return nil, fmt.Errorf("launch: %s: dtype %q", path, h.Dtype)
	}
	return &res, nil
}
