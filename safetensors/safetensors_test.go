package safetensors_test

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/safetensors"
)

// file frames header (a JSON object) and data as a safetensors file.
func file(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

func le16(vs ...uint16) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

// Every dtype a PyTorch state dict may hold decodes to its values, with
// the tensors in the order of their data whatever the header's order.
func TestDecodeDtypes(t *testing.T) {
	var data []byte
	data = binary.LittleEndian.AppendUint64(data, math.Float64bits(-0.125)) // F64 [1], 0-8
	data = binary.LittleEndian.AppendUint32(data, math.Float32bits(2.5))    // F32 [1], 8-12
	data = append(data, le16(0x3e00, 0xc000, 0x0001, 0x7c00)...)            // F16 [4], 12-20: 1.5, -2, 2^-24, +Inf
	data = append(data, le16(0x4040, 0xbf80)...)                            // BF16 [2], 20-24: 3, -1
	data = binary.LittleEndian.AppendUint64(data, uint64(math.MaxUint64-6)) // I64 [], 24-32: -7
	data = binary.LittleEndian.AppendUint32(data, uint32(math.MaxUint32-2)) // I32 [1], 32-36: -3
	data = append(data, le16(0xfffe)...)                                    // I16 [1], 36-38: -2
	data = append(data, 0xff, 200, 1)                                       // I8 -1, U8 200, BOOL 1: 38-41
	hdr := `{"__metadata__":{"format":"pt"},` +
		`"bool":{"dtype":"BOOL","shape":[1],"data_offsets":[40,41]},` +
		`"u8":{"dtype":"U8","shape":[1],"data_offsets":[39,40]},` +
		`"i8":{"dtype":"I8","shape":[1],"data_offsets":[38,39]},` +
		`"i16":{"dtype":"I16","shape":[1],"data_offsets":[36,38]},` +
		`"i32":{"dtype":"I32","shape":[1],"data_offsets":[32,36]},` +
		`"i64":{"dtype":"I64","shape":[],"data_offsets":[24,32]},` +
		`"bf16":{"dtype":"BF16","shape":[2],"data_offsets":[20,24]},` +
		`"f16":{"dtype":"F16","shape":[2,2],"data_offsets":[12,20]},` +
		`"f32":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},` +
		`"f64":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`
	f, err := safetensors.Decode(file(hdr, data))
	if err != nil {
		t.Fatal(err)
	}
	if f.Meta["format"] != "pt" {
		t.Errorf("metadata %v, want format pt", f.Meta)
	}
	want := []struct {
		name string
		vals []float64
	}{
		{"f64", []float64{-0.125}}, {"f32", []float64{2.5}}, {"f16", []float64{1.5, -2, math.Ldexp(1, -24), math.Inf(1)}},
		{"bf16", []float64{3, -1}}, {"i64", []float64{-7}}, {"i32", []float64{-3}}, {"i16", []float64{-2}},
		{"i8", []float64{-1}}, {"u8", []float64{200}}, {"bool", []float64{1}},
	}
	if len(f.Tensors) != len(want) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(want))
	}
	for i, w := range want {
		got := f.Tensors[i]
		if got.Name != w.name {
			t.Errorf("tensor %d is %q, want %q (data order)", i, got.Name, w.name)
			continue
		}
		vals := got.Float64s()
		if len(vals) != len(w.vals) {
			t.Errorf("%s: %v, want %v", w.name, vals, w.vals)
			continue
		}
		for j := range vals {
			if vals[j] != w.vals[j] {
				t.Errorf("%s: %v, want %v", w.name, vals, w.vals)
				break
			}
		}
	}
	if got := f.Tensors[2].Shape; len(got) != 2 || got[0] != 2 || got[1] != 2 {
		t.Errorf("f16's shape %v, want [2 2]", got)
	}
	if half := (safetensors.Tensor{Dtype: "F16", Data: le16(0x7e00)}).Float64s(); !math.IsNaN(half[0]) {
		t.Errorf("F16 0x7e00 = %v, want NaN", half[0])
	}
	if v := (safetensors.Tensor{Dtype: "C64", Data: make([]byte, 8)}).Float64s(); v != nil {
		t.Errorf("C64 values %v, want nil", v)
	}
}

// A bad dtype, shape or offsets, a cut, a gap and a foreign file are
// errors naming the tensor or field and what is wrong.
func TestDecodeErrors(t *testing.T) {
	f32 := func(entries string, n int) []byte { return file("{"+entries+"}", make([]byte, n)) }
	zip := append([]byte("PK\x03\x04"), make([]byte, 40)...)
	pickle := append([]byte{0x80, 2}, make([]byte, 40)...)
	for _, c := range []struct {
		name string
		b    []byte
		want []string
	}{
		{"dtype", f32(`"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}`, 8), []string{`tensor "w" has dtype "C64"`, "F64, F32, F16, BF16"}},
		{"negative shape", f32(`"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}`, 4), []string{`tensor "w": shape [-1] is invalid`}},
		{"shape and offsets", f32(`"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}`, 8), []string{`tensor "w": data offsets [0, 8) span 8 bytes but shape [3] of F32 needs 12`}},
		{"reversed offsets", f32(`"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}`, 8), []string{`tensor "w": data offsets [8, 0) are invalid`}},
		{"cut data", f32(`"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`, 6), []string{`tensor "w": its data ends at byte 8`, "truncated"}},
		{"gap", f32(`"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}`, 8), []string{`tensor "w" starts at byte 4`, "gap"}},
		{"overlap", f32(`"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}`, 8), []string{`tensor "b" starts at byte 4`, "overlap"}},
		{"trailing", f32(`"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}`, 6), []string{"has 6 bytes but its tensors cover 4"}},
		{"unknown field", f32(`"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}`, 4), []string{`tensor "w": header entry is malformed`}},
		{"metadata", f32(`"__metadata__":{"a":1}`, 0), []string{"__metadata__ is not a map of strings"}},
		{"short", []byte{1, 2, 3}, []string{"3 bytes, shorter than the 8-byte header length", "not safetensors"}},
		{"cut header", file(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4))[:30], []string{"bytes but only 22 follow", "truncated"}},
		{"text", []byte("this is not a weights file at all"), []string{"not safetensors"}},
		{"torch.save zip", zip, []string{"torch.save file (a zip archive", "safetensors.torch.save_file(model.state_dict(), path)"}},
		{"torch.save pickle", pickle, []string{"torch.save file (a Python pickle", "safetensors.torch.save_file"}},
	} {
		_, err := safetensors.Decode(c.b)
		if err == nil {
			t.Errorf("%s: decoded", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant %q", c.name, err, w)
			}
		}
	}
}

// Every cut of a good file is an error, and no flipped byte panics.
func TestDecodeCutsAndFlips(t *testing.T) {
	good := file(`{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]}}`, make([]byte, 10))
	if _, err := safetensors.Decode(good); err != nil {
		t.Fatal(err)
	}
	for n := range len(good) {
		if _, err := safetensors.Decode(good[:n]); err == nil {
			t.Fatalf("a file cut to %d of %d bytes was decoded", n, len(good))
		}
	}
	for i := range good {
		b := append([]byte(nil), good...)
		b[i] ^= 0x5a
		safetensors.Decode(b) // an error or another valid file: never a panic
	}
}

func TestDtypeSize(t *testing.T) {
	for dt, want := range map[string]int{"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "C64": 0, "": 0, "f32": 0} {
		if got := safetensors.DtypeSize(dt); got != want {
			t.Errorf("DtypeSize(%q) = %d, want %d", dt, got, want)
		}
	}
}
