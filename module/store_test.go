package module_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/module"
	"gorgonia.org/tensor"
)

// The store's layout, initial values, views, Clone and SHA256 on both
// dtypes. The tensors are large enough that SHA256 hashes in several chunks.
func TestStoreBothDtypes(t *testing.T) {
	specs := []module.Spec{
		{Name: "w", Shape: []int{100, 90}, Init: module.Uniform(-1, 1)},
		{Name: "running_var", Shape: []int{7}, Init: module.Constant(1e-45), Buffer: true},
		{Name: "b", Shape: []int{3}, Init: module.Constant(0.1)},
	}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		t.Run(dt.String(), func(t *testing.T) {
			s, err := module.NewStore(specs, dt, 7)
			if err != nil {
				t.Fatal(err)
			}
			if s.NumParams() != 9003 || s.Len() != 9010 {
				t.Fatalf("NumParams %d, Len %d: want 9003, 9010", s.NumParams(), s.Len())
			}
			// Independent reading of the values: Float32s or Float64s,
			// widened; the buffer comes after both parameters.
			vals := widen(s.Data())
			if b, _ := s.Lookup("b"); b.Offset != 9000 || vals[9001] != rounded(dt, 0.1) {
				t.Errorf("b at %d holds %v: want offset 9000 and %v", b.Offset, vals[9001], rounded(dt, 0.1))
			}
			if v := vals[9003]; v != rounded(dt, 1e-45) {
				t.Errorf("running_var[0] = %v, want %v", v, rounded(dt, 1e-45))
			}
			if w := vals[:9000]; w[0] == w[1] || w[0] < -1 || w[0] > 1 {
				t.Errorf("w starts %v, %v: want distinct values in [-1, 1]", w[0], w[1])
			}

			if got, want := s.SHA256(), sha(dt, vals); got != want {
				t.Errorf("SHA256 = %s, want %s (sha256 of the little-endian bits)", got, want)
			}

			view, err := s.Tensor("b")
			if err != nil {
				t.Fatal(err)
			}
			if err := view.SetAt(scalar(dt, 2.5), 1); err != nil {
				t.Fatal(err)
			}
			if v := widen(s.Data())[9001]; v != 2.5 {
				t.Errorf("a write through Tensor(\"b\") left %v in the store", v)
			}
			g, err := s.GradTensor("w")
			if err != nil {
				t.Fatal(err)
			}
			if err := g.SetAt(scalar(dt, 3), 0, 1); err != nil {
				t.Fatal(err)
			}

			c := s.Clone()
			if c.SHA256() != s.SHA256() {
				t.Errorf("Clone hashes differently")
			}
			if gc := widen(c.Grad()); len(gc) != 9003 || gc[1] != 0 {
				t.Errorf("Clone's gradient: %d values, [1] = %v: want 9003 zeros", len(gc), gc[1])
			}
			if gs := widen(s.Grad()); gs[1] != 3 {
				t.Errorf("GradTensor write: grad[1] = %v, want 3", gs[1])
			}
			if err := view.SetAt(scalar(dt, 4.5), 1); err != nil {
				t.Fatal(err)
			}
			if v := widen(c.Data())[9001]; v != 2.5 {
				t.Errorf("the clone changed with the original: %v", v)
			}
		})
	}
}

func widen(d any) []float64 {
	switch d := d.(type) {
	case []float32:
		o := make([]float64, len(d))
		for i, x := range d {
			o[i] = float64(x)
		}
		return o
	case []float64:
		return append([]float64(nil), d...)
	}
	panic("not a float slice")
}

func scalar(dt tensor.Dtype, x float64) any {
	if dt == tensor.Float32 {
		return float32(x)
	}
	return x
}

func rounded(dt tensor.Dtype, x float64) float64 {
	if dt == tensor.Float32 {
		return float64(float32(x))
	}
	return x
}

func sha(dt tensor.Dtype, vals []float64) string {
	var b []byte
	for _, v := range vals {
		if dt == tensor.Float32 {
			u := math.Float32bits(float32(v))
			b = append(b, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
			continue
		}
		u := math.Float64bits(v)
		for k := range 8 {
			b = append(b, byte(u>>(8*k)))
		}
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// A layout store has NewStore's layout and buffers, and InitParams gives
// any span of the parameters NewStore's initial values bit for bit, without
// the store holding them.
func TestLayoutStoreInitParams(t *testing.T) {
	specs := []module.Spec{
		{Name: "a.weight", Shape: []int{3, 4}, Init: module.KaimingUniform(4)},
		{Name: "a.bias", Shape: []int{3}, Init: module.Uniform(-0.5, 0.5)},
		{Name: "bn.mean", Shape: []int{2}, Init: module.Uniform(0, 1), Buffer: true},
		{Name: "b.weight", Shape: []int{2, 3}, Init: module.KaimingUniform(3)},
	}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		full, err := module.NewStore(specs, dt, 7)
		if err != nil {
			t.Fatal(err)
		}
		l, err := module.NewLayoutStore(specs, dt, 7, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := full.SameLayout(l); err != nil || !l.Layout() || full.Layout() || l.Len() != full.Len() {
			t.Fatalf("%v: layouts differ: %v", dt, err)
		}
		if l.Data32() != nil || l.Data64() != nil || l.Grad32() != nil || l.Grad64() != nil {
			t.Errorf("%v: the layout store holds a flat buffer", dt)
		}
		bf, _ := full.Tensor("bn.mean")
		bl, _ := l.Tensor("bn.mean")
		if fmt.Sprint(bf.Data()) != fmt.Sprint(bl.Data()) {
			t.Errorf("%v: buffer bn.mean is %v in the layout store, %v in NewStore's", dt, bl.Data(), bf.Data())
		}
		np := full.NumParams()
		for _, span := range [][2]int{{0, np}, {2, 13}, {14, np}, {5, 5}} {
			var got, want []float64
			if dt == tensor.Float32 {
				d := make([]float32, span[1]-span[0])
				if err := l.InitParams(span[0], span[1], d); err != nil {
					t.Fatal(err)
				}
				for i, v := range d {
					got = append(got, float64(v))
					want = append(want, float64(full.Data32()[span[0]+i]))
				}
			} else {
				d := make([]float64, span[1]-span[0])
				if err := l.InitParams(span[0], span[1], d); err != nil {
					t.Fatal(err)
				}
				got, want = d, full.Data64()[span[0]:span[1]]
			}
			if !slices.Equal(got, want) {
				t.Errorf("%v: InitParams%v = %v, NewStore holds %v", dt, span, got, want)
			}
		}
		if err := l.InitParams(0, np+1, make([]float64, np+1)); err == nil {
			t.Errorf("%v: InitParams past the parameters: no error", dt)
		}
		if _, err := module.NewLayoutStore(specs, dt, 7, make([]float64, 11)); err == nil {
			t.Errorf("%v: a scratch smaller than a.weight (12): no error", dt)
		}
		if _, err := l.GradTensor("a.weight"); err == nil {
			t.Errorf("%v: GradTensor on a layout store: no error", dt)
		}
	}
}

// A store made without a gradient buffer holds the same values as
// NewStore's, bit for bit, and no gradients: the gradient buffers are nil
// and GradTensor says why.
func TestStoreWithoutGrad(t *testing.T) {
	specs := []module.Spec{
		{Name: "w", Shape: []int{30, 20}, Init: module.Uniform(-1, 1)},
		{Name: "running_mean", Shape: []int{7}, Buffer: true},
	}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		full, err := module.NewStore(specs, dt, 3)
		if err != nil {
			t.Fatal(err)
		}
		st, err := module.NewStoreWithoutGrad(specs, dt, 3)
		if err != nil {
			t.Fatal(err)
		}
		if st.SHA256() != full.SHA256() || st.Len() != full.Len() || st.NumParams() != 600 {
			t.Errorf("%v: the store without gradients holds other values or another layout than NewStore's", dt)
		}
		if st.Grad32() != nil || st.Grad64() != nil {
			t.Errorf("%v: the store without gradients has a gradient buffer", dt)
		}
		if _, err := st.GradTensor("w"); err == nil || !strings.Contains(err.Error(), "without a gradient buffer") {
			t.Errorf("%v: GradTensor = %v, want an error saying the store has no gradient buffer", dt, err)
		}
	}
}
