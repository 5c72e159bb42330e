//go:build amd64 && !purego

package ops

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
