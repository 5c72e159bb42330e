package collective_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// specials are values whose sums a wrong kernel would get wrong in the bits:
// signed zeros, infinities, NaN, subnormals and the extremes.
var specials = []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), 5e-324, -5e-324, 1e-40, math.MaxFloat64, -math.MaxFloat32, 1, -1}

// TestReduceToSumsLikeTheGoLoop: Sum and Mean add element by element
// exactly as a + b in Go, at every length around the vector loop's 32
// float32 (16 float64) elements, with dst separate from or the same as
// either operand.
func TestReduceToSumsLikeTheGoLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	val := func() float64 {
		if rng.IntN(4) == 0 {
			return specials[rng.IntN(len(specials))]
		}
		return rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10))
	}
	for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4099} {
		for _, alias := range []string{"none", "dst=a", "dst=b"} {
			t.Run(fmt.Sprintf("n=%d/%s", n, alias), func(t *testing.T) {
				a32, b32 := make([]float32, n), make([]float32, n)
				a64, b64 := make([]float64, n), make([]float64, n)
				for i := range n {
					a64[i], b64[i] = val(), val()
					a32[i], b32[i] = float32(a64[i]), float32(b64[i])
				}
				want32, want64 := make([]float32, n), make([]float64, n)
				for i := range n {
					want32[i], want64[i] = a32[i]+b32[i], a64[i]+b64[i]
				}
				for _, op := range []collective.Op{collective.Sum, collective.Mean} {
					d32, x32, y32 := pick(alias, a32, b32)
					d64, x64, y64 := pick(alias, a64, b64)
					collective.ReduceTo(d32, x32, y32, op)
					collective.ReduceTo(d64, x64, y64, op)
					for i := range n {
						if math.Float32bits(d32[i]) != math.Float32bits(want32[i]) {
							t.Fatalf("%v float32 element %d: %v + %v gave %v, want %v", op, i, a32[i], b32[i], d32[i], want32[i])
						}
						if math.Float64bits(d64[i]) != math.Float64bits(want64[i]) {
							t.Fatalf("%v float64 element %d: %v + %v gave %v, want %v", op, i, a64[i], b64[i], d64[i], want64[i])
						}
					}
				}
			})
		}
	}
}

// pick returns dst, a, b for an aliasing, on copies of a and b.
func pick[T float32 | float64](alias string, a, b []T) (dst, x, y []T) {
	x, y = append([]T(nil), a...), append([]T(nil), b...)
	switch alias {
	case "dst=a":
		return x, x, y
	case "dst=b":
		return y, x, y
	}
	return make([]T, len(a)), x, y
}

// TestScaleDividesLikeTheGoLoop: Scale (a Mean's division by the world
// size) gives x / n exactly as Go divides, at every length around the
// vector loop's 32 float32 (16 float64) elements, for world sizes whose
// reciprocal is exact (2, 4) and not (3, 7).
func TestScaleDividesLikeTheGoLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 64, 100, 1000, 4099} {
		for _, world := range []int{1, 2, 3, 4, 7} {
			x64 := make([]float64, n)
			x32 := make([]float32, n)
			for i := range n {
				if rng.IntN(4) == 0 {
					x64[i] = specials[rng.IntN(len(specials))]
				} else {
					x64[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(80)-40))
				}
				x32[i] = float32(x64[i])
			}
			want32, want64 := make([]float32, n), make([]float64, n)
			for i := range n {
				want32[i], want64[i] = x32[i]/float32(world), x64[i]/float64(world)
			}
			collective.Scale(x32, world)
			collective.Scale(x64, world)
			for i := range n {
				if math.Float32bits(x32[i]) != math.Float32bits(want32[i]) {
					t.Fatalf("n=%d world %d float32 element %d: gave %v, want %v", n, world, i, x32[i], want32[i])
				}
				if math.Float64bits(x64[i]) != math.Float64bits(want64[i]) {
					t.Fatalf("n=%d world %d float64 element %d: gave %v, want %v", n, world, i, x64[i], want64[i])
				}
			}
		}
	}
}

// BenchmarkScale: a Mean's division of resnet8's (77,754) and the mlp's
// (235,146) float32 gradients by 2 ranks, as ddp does once a step.
func BenchmarkScale(b *testing.B) {
	for _, n := range []int{77754, 235146} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			buf := make([]float32, n)
			for i := range buf {
				buf[i] = float32(i)
			}
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				collective.Scale(buf, 2)
			}
		})
	}
}
