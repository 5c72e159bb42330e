//go:build amd64 && !purego

package ops

//go:noescape
func tapsFMA32(y *float32, n int, x *float32, offs *int, w *float32, taps int, add int, bias float32)

//go:noescape
func tapsDot4x32(d *float32, n int, x *float32, offs *int, out *float32)
