package optim

import (
	"fmt"
	"math"
	"testing"
)

// The SIMD kernels give bit for bit what the Go loops give, on ordinary
// values, zeros of both signs, subnormals and huge values, at lengths around
// multiples of the lane count (8 float32, 4 float64).
func TestSIMDMatchesGoLoops(t *testing.T) {
	if !useSIMD {
		t.Skip("no SIMD kernels on this platform or build")
	}
	t.Run("float32", func(t *testing.T) {
		specials := []float32{0, float32(math.Copysign(0, -1)), 1e-42, -1e-42, 1e-30, 3e38, -3e38, 1, -1}
		testSIMDMatchesGoLoops(t, []int{8, 9, 15, 16, 31, 1003}, specials)
	})
	t.Run("float64", func(t *testing.T) {
		specials := []float64{0, math.Copysign(0, -1), 5e-324, -1e-310, 1e-160, 1e300, -1e300, 1, -1}
		testSIMDMatchesGoLoops(t, []int{4, 5, 7, 8, 13, 1003}, specials)
	})
}

func testSIMDMatchesGoLoops[T float](t *testing.T, lens []int, specials []T) {
	defer func() { useSIMD = true }()
	for _, c := range optCases {
		for _, n := range lens {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				p0, gs := data(n, 4, uint64(n))
				var res [2][]T
				var st [2]State
				for k, simd := range []bool{true, false} {
					useSIMD = simd
					o := mustNew(t, c, 0, n)
					p := conv[T](p0)
					for i := range min(n, len(specials)) {
						p[(i*7)%n] = specials[i]
					}
					for s, g := range gs {
						gT := conv[T](g)
						for i := range min(n, len(specials)) {
							gT[(i*5+s)%n] = specials[(i+s)%len(specials)]
						}
						o.Begin()
						update(o, p, gT, 0)
					}
					res[k], st[k] = p, o.State()
				}
				for i := range res[0] {
					if bits(res[0][i]) != bits(res[1][i]) {
						t.Errorf("p[%d]: SIMD %g, Go %g", i, res[0][i], res[1][i])
					}
				}
				if !statesEqual(st[0], st[1]) {
					t.Errorf("state differs between SIMD and Go loops")
				}
			})
		}
	}
}
