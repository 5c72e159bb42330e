package ops

import (
	"fmt"
	"math/bits"
	"unsafe"
)

// Row permutations of the strided implicit path: splitting an image row
// into its column phases (padChunk at width stride 2) and interleaving a
// dx row from its column phases (writePhaseRows). Each is one AVX-512
// permute of a row of up to 32 floats, zeros included, instead of a loop
// of scalar moves and separate clears (the scalar moves took half of
// resnet8's 28x28 stride-2 forward).

// permPlan is one permutation of permRows (its layout is read by
// perm_amd64.s): out[l] = t[idx[l]] for the lanes l in kz, 0 in the
// others, stored for the lanes in ks; t's lanes 0-15 are loaded from a
// under ka, 16-31 from b under kb.
type permPlan struct {
	idx            [32]int32
	ka, kb, kz, ks uint32
}

// permRows applies p to rows rows: t from a[r·lds:] and b[r·lds:], out to
// dst[r·ldd:].
func permRows(dst []float32, ldd int, a, b []float32, lds, rows int, p *permPlan) {
	if rows <= 0 {
		return
	}
	need := func(n int, m uint32) int {
		if m == 0 {
			return 0
		}
		return n + bits.Len32(m)
	}
	if need((rows-1)*ldd, p.ks) > len(dst) || need((rows-1)*lds, p.ka) > len(a) || need((rows-1)*lds, p.kb) > len(b) {
		panic(fmt.Sprintf("ops: permRows of %d rows (%d and %d apart) outside dst (%d), a (%d) or b (%d)",
			rows, ldd, lds, len(dst), len(a), len(b)))
	}
	permRows32(unsafe.SliceData(dst), ldd, unsafe.SliceData(a), unsafe.SliceData(b), lds, rows, p)
}

// lanes is a mask of the low n lanes (n ≤ 32).
func lanes(n int) uint32 { return uint32(uint64(1)<<max(n, 0) - 1) }

// splitPlan is the permutation that writes a whole slot of column phase px
// (stride sw, padding pw) from an image row of w pixels (a the row, b the
// row from pixel 16): lane t is pixel t·sw + px - pw, or 0 outside the row.
// ok is false when the row or the slot is wider than 32.
func splitPlan(p *permPlan, w, slot, sw, pw, px int) (ok bool) {
	if w > 32 || slot > 32 {
		return false
	}
	*p = permPlan{ka: lanes(min(w, 16)), kb: lanes(w - 16), ks: lanes(slot)}
	for t := 0; t < slot; t++ {
		if x := t*sw + px - pw; x >= 0 && x < w {
			p.idx[t], p.kz = int32(x), p.kz|1<<t
		}
	}
	return true
}

// mergePlan is the permutation that writes a row of w pixels from its two
// column phases (a the even pixels, b the odd ones, either absent: zeros).
// ok is false when the row is wider than 32.
func mergePlan(p *permPlan, w int, even, odd bool) (ok bool) {
	if w > 32 {
		return false
	}
	*p = permPlan{ks: lanes(w)}
	if even {
		p.ka = lanes((w + 1) / 2)
	}
	if odd {
		p.kb = lanes(w / 2)
	}
	for l := 0; l < w; l++ {
		p.idx[l] = int32(l / 2)
		if l%2 == 1 {
			p.idx[l] += 16
		}
		if (l%2 == 0 && even) || (l%2 == 1 && odd) {
			p.kz |= 1 << l
		}
	}
	return true
}
