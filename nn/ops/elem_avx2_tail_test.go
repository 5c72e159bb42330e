//go:build amd64 && !purego && linux

package ops

import (
	"math"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pageEnd returns n float32s that end where a mapped page ends, the next
// page mapped with no access: a vector read or written past the end faults.
func pageEnd(t *testing.T, n int) []float32 {
	t.Helper()
	size := (n*4/tailPage + 2) * tailPage
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	if err := unix.Mprotect(mem[size-tailPage:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	end := size - tailPage
	return unsafe.Slice((*float32)(unsafe.Pointer(&mem[end-n*4])), n)
}

// Every AVX2 elementwise kernel over operands that end at a page followed by
// an inaccessible one gives the bits it gives on heap copies, without
// touching that page (an emulated CPU faults on a masked-off lane there, as
// CI's qemu step did at resnet8's 7x7 planes).
func TestAVX2TailAtAPageEnd(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this CPU: the kernels are not used")
	}
	for _, n := range []int{1, 7, 9, 49, 1023} {
		in := func(seed int) []float32 {
			p := pageEnd(t, n)
			for i := range p {
				p[i] = float32(math.Sin(float64(i*7+seed))) * 3
			}
			return p
		}
		a, b, c := in(1), in(2), in(3)
		heap := func(p []float32) []float32 { return append([]float32(nil), p...) }
		ha, hb, hc := heap(a), heap(b), heap(c)
		same := func(name string, got, want []float32) {
			t.Helper()
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d %s: element %d is %v at a page end, %v on the heap", n, name, i, got[i], want[i])
				}
			}
		}
		out, hout := pageEnd(t, n), make([]float32, n)
		affine32AVX2(&a[0], &out[0], n, 1.5, -0.25, 1)
		affine32AVX2(&ha[0], &hout[0], n, 1.5, -0.25, 1)
		same("affine", out, hout)
		addRelu32AVX2(&a[0], &b[0], &out[0], n)
		addRelu32AVX2(&ha[0], &hb[0], &hout[0], n)
		same("addRelu", out, hout)
		relu32AVX2(&a[0], &out[0], n)
		relu32AVX2(&ha[0], &hout[0], n)
		same("relu", out, hout)
		add32AVX2(&a[0], &b[0], &out[0], n)
		add32AVX2(&ha[0], &hb[0], &hout[0], n)
		same("add", out, hout)
		maskPos32AVX2(&a[0], &b[0], &out[0], n)
		maskPos32AVX2(&ha[0], &hb[0], &hout[0], n)
		same("maskPos", out, hout)
		lincomb32AVX2(&a[0], &b[0], &out[0], n, 0.5, 2, -1)
		lincomb32AVX2(&ha[0], &hb[0], &hout[0], n, 0.5, 2, -1)
		same("lincomb", out, hout)
		bnAddRelu32AVX2(&a[0], &b[0], &out[0], n, 0.5, 2, -1)
		bnAddRelu32AVX2(&ha[0], &hb[0], &hout[0], n, 0.5, 2, -1)
		same("bnAddRelu", out, hout)
		// In place, the output one of the inputs.
		copy(c, hc)
		lincomb32AVX2(&c[0], &b[0], &c[0], n, 1, 0.5, 0)
		lincomb32AVX2(&hc[0], &hb[0], &hc[0], n, 1, 0.5, 0)
		same("lincomb in place", c, hc)
		s1, q1 := shiftedSums32AVX2(&a[0], n, 0.5)
		s2, q2 := shiftedSums32AVX2(&ha[0], n, 0.5)
		same("shiftedSums", []float32{s1, q1}, []float32{s2, q2})
		s1, q1 = dotSums32AVX2(&a[0], &b[0], n)
		s2, q2 = dotSums32AVX2(&ha[0], &hb[0], n)
		same("dotSums", []float32{s1, q1}, []float32{s2, q2})
		if tailCrosses(&a[0], n) != (n&7 != 0) {
			t.Errorf("n=%d: tailCrosses at a page end = %v", n, tailCrosses(&a[0], n))
		}
	}
}

// The sums above stackElems and the multiply's copied column block keep
// their copies in free lists that a garbage collection leaves alone: a
// call at a page end right after a GC allocates nothing (with a sync.Pool,
// which a GC empties, it allocated the scratch and its copies again).
func TestAVX2PageEndScratchSurvivesGC(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this CPU: the kernels are not used")
	}
	if raceBuild {
		t.Skip("the race detector allocates on its own")
	}
	n := stackElems + 1
	x, d := pageEnd(t, n), pageEnd(t, n)
	for i := range x {
		x[i], d[i] = float32(i%7)-3, float32(i%5)-2
	}
	// m x cols block of C over k rows of B whose last column block ends at a
	// page: a 17-column NN multiply, B at the page end.
	const m, k, cols = 8, 3, 17
	a, b, c := make([]float32, m*k), pageEnd(t, k*cols), make([]float32, m*cols)
	for i := range a {
		a[i] = float32(i%3) - 1
	}
	for i := range b {
		b[i] = float32(i%4) - 1.5
	}
	var sc mmScratch
	calls := []struct {
		name string
		f    func()
	}{
		{"shiftedSums", func() { shiftedSums32AVX2(&x[0], n, 0.5) }},
		{"dotSums", func() { dotSums32AVX2(&d[0], &x[0], n) }},
		{"multiply", func() { mm(&sc, false, false, m, cols, k, 1, a, k, b, cols, 0, c, cols) }},
	}
	for _, c := range calls {
		c.f() // warm
		// Mallocs counts the whole process: a goroutine of another test
		// or of the runtime may allocate during a try, so the fewest of a
		// few tries is the call's own count (a call that allocates after
		// a GC does so in every try).
		fewest := uint64(math.MaxUint64)
		for range 5 {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			c.f()
			runtime.ReadMemStats(&after)
			fewest = min(fewest, after.Mallocs-before.Mallocs)
		}
		if fewest != 0 {
			t.Errorf("%s at a page end after a GC: %d allocations", c.name, fewest)
		}
	}
}
