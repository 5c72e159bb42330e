//go:build amd64 && !purego

package ops

import (
	"sync"
	"unsafe"
)

// The AVX2 elementwise kernels (elem_avx2_amd64.s) load and store the last
// n%8 elements with VMASKMOVPS over a whole 32-byte vector. Intel's manual
// says the masked-off lanes never fault; AMD's leaves it to the
// implementation, and an emulator (qemu-user's TCG) faults when they lie on
// an unmapped page. A slice that ends where a page ends and the next page is
// unmapped is not rare: a tensor of a whole number of pages (resnet8's
// 64x64x7x7 activations are 98 pages of 8 KiB) is a span of its own at the
// end of the heap's mapping, and its last 7x7 plane ends with it. So a call
// whose tail vector would reach past the page of its last element runs on
// padded copies (pooled, so no allocation once warm), the same instructions
// on the same values: the same bits. An elementwise kernel runs its whole
// vectors in place and its tail on copies on the stack; a sum, whose lanes
// carry over the whole call, runs on a copy of its operands: on the stack up
// to stackElems elements, from a pool above (so no allocation once warm).

// tailCrosses reports whether the masked tail vector of a kernel over n
// float32s at p reaches beyond the page that holds p[n-1].
func tailCrosses(p *float32, n int) bool {
	if n&7 == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(p)) + uintptr(n&^7)*4
	last := uintptr(unsafe.Pointer(p)) + uintptr(n)*4 - 1
	return (start+31)/tailPage != last/tailPage
}

// tail8 is a kernel's tail (fewer than 8 elements) copied onto the stack.
type tail8 [8]float32

// of copies the last n%8 elements of p[:n] into t.
func (t *tail8) of(p *float32, n int) *float32 {
	copy(t[:], unsafe.Slice(p, n)[n&^7:])
	return &t[0]
}

// back copies the tail in t to the last n%8 elements of p[:n].
func (t *tail8) back(p *float32, n int) { copy(unsafe.Slice(p, n)[n&^7:], t[:n&7]) }

func affine32AVX2(x, y *float32, n int, s, b float32, relu int) {
	if !tailCrosses(x, n) && !tailCrosses(y, n) {
		affine32AVX2asm(x, y, n, s, b, relu)
		return
	}
	n0 := n &^ 7
	affine32AVX2asm(x, y, n0, s, b, relu)
	var tx, ty tail8
	affine32AVX2asm(tx.of(x, n), &ty[0], n&7, s, b, relu)
	ty.back(y, n)
}

func addRelu32AVX2(a, b, y *float32, n int) {
	if !tailCrosses(a, n) && !tailCrosses(b, n) && !tailCrosses(y, n) {
		addRelu32AVX2asm(a, b, y, n)
		return
	}
	addRelu32AVX2asm(a, b, y, n&^7)
	var ta, tb, ty tail8
	addRelu32AVX2asm(ta.of(a, n), tb.of(b, n), &ty[0], n&7)
	ty.back(y, n)
}

func relu32AVX2(x, y *float32, n int) {
	if !tailCrosses(x, n) && !tailCrosses(y, n) {
		relu32AVX2asm(x, y, n)
		return
	}
	relu32AVX2asm(x, y, n&^7)
	var tx, ty tail8
	relu32AVX2asm(tx.of(x, n), &ty[0], n&7)
	ty.back(y, n)
}

func add32AVX2(a, b, y *float32, n int) {
	if !tailCrosses(a, n) && !tailCrosses(b, n) && !tailCrosses(y, n) {
		add32AVX2asm(a, b, y, n)
		return
	}
	add32AVX2asm(a, b, y, n&^7)
	var ta, tb, ty tail8
	add32AVX2asm(ta.of(a, n), tb.of(b, n), &ty[0], n&7)
	ty.back(y, n)
}

func maskPos32AVX2(y, dy, dx *float32, n int) {
	if !tailCrosses(y, n) && !tailCrosses(dy, n) && !tailCrosses(dx, n) {
		maskPos32AVX2asm(y, dy, dx, n)
		return
	}
	maskPos32AVX2asm(y, dy, dx, n&^7)
	var ty, tdy, tdx tail8
	maskPos32AVX2asm(ty.of(y, n), tdy.of(dy, n), tdx.of(dx, n), n&7)
	tdx.back(dx, n)
}

func lincomb32AVX2(d, x, out *float32, n int, a, b, k float32) {
	if !tailCrosses(d, n) && !tailCrosses(x, n) && !tailCrosses(out, n) {
		lincomb32AVX2asm(d, x, out, n, a, b, k)
		return
	}
	lincomb32AVX2asm(d, x, out, n&^7, a, b, k)
	var td, tx, to tail8
	lincomb32AVX2asm(td.of(d, n), tx.of(x, n), to.of(out, n), n&7, a, b, k)
	to.back(out, n)
}

func bnAddRelu32AVX2(x1, x2, y *float32, n int, a, b, k float32) {
	if !tailCrosses(x1, n) && !tailCrosses(x2, n) && !tailCrosses(y, n) {
		bnAddRelu32AVX2asm(x1, x2, y, n, a, b, k)
		return
	}
	bnAddRelu32AVX2asm(x1, x2, y, n&^7, a, b, k)
	var t1, t2, ty tail8
	bnAddRelu32AVX2asm(t1.of(x1, n), t2.of(x2, n), ty.of(y, n), n&7, a, b, k)
	ty.back(y, n)
}

// stackElems is the most elements a sum copies onto the stack.
const stackElems = 1024

// sumScratch holds copies of a sum's operands above stackElems.
type sumScratch struct{ d, x []float32 }

var sumPool = sync.Pool{New: func() any { return new(sumScratch) }}

// padded returns a copy of p[:n] in *b, with a whole vector after it.
func padded(b *[]float32, p *float32, n int) *float32 {
	if cap(*b) < n+8 {
		*b = make([]float32, n+8)
	}
	c := (*b)[:n+8]
	copy(c, unsafe.Slice(p, n))
	return &c[0]
}

func shiftedSums32AVX2(x *float32, n int, k float32) (s, sq float32) {
	if !tailCrosses(x, n) {
		return shiftedSums32AVX2asm(x, n, k)
	}
	if n <= stackElems {
		var c [stackElems + 8]float32
		copy(c[:], unsafe.Slice(x, n))
		return shiftedSums32AVX2asm(&c[0], n, k)
	}
	t := sumPool.Get().(*sumScratch)
	s, sq = shiftedSums32AVX2asm(padded(&t.x, x, n), n, k)
	sumPool.Put(t)
	return s, sq
}

func dotSums32AVX2(d, x *float32, n int) (s, sx float32) {
	if !tailCrosses(d, n) && !tailCrosses(x, n) {
		return dotSums32AVX2asm(d, x, n)
	}
	if n <= stackElems {
		var cd, cx [stackElems + 8]float32
		copy(cd[:], unsafe.Slice(d, n))
		copy(cx[:], unsafe.Slice(x, n))
		return dotSums32AVX2asm(&cd[0], &cx[0], n)
	}
	t := sumPool.Get().(*sumScratch)
	s, sx = dotSums32AVX2asm(padded(&t.d, d, n), padded(&t.x, x, n), n)
	sumPool.Put(t)
	return s, sx
}
