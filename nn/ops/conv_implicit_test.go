package ops

import (
	"math"
	"testing"

	"gorgonia.org/tensor"
)

// A same() convolution's padded chunk (padChunk) holds each image in its
// slot and zeros everywhere else, also in the slots a short last chunk
// leaves empty and in the tail, whatever the buffer held before.
func TestPadChunkSameSlots(t *testing.T) {
	old := convColumns
	defer func() { convColumns = old }()
	convColumns = 40
	for _, c := range []convCase{
		{n: 5, c: 2, h: 4, w: 5, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Padding: [2]int{1, 1}}},
		{n: 7, c: 3, h: 3, w: 4, oc: 8, kh: 3, kw: 5, o: Conv2dOpts{Padding: [2]int{1, 2}}},
		{n: 5, c: 1, h: 4, w: 3, oc: 8, kh: 5, kw: 5, o: Conv2dOpts{Padding: [2]int{4, 4}, Dilation: [2]int{2, 2}}},
	} {
		paddedChunks(t, c, func(g *convGeom, x, xp []float32, n0, m int) {
			if !g.same() {
				t.Fatalf("%v is not same()", c)
			}
			_, _, wq, ps := g.phases()
			slot := g.slot()
			for ch := 0; ch < g.c; ch++ {
				for at, v := range xp[ch*ps : (ch+1)*ps] {
					want := float32(0)
					r, col := at/wq-g.ph, at%wq
					i, xx := col/slot, col%slot-g.pw
					if r >= 0 && r < g.h && i < m && xx >= 0 {
						want = x[(n0+i)*g.in()+(ch*g.h+r)*g.w+xx]
					}
					if math.Float32bits(v) != math.Float32bits(want) {
						t.Fatalf("%v chunk at %d channel %d: padded[%d] (row %d, column %d) = %v, want %v", c, n0, ch, at, r+g.ph, col, v, want)
					}
				}
			}
		})
	}
}

// paddedChunks pads c's input (x[i] = i+1) chunk by chunk with padChunk,
// into buffers of NaN, and hands each to check; c must leave a short last
// chunk.
func paddedChunks(t *testing.T, c convCase, check func(g *convGeom, x, xp []float32, n0, m int)) {
	t.Helper()
	_, gi, _, _, _ := convOps(t, c, tensor.Float32)
	g := &gi.g
	nb := g.chunk()
	if c.n%nb == 0 {
		t.Fatalf("%v: %d images a chunk leave no short chunk", c, nb)
	}
	x := make([]float32, c.n*g.in())
	for i := range x {
		x[i] = float32(i + 1)
	}
	for n0 := 0; n0 < c.n; n0 += nb {
		m := min(nb, c.n-n0)
		xp := make([]float32, g.padSize())
		for i := range xp {
			xp[i] = float32(math.NaN())
		}
		padChunk(g, x, xp, n0, m)
		check(g, x, xp, n0, m)
	}
}

// A strided convolution's padded chunk holds each image pixel on its phase
// plane (row Y·SH + py, column X·SW + px of the padded image at row Y,
// column X of the plane's slot) and zeros everywhere else: the padding,
// the rows no pixel lands on, the slots a short last chunk leaves empty and
// the tail, whatever the buffer held before; with the permutations
// (padPermuted) and with the loops.
func TestPadChunkStridedSlots(t *testing.T) {
	old, oldAVX := convColumns, useAVX512
	defer func() { convColumns, useAVX512 = old, oldAVX }()
	convColumns = 40
	for _, avx := range []bool{oldAVX, false} {
		useAVX512 = avx
		for _, c := range []convCase{
			{n: 5, c: 2, h: 7, w: 8, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
			{n: 3, c: 2, h: 3, w: 18, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
			{n: 7, c: 1, h: 6, w: 9, oc: 8, kh: 3, kw: 3, o: Conv2dOpts{Stride: [2]int{3, 2}, Padding: [2]int{2, 0}}},
		} {
			paddedChunks(t, c, func(g *convGeom, x, xp []float32, n0, m int) {
				_, pq, wq, ps := g.phases()
				slot := g.slot()
				for ch := 0; ch < g.c; ch++ {
					for ph := 0; ph < g.sh*g.sw; ph++ {
						py, px := ph/g.sw, ph%g.sw
						for at, v := range xp[(ch*g.sh*g.sw+ph)*ps : (ch*g.sh*g.sw+ph+1)*ps] {
							want := float32(0)
							i, col := at%wq/slot, at%wq%slot
							y, xx := at/wq*g.sh+py-g.ph, col*g.sw+px-g.pw
							if at < pq && i < m && y >= 0 && y < g.h && xx >= 0 && xx < g.w {
								want = x[(n0+i)*g.in()+(ch*g.h+y)*g.w+xx]
							}
							if math.Float32bits(v) != math.Float32bits(want) {
								t.Fatalf("avx=%v %v chunk at %d channel %d phase %d: padded[%d] = %v, want %v", avx, c, n0, ch, ph, at, v, want)
							}
						}
					}
				}
			})
		}
	}
}

// The implicit forward's planes at width stride 2 (padRows2): even and odd
// widths, paddings 0 to 2; and at stride 1 with padding only across (no
// zero row below the images: the last slot's row gap lands in the tail);
// against the direct loop.
func TestConv2dForwardPhasePlanes(t *testing.T) {
	var cases []convCase
	for _, pw := range []int{0, 1, 2} {
		for _, w := range []int{8, 9} {
			cases = append(cases, convCase{n: 3, c: 2, h: 7, w: w, oc: 8, kh: 3, kw: 3,
				o: Conv2dOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, pw}}})
			cases = append(cases, convCase{n: 2, c: 2, h: 9, w: w, oc: 8, kh: 3, kw: 3,
				o: Conv2dOpts{Stride: [2]int{3, 2}, Padding: [2]int{2, pw}, Dilation: [2]int{1, 2}}})
		}
	}
	cases = append(cases,
		convCase{n: 3, c: 2, h: 5, w: 4, oc: 8, kh: 3, kw: 1, o: Conv2dOpts{Padding: [2]int{0, 1}}},
		convCase{n: 3, c: 2, h: 5, w: 4, oc: 8, kh: 3, kw: 2, o: Conv2dOpts{Padding: [2]int{0, 2}}})
	withColumns(t, func(t *testing.T) {
		for _, c := range cases {
			ins := c.inputs(tensor.Float32)
			got := run(t, c.build, ins...)
			assertClose(t, c.String(), got, convRef(c, vals(ins[0]), vals(ins[1]), nil), 10*tol(tensor.Float32))
		}
	})
}

// Off the Winograd path a batch is cut into balanced chunks: the implicit
// and phase paths multiply a whole chunk's grid however few images the last
// chunk holds, so the slots the chunks leave empty must be fewer than the
// chunks (32 images of resnet8's 14x14 -> 7x7 convolution: 4 chunks of 8,
// not 3 of 10 and one of 2, whose multiply computed 10), with no more
// images a chunk than the column target allows and no more chunks than it
// asks (one more to make them even).
func TestConvChunksBalanced(t *testing.T) {
	geoms := []struct {
		what string
		g    convGeom
	}{
		{"3x3 s2 32->64 14x14", convGeom{c: 32, h: 14, w: 14, oc: 64, kh: 3, kw: 3, sh: 2, sw: 2, ph: 1, pw: 1, dh: 1, dw: 1, oh: 7, ow: 7}},
		{"1x1 s2 32->64 14x14", convGeom{c: 32, h: 14, w: 14, oc: 64, kh: 1, kw: 1, sh: 2, sw: 2, dh: 1, dw: 1, oh: 7, ow: 7}},
		{"3x3 s2 16->32 28x28", convGeom{c: 16, h: 28, w: 28, oc: 32, kh: 3, kw: 3, sh: 2, sw: 2, ph: 1, pw: 1, dh: 1, dw: 1, oh: 14, ow: 14}},
		{"3x3 8->8 9x9", convGeom{c: 8, h: 9, w: 9, oc: 8, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, oh: 9, ow: 9}},
	}
	for _, gc := range geoms {
		for n := 1; n <= 130; n++ {
			g := gc.g
			g.n = n
			if winogradFits[float32](&g) {
				t.Fatalf("%s: on the Winograd path", gc.what)
			}
			nb, c := g.chunk(), g.chunks()
			most := max(1, min(convColumns/g.ohw(), n))
			want := (n + most - 1) / most
			if want > 1 && want%2 == 1 {
				want++
			}
			if c > want || nb > most || c*nb-n >= c {
				t.Fatalf("%s, %d images: %d chunks of %d (%d slots empty), want at most %d chunks of at most %d with fewer empty slots than chunks", gc.what, n, c, nb, c*nb-n, want, most)
			}
		}
	}
	g := geoms[0].g
	g.n = 32
	if nb := g.chunk(); nb != 8 {
		t.Errorf("%s, 32 images: %d a chunk, want 8", geoms[0].what, nb)
	}
}
