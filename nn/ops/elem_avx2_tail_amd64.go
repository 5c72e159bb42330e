//go:build amd64 && !purego

package ops

import (
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
// padded copies (kept between calls, so no allocation once warm), the same
// instructions on the same values: the same bits. An elementwise kernel runs its whole
// vectors in place and its tail on copies on the stack; a sum, whose lanes
// carry over the whole call, runs on a copy of its operands: on the stack up
// to stackElems elements, from a free list above (sumFree: no allocation
// once warm, even after a garbage collection).

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

// elemOp names an AVX2 elementwise kernel for elemKernel.
type elemOp uint8

const (
	opAffine elemOp = iota
	opAddRelu
	opRelu
	opAdd
	opMaskPos
	opLincomb
	opBnAddRelu
)

// elemKernel is a call of an elementwise kernel: which, and its scalars.
// The kernels are called by name in one switch, not through a func value:
// the tail copies passed to them then stay on the stack (a pointer passed
// to an unknown function escapes).
type elemKernel struct {
	op      elemOp
	a, b, k float32
	relu    int
}

// call runs the kernel over n elements of its input x, its second input w
// (nil for a kernel with one) and its output y.
func (e *elemKernel) call(x, w, y *float32, n int) {
	switch e.op {
	case opAffine:
		affine32AVX2asm(x, y, n, e.a, e.b, e.relu)
	case opAddRelu:
		addRelu32AVX2asm(x, w, y, n)
	case opRelu:
		relu32AVX2asm(x, y, n)
	case opAdd:
		add32AVX2asm(x, w, y, n)
	case opMaskPos:
		maskPos32AVX2asm(x, w, y, n)
	case opLincomb:
		lincomb32AVX2asm(x, w, y, n, e.a, e.b, e.k)
	case opBnAddRelu:
		bnAddRelu32AVX2asm(x, w, y, n, e.a, e.b, e.k)
	}
}

// tailsFit reports whether no operand's masked tail vector (w nil for a
// kernel with one input) reaches past the page of its last element: the
// kernel then runs in place, in one call.
func tailsFit(x, w, y *float32, n int) bool {
	// From an operand's address: its tail vector's last byte, its last
	// element's (tailCrosses, written out so that tailsFit inlines).
	t, l := uintptr(n|7)*4+3, uintptr(n)*4-1
	xa, wa, ya := uintptr(unsafe.Pointer(x)), uintptr(unsafe.Pointer(w)), uintptr(unsafe.Pointer(y))
	return n&7 == 0 || (xa+t)/tailPage == (xa+l)/tailPage && (ya+t)/tailPage == (ya+l)/tailPage &&
		(w == nil || (wa+t)/tailPage == (wa+l)/tailPage)
}

// onCopies is call where tailsFit is false: the whole vectors in place, the
// tail on copies on the stack, the output's tail copied back.
func (e *elemKernel) onCopies(x, w, y *float32, n int) {
	e.call(x, w, y, n&^7)
	var tx, tw, ty tail8
	var wt *float32
	if w != nil {
		wt = tw.of(w, n)
	}
	e.call(tx.of(x, n), wt, ty.of(y, n), n&7)
	ty.back(y, n)
}

// The wrappers the kernels' callers use: in place where tailsFit, else
// through onCopies. The test (inlined) stays in each wrapper so that the
// usual call is one direct call of the kernel, not a second call and a
// switch: a 7x7 plane's call takes about 15 ns.

func affine32AVX2(x, y *float32, n int, s, b float32, relu int) {
	if tailsFit(x, nil, y, n) {
		affine32AVX2asm(x, y, n, s, b, relu)
		return
	}
	(&elemKernel{op: opAffine, a: s, b: b, relu: relu}).onCopies(x, nil, y, n)
}

func addRelu32AVX2(a, b, y *float32, n int) {
	if tailsFit(a, b, y, n) {
		addRelu32AVX2asm(a, b, y, n)
		return
	}
	(&elemKernel{op: opAddRelu}).onCopies(a, b, y, n)
}

func relu32AVX2(x, y *float32, n int) {
	if tailsFit(x, nil, y, n) {
		relu32AVX2asm(x, y, n)
		return
	}
	(&elemKernel{op: opRelu}).onCopies(x, nil, y, n)
}

func add32AVX2(a, b, y *float32, n int) {
	if tailsFit(a, b, y, n) {
		add32AVX2asm(a, b, y, n)
		return
	}
	(&elemKernel{op: opAdd}).onCopies(a, b, y, n)
}

func maskPos32AVX2(y, dy, dx *float32, n int) {
	if tailsFit(y, dy, dx, n) {
		maskPos32AVX2asm(y, dy, dx, n)
		return
	}
	(&elemKernel{op: opMaskPos}).onCopies(y, dy, dx, n)
}

func lincomb32AVX2(d, x, out *float32, n int, a, b, k float32) {
	if tailsFit(d, x, out, n) {
		lincomb32AVX2asm(d, x, out, n, a, b, k)
		return
	}
	(&elemKernel{op: opLincomb, a: a, b: b, k: k}).onCopies(d, x, out, n)
}

func bnAddRelu32AVX2(x1, x2, y *float32, n int, a, b, k float32) {
	if tailsFit(x1, x2, y, n) {
		bnAddRelu32AVX2asm(x1, x2, y, n, a, b, k)
		return
	}
	(&elemKernel{op: opBnAddRelu, a: a, b: b, k: k}).onCopies(x1, x2, y, n)
}

// stackElems is the most elements a sum copies onto the stack.
const stackElems = 1024

// sumScratch holds copies of a sum's operands above stackElems.
type sumScratch struct{ d, x []float32 }

var sumFree freeList[sumScratch]

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
	t := sumFree.get()
	s, sq = shiftedSums32AVX2asm(padded(&t.x, x, n), n, k)
	sumFree.put(t)
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
	t := sumFree.get()
	s, sx = dotSums32AVX2asm(padded(&t.d, d, n), padded(&t.x, x, n), n)
	sumFree.put(t)
	return s, sx
}
