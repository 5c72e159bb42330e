//go:build amd64 && !purego

package ops

import "unsafe"

//go:noescape
func wgInput16(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)

//go:noescape
func wgOutput16(m *float32, ld int, tmp *float32, y *float32, yoff *int32, w int, mask *int32)

//go:noescape
func wgGrad16(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)

// wgInput16Gather and wgGrad16Gather are wgInput16 and wgGrad16 with the
// tiles' rows gathered, kept as the references their tests compare with.

//go:noescape
func wgInput16Gather(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)

//go:noescape
func wgGrad16Gather(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)

// wgKernel16, wgKernelGrad16 and wgKernelGrad8 are winogradKernel's and
// winogradKernelGrad's channel pairs, 16, 16 and 8 at a time
// (conv_winograd_kernel_amd64.s).

//go:noescape
func wgKernel16(w *float32, idx *int32, u *float32, us int, cst *float32, flip bool)

//go:noescape
func wgKernelGrad8(du *float32, occ int, dw *float32, cst *float64)

//go:noescape
func wgKernelGrad16(du *float32, occ int, dw *float32, cst *float64, tmp *float32)

// wgKernel8AVX2 is wgKernel16 on AVX2 for the 8 output channels of one
// input channel, from their taps laid out tap-major (k[8j + l]), the same
// bits: tmp 144 floats.
//
//go:noescape
func wgKernel8AVX2(k *float32, u *float32, us int, cst *float32, tmp *float32)

// wgKernelGrad16AVX2 is wgKernelGrad16 on AVX2, four pairs a register
// (conv_winograd_kernel_avx2_amd64.s), the same bits: tmp 720 floats.
//
//go:noescape
func wgKernelGrad16AVX2(du *float32, occ int, dw *float32, cst *float64, tmp *float32)

// wgInput8AVX2, wgGrad8AVX2 and wgOutput8AVX2 are wgInput16, wgGrad16 and
// wgOutput16 for 8 tiles on AVX2 and FMA (conv_winograd_avx2_amd64.s), the
// same bits: tmp 288 floats.

//go:noescape
func wgInput8AVX2(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)

//go:noescape
func wgGrad8AVX2(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32)

//go:noescape
func wgOutput8AVX2(m *float32, ld int, tmp *float32, y *float32, yoff *int32, w int, mask *int32)

// wgInputTiles, wgGradTiles and wgOutputTiles are the transforms of 16
// tiles on the kernels in use: wgInput16, wgGrad16 and wgOutput16 with
// AVX-512, else the AVX2 kernels twice, tiles 0-7 then 8-15 (their
// offsets, values and masks 8 lanes on).
func wgInputTiles(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32) {
	if useAVX512 {
		wgInput16(p, off, wp, v, ld, tmp)
		return
	}
	wgInput8AVX2(p, off, wp, v, ld, tmp)
	wgInput8AVX2(p, (*int32)(unsafe.Add(unsafe.Pointer(off), 32)), wp, (*float32)(unsafe.Add(unsafe.Pointer(v), 32)), ld, tmp)
}

func wgGradTiles(p *float32, off *int32, wp int, v *float32, ld int, tmp *float32) {
	if useAVX512 {
		wgGrad16(p, off, wp, v, ld, tmp)
		return
	}
	wgGrad8AVX2(p, off, wp, v, ld, tmp)
	wgGrad8AVX2(p, (*int32)(unsafe.Add(unsafe.Pointer(off), 32)), wp, (*float32)(unsafe.Add(unsafe.Pointer(v), 32)), ld, tmp)
}

func wgOutputTiles(m *float32, ld int, tmp *float32, y *float32, yoff *int32, w int, mask *int32) {
	if useAVX512 {
		wgOutput16(m, ld, tmp, y, yoff, w, mask)
		return
	}
	wgOutput8AVX2(m, ld, tmp, y, yoff, w, mask)
	wgOutput8AVX2((*float32)(unsafe.Add(unsafe.Pointer(m), 32)), ld, tmp, y,
		(*int32)(unsafe.Add(unsafe.Pointer(yoff), 32)), w, (*int32)(unsafe.Add(unsafe.Pointer(mask), 32)))
}
