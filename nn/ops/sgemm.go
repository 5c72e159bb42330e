package ops

import (
	"fmt"
	"unsafe"
)

// The convolutions' float32 multiplies run on kernels of this package where
// the CPU has AVX-512 (sgemm_amd64.s) or AVX2 and FMA
// (sgemm_avx2_amd64.s), not on package blas: their shapes
// (16 to 64 rows, a few hundred columns per image) are where a BLAS spends
// more time packing operands and handling edges than multiplying (BLIS ran
// resnet8's stage-1 multiplies at 11-86 GFLOP/s of about 200 a core). The
// kernels read B in place, row by row through a table of offsets (so no
// packing of the large operand), pack only the small one (the weight, a few
// thousand values), and keep the whole 8x32 or 4x6 tile in registers.
// Results are fixed by the shapes: the same bits whatever the worker count.

// mmKernels reports whether the multiplies run on this package's kernels:
// the AVX-512 ones, else the AVX2 ones (sgemm_avx2_amd64.s), which keep the
// same Go-side contracts in smaller register tiles.
func mmKernels() bool { return useAVX512 || useAVX2 }

// mmScratch is one worker's scratch for the kernels.
type mmScratch struct {
	ap        []float32 // op(a) packed, 8 rows at a time, k-major
	ragA      []float32 // the last rows of a, zero-padded (sgemmNTRagged)
	ragC      []float32 // the last rows' results (the ragged multiplies)
	boff      []int32   // row offsets of b
	bk, bld   int       // boff holds kk·bld for kk < bk
	tile      [24]float32
	boffClamp [6]int32
	nt        ntEdge
}

// rows sets s.boff to kk·ld for kk < k.
func (s *mmScratch) rows(k, ld int) []int32 {
	if s.bk != k || s.bld != ld || len(s.boff) != k {
		s.boff = grow32(s.boff, k)
		for i := range s.boff {
			s.boff[i] = int32(i * ld)
		}
		s.bk, s.bld = k, ld
	}
	return s.boff
}

func grow32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

// mm is gemm (c = alpha·op(a)·op(b) + beta·c, row-major) for the
// convolutions: on this package's kernels when they take it (float32,
// alpha 1, beta 0 or 1, no transposed b with a transposed a, 8 rows at a time
// (4 for a transposed b), the last block of other row counts padded with
// zero rows), else on package blas.
func mm[T float](s *mmScratch, tA, tB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	var z T
	if !mmKernels() || unsafe.Sizeof(z) != 4 || alpha != 1 || (beta != 0 && beta != 1) ||
		m == 0 || n == 0 || k == 0 || int64(k)*int64(max(ldb, n)) >= 1<<31 {
		gemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	acc := beta == 1
	switch {
	case !tB && m%8 == 0:
		sgemmNN(s, tA, m, n, k, f32s(a), lda, f32s(b), s.rows(k, ldb), f32s(c), ldc, acc)
	case !tB && m > 8:
		sgemmNNRagged(s, tA, m, n, k, f32s(a), lda, f32s(b), s.rows(k, ldb), f32s(c), ldc, acc)
	case tB && !tA && m%4 == 0:
		sgemmNT(s, m, n, k, f32s(a), lda, f32s(b), s.rows(n, ldb), f32s(c), ldc, acc)
	case tB && !tA && m > 4:
		sgemmNTRagged(s, m, n, k, f32s(a), lda, f32s(b), s.rows(n, ldb), f32s(c), ldc, acc)
	default:
		gemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	}
}

// sgemmNN sets c (m×n, ldc apart) to op(a)·B, or adds it when acc, where
// op(a) is m×k (a with rows lda apart, or its transpose when transA) and
// row kk of B is b[boff[kk] : boff[kk]+n]. m is a multiple of 8.
func sgemmNN(s *mmScratch, transA bool, m, n, k int, a []float32, lda int, b []float32, boff []int32, c []float32, ldc int, acc bool) {
	if len(s.ap) < m*k {
		s.ap = make([]float32, m*k)
	}
	ap := s.ap[:m*k]
	packA(ap, transA, m, k, a, lda)
	sgemmNNPacked(m, n, k, ap, b, boff, c, ldc, acc)
}

// sgemmNNRagged is sgemmNN for m not a multiple of 8 (odd channel
// counts, which the BLAS took through a narrow call): the whole blocks of
// 8 rows straight into c, the last m%8 rows packed with zero rows to a
// block, multiplied into scratch, and copied (or added) into c.
func sgemmNNRagged(s *mmScratch, transA bool, m, n, k int, a []float32, lda int, b []float32, boff []int32, c []float32, ldc int, acc bool) {
	m8 := m &^ 7
	if len(s.ap) < (m8+8)*k {
		s.ap = make([]float32, (m8+8)*k)
	}
	ap := s.ap[:(m8+8)*k]
	packA(ap, transA, m8, k, a, lda)
	last := ap[m8*k:]
	clear(last)
	for r := 0; r < m-m8; r++ {
		for kk := 0; kk < k; kk++ {
			if transA {
				last[kk*8+r] = a[kk*lda+m8+r]
			} else {
				last[kk*8+r] = a[(m8+r)*lda+kk]
			}
		}
	}
	sgemmNNPacked(m8, n, k, ap[:m8*k], b, boff, c, ldc, acc)
	s.ragC = grow(s.ragC, 8*n)
	sgemmNNPacked(8, n, k, last, b, boff, s.ragC, n, false)
	raggedRows(c[m8*ldc:], ldc, s.ragC, n, m-m8, acc)
}

// sgemmNTRagged is sgemmNT for m not a multiple of 4: the whole blocks of
// 4 rows straight into c, the last m%4 rows of a copied with zero rows to
// a block, multiplied into scratch, and copied (or added) into c.
func sgemmNTRagged(s *mmScratch, m, n, q int, a []float32, lda int, b []float32, boff []int32, c []float32, ldc int, acc bool) {
	m4 := m &^ 3
	sgemmNT(s, m4, n, q, a, lda, b, boff, c, ldc, acc)
	s.ragA = grow(s.ragA, 4*q)
	clear(s.ragA)
	for r := 0; r < m-m4; r++ {
		copy(s.ragA[r*q:(r+1)*q], a[(m4+r)*lda:])
	}
	s.ragC = grow(s.ragC, 4*n)
	sgemmNT(s, 4, n, q, s.ragA, q, b, boff, s.ragC, n, false)
	raggedRows(c[m4*ldc:], ldc, s.ragC, n, m-m4, acc)
}

// raggedRows copies (or, with acc, adds) rows rows of n values from t
// (rows n apart) into c (rows ldc apart).
func raggedRows(c []float32, ldc int, t []float32, n, rows int, acc bool) {
	for r := 0; r < rows; r++ {
		if acc {
			addTo(c[r*ldc:r*ldc+n], t[r*n:])
		} else {
			copy(c[r*ldc:r*ldc+n], t[r*n:(r+1)*n])
		}
	}
}

// packA writes op(a) (m×k: a with rows lda apart, or its transpose when
// transA) into ap, 8 rows at a time, k-major: ap[(i/8)·8k + kk·8 + i%8] =
// op(a)[i][kk], the layout sgemmNN8x32 reads. m is a multiple of 8.
func packA(ap []float32, transA bool, m, k int, a []float32, lda int) {
	ap = ap[:m*k]
	for rb := 0; rb < m/8; rb++ {
		blk := ap[rb*8*k : (rb+1)*8*k]
		for r := 0; r < 8; r++ {
			i := rb*8 + r
			if transA {
				for kk := 0; kk < k; kk++ {
					blk[kk*8+r] = a[kk*lda+i]
				}
			} else {
				row := a[i*lda : i*lda+k]
				for kk, v := range row {
					blk[kk*8+r] = v
				}
			}
		}
	}
}

// sgemmNNPacked is sgemmNN with op(a) already packed (packA): the
// convolutions pack their weight once a call, not once a chunk of images.
func sgemmNNPacked(m, n, k int, ap []float32, b []float32, boff []int32, c []float32, ldc int, acc bool) {
	bmax := checkRows("b", b, boff[:k], n)
	if (m-1)*ldc+n > len(c) || len(ap) < m*k {
		panic(fmt.Sprintf("ops: sgemmNN c has %d elements, packed a %d: want %d and %d", len(c), len(ap), (m-1)*ldc+n, m*k))
	}
	flag := 0
	if acc {
		flag = 1
	}
	j0 := 0
	if !useAVX512 {
		// Whole blocks of 24 columns on the AVX2 kernel of twelve
		// accumulators a piece; the rest below.
		for ; n-j0 >= 24; j0 += 24 {
			for rb := 0; rb < m/8; rb++ {
				sgemmNN8x24AVX2(k, &ap[rb*8*k], &b[j0], &boff[0], &c[rb*8*ldc+j0], ldc, flag)
			}
		}
	}
	for j := j0; j < n; j += 32 {
		cols := min(32, n-j)
		if !useAVX512 && cols%16 != 0 {
			// The last, partial column block: the AVX2 kernel reads 16
			// columns at a time, the missing ones masked.
			reach := (cols + 15) &^ 15
			if pastPage(b[j:], bmax+reach) || acc && pastPage(c[j:], (m-1)*ldc+reach) {
				sgemmNNEdge(m, k, ap, b[j:], boff[:k], bmax, c[j:], ldc, cols, flag)
				break
			}
		}
		mask := uint32(1<<cols - 1)
		for rb := 0; rb < m/8; rb++ {
			if useAVX512 {
				sgemmNN8x32(k, &ap[rb*8*k], &b[j], &boff[0], &c[rb*8*ldc+j], ldc, mask, flag)
			} else {
				sgemmNN8x32AVX2(k, &ap[rb*8*k], &b[j], &boff[0], &c[rb*8*ldc+j], ldc, cols, flag)
			}
		}
	}
}

// sgemmNT sets c (m×n, ldc apart) to Σ_{p<q} a[i·lda + p]·b[boff[j] + p],
// or adds it when acc. m is a multiple of 4.
func sgemmNT(s *mmScratch, m, n, q int, a []float32, lda int, b []float32, boff []int32, c []float32, ldc int, acc bool) {
	sgemmNTSegs(s, m, n, q, 1, a, lda, 0, b, boff, 0, c, ldc, acc)
}

// sgemmNTSegs is sgemmNT summed over segs ≥ 1 segments: c (=, or += when
// acc) Σ_{s<segs} Σ_{p<q} a[s·astride + i·lda + p]·b[s·bstride + boff[j] + p].
// Each product is summed lane by lane over the segments and across lanes
// once (the weight gradient's image chunks, segs at a time).
func sgemmNTSegs(s *mmScratch, m, n, q, segs int, a []float32, lda, astride int, b []float32, boff []int32, bstride int, c []float32, ldc int, acc bool) {
	if segs < 1 || astride < 0 || bstride < 0 {
		panic(fmt.Sprintf("ops: sgemmNT of %d segments, %d and %d apart", segs, astride, bstride))
	}
	bmax := checkRows("b", b, boff[:n], (segs-1)*bstride+q)
	if (segs-1)*astride+(m-1)*lda+q > len(a) || (m-1)*ldc+n > len(c) {
		panic(fmt.Sprintf("ops: sgemmNT a has %d elements, c %d: want %d and %d", len(a), len(c), (segs-1)*astride+(m-1)*lda+q, (m-1)*ldc+n))
	}
	n16, tail := q/16, uint32(1<<(q%16)-1)
	flag := 0
	if acc {
		flag = 1
	}
	// The AVX2 kernel reads a row's last q%16 values as 16, the others
	// masked: rows whose masked vector would reach past the last page of a
	// or b are read from copies (ntEdge).
	var e *ntEdge
	if q16 := (q + 15) &^ 15; !useAVX512 && q%16 != 0 &&
		(pastPage(a, (segs-1)*astride+(m-1)*lda+q16) || pastPage(b, (segs-1)*bstride+bmax+q16)) {
		e = &s.nt
		e.start(m, q, segs, a, lda, astride)
	}
	for j, w := 0, 6; j < n; j += w {
		w = 6
		if rest := n - j; !useAVX512 && e == nil && (rest == 4 || rest == 8) {
			// The last 4 or 8 columns on AVX2 in tiles of 4, where 6
			// would compute 2 or 4 columns for nothing.
			w = 4
			for i := 0; i < m; i += 4 {
				sgemmNT4x4AVX2(n16, tail, &a[i*lda], lda, &b[0], &boff[j], &c[i*ldc+j], ldc, flag, segs, astride, bstride)
			}
			continue
		}
		if j+6 <= n && e == nil {
			for i := 0; i < m; i += 4 {
				nt4x6(n16, tail, &a[i*lda], lda, &b[0], &boff[j], &c[i*ldc+j], ldc, flag, segs, astride, bstride)
			}
			continue
		}
		// The tile's B rows from a copy of its offsets (and, past a page,
		// of the rows); in the last, partial tile the missing rows repeat
		// the last one, and only the valid columns leave the scratch tile.
		bo := &s.boffClamp
		for t := range bo {
			bo[t] = boff[min(j+t, n-1)]
		}
		bp, bs := &b[0], bstride
		if e != nil {
			bp, bo, bs = e.rowsOfB(q, segs, b, bo, bstride)
		}
		if j+6 <= n {
			for i := 0; i < m; i += 4 {
				ap, la, as := e.rowsOfA(i, a, lda, astride)
				nt4x6(n16, tail, ap, la, bp, &bo[0], &c[i*ldc+j], ldc, flag, segs, as, bs)
			}
			continue
		}
		for i := 0; i < m; i += 4 {
			ap, la, as := e.rowsOfA(i, a, lda, astride)
			nt4x6(n16, tail, ap, la, bp, &bo[0], &s.tile[0], 6, 0, segs, as, bs)
			for r := 0; r < 4; r++ {
				row := c[(i+r)*ldc+j : (i+r)*ldc+n]
				for t := range row {
					if acc {
						row[t] += s.tile[r*6+t]
					} else {
						row[t] = s.tile[r*6+t]
					}
				}
			}
		}
	}
}

// nt4x6 is sgemmNT4x6 on the kernels in use.
func nt4x6(n16 int, tail uint32, a *float32, lda int, b *float32, boff *int32, c *float32, ldc int, acc int, segs, astride, bstride int) {
	if useAVX512 {
		sgemmNT4x6(n16, tail, a, lda, b, boff, c, ldc, acc, segs, astride, bstride)
	} else {
		sgemmNT4x6AVX2(n16, tail, a, lda, b, boff, c, ldc, acc, segs, astride, bstride)
	}
}

// checkRows panics unless every row b[off : off+n] lies within b (the
// kernels read b through raw pointers), and returns the largest off.
func checkRows(what string, b []float32, boff []int32, n int) int {
	hi := int32(0)
	for _, o := range boff {
		if o < 0 || int(o)+n > len(b) {
			panic(fmt.Sprintf("ops: kernel row of %s at %d with %d columns is outside its %d elements", what, o, n, len(b)))
		}
		hi = max(hi, o)
	}
	return int(hi)
}
