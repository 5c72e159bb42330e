package optim

import (
	"fmt"
	"math"
	"testing"
)

// The 8-lane kernels give bit for bit what the Go loops give, on ordinary
// values, zeros of both signs, subnormals and huge values, at lengths around
// multiples of 8.
func TestSIMDMatchesGoLoops(t *testing.T) {
	if !useSIMD {
		t.Skip("no SIMD kernels on this platform or build")
	}
	defer func() { useSIMD = true }()
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-42, -1e-42, 1e-30, 3e38, -3e38, 1, -1}
	for _, c := range optCases {
		for _, n := range []int{8, 9, 15, 16, 31, 1003} {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				p0, gs := data(n, 4, uint64(n))
				var res [2][]float32
				var st [2]State
				for k, simd := range []bool{true, false} {
					useSIMD = simd
					o := mustNew(t, c, 0, n)
					p := to32(p0)
					for i := range min(n, len(specials)) {
						p[(i*7)%n] = specials[i]
					}
					for s, g := range gs {
						g32 := to32(g)
						for i := range min(n, len(specials)) {
							g32[(i*5+s)%n] = specials[(i+s)%len(specials)]
						}
						o.Begin()
						o.Update32(p, g32, 0)
					}
					res[k], st[k] = p, o.State()
				}
				if !bitsEqual32(res[0], res[1]) {
					for i := range res[0] {
						if math.Float32bits(res[0][i]) != math.Float32bits(res[1][i]) {
							t.Errorf("p[%d]: SIMD %g, Go %g", i, res[0][i], res[1][i])
						}
					}
				}
				if !statesEqual(st[0], st[1]) {
					t.Errorf("state differs between SIMD and Go loops")
				}
			})
		}
	}
}

func TestSIMDMatchesGoLoops64(t *testing.T) {
	if !useSIMD {
		t.Skip("no SIMD kernels on this platform or build")
	}
	defer func() { useSIMD = true }()
	specials := []float64{0, math.Copysign(0, -1), 5e-324, -1e-310, 1e-160, 1e300, -1e300, 1, -1}
	for _, c := range optCases {
		for _, n := range []int{4, 5, 7, 8, 13, 1003} {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				p0, gs := data(n, 4, uint64(n))
				var res [2][]float64
				var st [2]State
				for k, simd := range []bool{true, false} {
					useSIMD = simd
					o := mustNew(t, c, 0, n)
					p := append([]float64(nil), p0...)
					for i := range min(n, len(specials)) {
						p[(i*7)%n] = specials[i]
					}
					for s, g := range gs {
						g = append([]float64(nil), g...)
						for i := range min(n, len(specials)) {
							g[(i*5+s)%n] = specials[(i+s)%len(specials)]
						}
						o.Begin()
						o.Update64(p, g, 0)
					}
					res[k], st[k] = p, o.State()
				}
				if !bitsEqual64(res[0], res[1]) {
					for i := range res[0] {
						if math.Float64bits(res[0][i]) != math.Float64bits(res[1][i]) {
							t.Errorf("p[%d]: SIMD %g, Go %g", i, res[0][i], res[1][i])
						}
					}
				}
				if !statesEqual(st[0], st[1]) {
					t.Errorf("state differs between SIMD and Go loops")
				}
			})
		}
	}
}
