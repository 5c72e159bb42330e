//go:build amd64 && !purego && (linux || darwin)

package ops

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// interleave2 and deinterleave2 (the strided input gradient's phase merge
// and the strided forward's split) give the definition's values on the Go
// loop and on the AVX2 kernel, for rows of every length to 41 (odd ones
// too; 28 and 14 at resnet8's shapes), their inputs and outputs ending at
// the last readable float before an unreadable page, and write nothing
// outside their outputs.
func TestInterleave2MatchesDefinition(t *testing.T) {
	defer func(v bool) { useAVX2 = v }(useAVX2)
	tiers := []bool{false}
	if useAVX2 {
		tiers = append(tiers, true)
	}
	r := rand.New(rand.NewPCG(21, 22))
	const pre = 3 // sentinels before each output
	for _, avx2 := range tiers {
		useAVX2 = avx2
		for l := 0; l <= 41; l++ {
			ne, no := (l+1)/2, l/2
			name := fmt.Sprintf("avx2=%v/len=%d", avx2, l)
			t.Run("interleave2/"+name, func(t *testing.T) {
				for _, at := range []int{0, 5} {
					e, o := guarded(t, at+ne), guarded(t, at+no)
					copy(e, randF32(r, len(e)))
					copy(o, randF32(r, len(o)))
					for _, c := range []struct {
						name string
						e, o []float32
					}{{"both", e, o}, {"e only", e, nil}, {"o only", nil, o}, {"neither", nil, nil}} {
						buf := guarded(t, pre+l)
						for i := range buf {
							buf[i] = -7
						}
						interleave2(buf[pre:], c.e, c.o, at)
						for i, v := range buf[:pre] {
							if v != -7 {
								t.Fatalf("%s at %d: sentinel %d before the row = %v", c.name, at, i, v)
							}
						}
						for i, v := range buf[pre:] {
							var want float32
							if src := [2][]float32{c.e, c.o}[i%2]; src != nil {
								want = src[at+i/2]
							}
							if v != want {
								t.Fatalf("%s at %d: row[%d] = %v, want %v", c.name, at, i, v, want)
							}
						}
					}
				}
			})
			t.Run("deinterleave2/"+name, func(t *testing.T) {
				src := guarded(t, l)
				copy(src, randF32(r, l))
				eb, ob := guarded(t, pre+ne), guarded(t, pre+no)
				for i := range eb {
					eb[i] = -7
				}
				for i := range ob {
					ob[i] = -7
				}
				deinterleave2(eb[pre:], ob[pre:], src)
				for i := 0; i < pre; i++ {
					if eb[i] != -7 || ob[i] != -7 {
						t.Fatalf("sentinel %d before e or o = %v, %v", i, eb[i], ob[i])
					}
				}
				for j, v := range eb[pre:] {
					if v != src[2*j] {
						t.Fatalf("e[%d] = %v, want src[%d] = %v", j, v, 2*j, src[2*j])
					}
				}
				for j, v := range ob[pre:] {
					if v != src[2*j+1] {
						t.Fatalf("o[%d] = %v, want src[%d] = %v", j, v, 2*j+1, src[2*j+1])
					}
				}
			})
		}
	}
}
