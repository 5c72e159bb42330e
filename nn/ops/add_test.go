package ops_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn/ops"
)

// AddInto writes a + b, rounded once (the bits of a Go add), in both
// dtypes, at lengths that cover whole 16-lane vectors, masked tails and a
// split between the loop workers (300,000 elements), with ±0, ±Inf and NaN
// among the values, and writes nothing past the shape's elements.
func TestAddIntoMatchesGoAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	special := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN()}
	val := func(i int) float64 {
		if i%37 < len(special) {
			return special[i%37]
		}
		return r.NormFloat64()
	}
	for _, n := range []int{1, 15, 16, 17, 100, 300000} {
		t.Run("float32", func(t *testing.T) {
			a, b, d := make([]float32, n), make([]float32, n), make([]float32, n+1)
			for i := range a {
				a[i], b[i] = float32(val(i)), float32(val(i+3))
			}
			d[n] = 42
			dst := tensor.New(tensor.WithShape(n), tensor.WithBacking(d[:n]))
			if !ops.AddInto(dst, tensor.New(tensor.WithShape(n), tensor.WithBacking(a)), tensor.New(tensor.WithShape(n), tensor.WithBacking(b))) {
				t.Fatalf("n=%d: AddInto refused dense float32 tensors of one shape", n)
			}
			for i := range a {
				want := a[i] + b[i]
				if got := d[i]; math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
					t.Fatalf("n=%d: [%d] %v + %v = %v, want %v", n, i, a[i], b[i], got, want)
				}
			}
			if d[n] != 42 {
				t.Fatalf("n=%d: wrote %v past the end", n, d[n])
			}
		})
		t.Run("float64", func(t *testing.T) {
			a, b := make([]float64, n), make([]float64, n)
			for i := range a {
				a[i], b[i] = val(i), val(i+3)
			}
			dst := tensor.New(tensor.WithShape(n), tensor.Of(tensor.Float64))
			if !ops.AddInto(dst, tensor.New(tensor.WithShape(n), tensor.WithBacking(a)), tensor.New(tensor.WithShape(n), tensor.WithBacking(b))) {
				t.Fatalf("n=%d: AddInto refused dense float64 tensors of one shape", n)
			}
			for i, got := range dst.Float64s() {
				want := a[i] + b[i]
				if math.Float64bits(got) != math.Float64bits(want) && !(got != got && want != want) {
					t.Fatalf("n=%d: [%d] %v + %v = %v, want %v", n, i, a[i], b[i], got, want)
				}
			}
		})
	}
}

// AddInto refuses, and leaves dst as it was, what it cannot add in one
// pass: shapes or dtypes that differ, views, integer tensors.
func TestAddIntoRefuses(t *testing.T) {
	f32 := func(shape ...int) *tensor.Dense {
		return tensor.New(tensor.WithShape(shape...), tensor.Of(tensor.Float32))
	}
	view, err := tensor.New(tensor.WithShape(4, 4), tensor.Of(tensor.Float32)).Slice(tensor.S(0, 2))
	if err != nil {
		t.Fatal(err)
	}
	ints := tensor.New(tensor.WithShape(2, 4), tensor.Of(tensor.Int))
	for _, c := range []struct {
		name      string
		dst, a, b tensor.Tensor
	}{
		{"shapes differ", f32(2, 4), f32(2, 4), f32(4, 2)},
		{"dst's shape differs", f32(8), f32(2, 4), f32(2, 4)},
		{"dtypes differ", f32(2, 4), f32(2, 4), tensor.New(tensor.WithShape(2, 4), tensor.Of(tensor.Float64))},
		{"a view", f32(2, 4), view, f32(2, 4)},
		{"integers", ints, ints, ints},
	} {
		d := c.dst.(*tensor.Dense)
		if d.Dtype() == tensor.Float32 {
			d.Memset(float32(7))
		}
		if ops.AddInto(c.dst, c.a, c.b) {
			t.Errorf("%s: AddInto reported true", c.name)
		}
		if d.Dtype() == tensor.Float32 {
			for _, v := range d.Float32s() {
				if v != 7 {
					t.Fatalf("%s: dst changed to %v", c.name, d.Float32s())
				}
			}
		}
	}
}

// Copy copies as the built-in copy does: the shorter length's elements,
// bits and all, nothing past them, at lengths on one goroutine and split
// between three loop workers (300,000 and 1,000,003 elements).
func TestCopyMatchesBuiltin(t *testing.T) {
	ops.SetLoopWorkers(3)
	defer ops.SetLoopWorkers(0)
	for _, n := range []int{0, 1, 100, 300000, 1000003} {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(i%1013) - 0.5
		}
		src64 := make([]float64, n)
		for i := range src64 {
			src64[i] = float64(i%977) + 0.25
		}
		dst := make([]float32, n+1)
		dst[n] = 42
		if got := ops.Copy(dst, src); got != n {
			t.Fatalf("n=%d: Copy into a longer slice copied %d", n, got)
		}
		for i := range src {
			if dst[i] != src[i] {
				t.Fatalf("n=%d: [%d] = %v, want %v", n, i, dst[i], src[i])
			}
		}
		if dst[n] != 42 {
			t.Fatalf("n=%d: wrote %v past the source's end", n, dst[n])
		}
		short := make([]float64, n/2)
		if got := ops.Copy(short, src64); got != n/2 {
			t.Fatalf("n=%d: Copy into %d elements copied %d", n, n/2, got)
		}
		for i := range short {
			if short[i] != src64[i] {
				t.Fatalf("n=%d float64: [%d] = %v, want %v", n, i, short[i], src64[i])
			}
		}
	}
}
