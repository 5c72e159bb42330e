package ops

import (
	"unsafe"
)

// The AVX2 kernels read a partial vector (the last columns of a row) with
// VMASKMOVPS over the whole vector. Intel's manual says the masked-off
// lanes never fault; AMD's leaves it to the implementation, and qemu-user's
// TCG faults when they lie on an unmapped page (it stores only the selected
// lanes: masked stores do not fault there). A slice that ends where a page
// ends, the next one unmapped, is not rare: a tensor of a whole number of
// pages can be a span of its own at the end of the heap's mapping. So an
// operand whose masked vector would reach past the page holding the end of
// its slice's capacity is read from a copy: the same instructions on the
// same values, the same bits. Within a slice every page is mapped, so one
// comparison a call decides it.

// tailPage is the page size the checks assume (x86-64's smallest).
const tailPage = 4096

// pastPage reports whether reading float32s s[0:end] (end may exceed
// cap(s)) would touch a page beyond the one that holds s's last element of
// capacity.
func pastPage(s []float32, end int) bool {
	if end <= cap(s) {
		return false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	last := base + uintptr(cap(s))*4 - 1
	return base+uintptr(end)*4-1 > last|(tailPage-1)
}

// nnEdge is sgemmNNEdge's copy of B's last column block.
type nnEdge struct {
	b   []float32
	off []int32
}

// nnEdgeFree holds nnEdges between calls: sgemmNNPacked has no scratch of
// its own (the convolutions call it with their worker's).
var nnEdgeFree freeList[nnEdge]

// sgemmNNEdge is sgemmNNPacked's last column block (cols columns, not a
// multiple of 16, at b[0] and c[0]) on the AVX2 kernel where a masked
// vector of b (rows up to bmax) or, when adding, of c would reach past the
// page of its slice's end: b's block is copied whole, rows reach apart, and
// the 8-row blocks of c that would go past are read and written through a
// tile on the stack.
func sgemmNNEdge(m, k int, ap, b []float32, boff []int32, bmax int, c []float32, ldc, cols, flag int) {
	reach := (cols + 15) &^ 15
	bp, bo := &b[0], &boff[0]
	var e *nnEdge
	if pastPage(b, bmax+reach) {
		e = nnEdgeFree.get()
		e.b, e.off = grow(e.b, k*reach), grow32(e.off, k)
		for kk, o := range boff {
			row := e.b[kk*reach : (kk+1)*reach]
			clear(row[copy(row, b[o:int(o)+cols]):])
			e.off[kk] = int32(kk * reach)
		}
		bp, bo = &e.b[0], &e.off[0]
	}
	for rb := 0; rb < m/8; rb++ {
		cb := c[rb*8*ldc:]
		if flag == 0 || !pastPage(cb, 7*ldc+reach) {
			sgemmNN8x32AVX2(k, &ap[rb*8*k], bp, bo, &cb[0], ldc, cols, flag)
			continue
		}
		var t [8 * 32]float32
		for r := range 8 {
			copy(t[r*reach:], cb[r*ldc:r*ldc+cols])
		}
		sgemmNN8x32AVX2(k, &ap[rb*8*k], bp, bo, &t[0], reach, cols, flag)
		for r := range 8 {
			copy(cb[r*ldc:r*ldc+cols], t[r*reach:r*reach+cols])
		}
	}
	if e != nil {
		nnEdgeFree.put(e)
	}
}

// ntEdge is sgemmNTSegs's copies of the rows its AVX2 kernel would read
// past the page of a's or b's end, each padded to a whole number of
// vectors (q16 values): the 4-row tiles of a from row ia on, every
// segment, and one 6-row tile of b.
type ntEdge struct {
	a, b  []float32
	ia    int
	q16   int
	boff  [6]int32
	arows int
}

// start copies the tiles of a (m rows, lda apart, segs segments astride
// apart, q values each) whose masked vectors would reach past its page.
func (e *ntEdge) start(m, q, segs int, a []float32, lda, astride int) {
	e.q16 = (q + 15) &^ 15
	e.ia = m
	for e.ia > 0 && pastPage(a, (segs-1)*astride+(e.ia-1)*lda+e.q16) {
		e.ia -= 4
	}
	e.arows = m - e.ia
	e.a = grow(e.a, segs*e.arows*e.q16)
	for sg := 0; sg < segs; sg++ {
		for r := 0; r < e.arows; r++ {
			row := e.a[(sg*e.arows+r)*e.q16 : (sg*e.arows+r+1)*e.q16]
			at := sg*astride + (e.ia+r)*lda
			clear(row[copy(row, a[at:at+q]):])
		}
	}
}

// rowsOfA is the 4-row tile of a at row i for the kernel: its first row,
// the rows' and the segments' distance.
func (e *ntEdge) rowsOfA(i int, a []float32, lda, astride int) (*float32, int, int) {
	if e == nil || i < e.ia {
		return &a[i*lda], lda, astride
	}
	return &e.a[(i-e.ia)*e.q16], e.q16, e.arows * e.q16
}

// rowsOfB is the 6-row tile of b at offsets bo for the kernel: b and bo,
// or the tile copied when its masked vectors would reach past b's page.
func (e *ntEdge) rowsOfB(q, segs int, b []float32, bo *[6]int32, bstride int) (*float32, *[6]int32, int) {
	hi := int32(0)
	for _, o := range bo {
		hi = max(hi, o)
	}
	if !pastPage(b, (segs-1)*bstride+int(hi)+e.q16) {
		return &b[0], bo, bstride
	}
	e.b = grow(e.b, segs*6*e.q16)
	for sg := 0; sg < segs; sg++ {
		for t, o := range bo {
			row := e.b[(sg*6+t)*e.q16 : (sg*6+t+1)*e.q16]
			at := sg*bstride + int(o)
			clear(row[copy(row, b[at:at+q]):])
		}
	}
	for t := range e.boff {
		e.boff[t] = int32(t * e.q16)
	}
	return &e.b[0], &e.boff, 6 * e.q16
}
