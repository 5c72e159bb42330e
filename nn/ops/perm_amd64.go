//go:build amd64 && !purego

package ops

//go:noescape
func permRows32(dst *float32, ldd int, a, b *float32, lds, rows int, p *permPlan)
