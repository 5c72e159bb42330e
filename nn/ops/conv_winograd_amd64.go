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
