package optim

import "math"

// The update kernels. Each rounding torch performs is written as an explicit
// conversion: the Go spec lets the compiler fuse x*y+z into one FMA unless
// the product is converted explicitly, and fusing would change results
// between architectures. Slices are re-sliced to len(p) first so the compiler
// drops the bounds checks in the loops.
//
// On amd64 with AVX2 the kernels run 8 (float32) or 4 (float64) lanes at a
// time in assembly
// (kernels_amd64.s) with the same IEEE operations in the same order, and no
// FMA, so the results are bit for bit those of the Go loops (tested); the
// Go loops do the tail and serve every other platform and the purego tag.

// sgdPlain64 is SGD without momentum.
func sgdPlain64(p, g []float64, k sgdK64) {
	g = g[:len(p)]
	if n := len(p) &^ 3; n > 0 && useSIMD {
		sgd64x4(p[:n], g[:n], nil, k)
		p, g = p[n:], g[n:]
	}
	sgdPlain64Go(p, g, k)
}

// sgdMomentum64 is SGD with a momentum buffer.
func sgdMomentum64(p, g, buf []float64, k sgdK64) {
	g = g[:len(p)]
	buf = buf[:len(p)]
	if n := len(p) &^ 3; n > 0 && useSIMD {
		sgd64x4(p[:n], g[:n], buf[:n], k)
		p, g, buf = p[n:], g[n:], buf[n:]
	}
	sgdMomentum64Go(p, g, buf, k)
}

// adam64 is Adam and AdamW on float64.
func adam64(p, g, m, v []float64, k *adamK64) {
	g = g[:len(p)]
	m = m[:len(p)]
	v = v[:len(p)]
	if n := len(p) &^ 3; n > 0 && useSIMD {
		adam64x4(p[:n], g[:n], m[:n], v[:n], k)
		p, g, m, v = p[n:], g[n:], m[n:], v[n:]
	}
	adam64Go(p, g, m, v, k)
}

// sgdPlain32 is SGD without momentum.
func sgdPlain32(p, g []float32, k sgdK32) {
	g = g[:len(p)]
	if n := len(p) &^ 7; n > 0 && useSIMD {
		sgd32x8(p[:n], g[:n], nil, k)
		p, g = p[n:], g[n:]
	}
	sgdPlain32Go(p, g, k)
}

// sgdMomentum32 is SGD with a momentum buffer.
func sgdMomentum32(p, g, buf []float32, k sgdK32) {
	g = g[:len(p)]
	buf = buf[:len(p)]
	if n := len(p) &^ 7; n > 0 && useSIMD {
		sgd32x8(p[:n], g[:n], buf[:n], k)
		p, g, buf = p[n:], g[n:], buf[n:]
	}
	sgdMomentum32Go(p, g, buf, k)
}

// adam32 is Adam and AdamW on float32.
func adam32(p, g, m, v []float32, k *adamK32) {
	g = g[:len(p)]
	m = m[:len(p)]
	v = v[:len(p)]
	if n := len(p) &^ 7; n > 0 && useSIMD {
		adam32x8(p[:n], g[:n], m[:n], v[:n], k)
		p, g, m, v = p[n:], g[n:], m[n:], v[n:]
	}
	adam32Go(p, g, m, v, k)
}

func sgdPlain32Go(p, g []float32, k sgdK32) {
	g = g[:len(p)]
	for i := range p {
		d := g[i]
		if k.wd != 0 {
			d = d + float32(k.wd*p[i])
		}
		p[i] = p[i] + float32(k.negLR*d)
	}
}

func sgdPlain64Go(p, g []float64, k sgdK64) {
	g = g[:len(p)]
	for i := range p {
		d := g[i]
		if k.wd != 0 {
			d = d + float64(k.wd*p[i])
		}
		p[i] = p[i] + float64(k.negLR*d)
	}
}

func sgdMomentum32Go(p, g, buf []float32, k sgdK32) {
	g = g[:len(p)]
	buf = buf[:len(p)]
	for i := range p {
		d := g[i]
		if k.wd != 0 {
			d = d + float32(k.wd*p[i])
		}
		b := d
		if !k.first {
			b = float32(buf[i]*k.mom) + float32(k.omd*d)
		}
		buf[i] = b
		if k.nesterov {
			d = d + float32(k.mom*b)
		} else {
			d = b
		}
		p[i] = p[i] + float32(k.negLR*d)
	}
}

func sgdMomentum64Go(p, g, buf []float64, k sgdK64) {
	g = g[:len(p)]
	buf = buf[:len(p)]
	for i := range p {
		d := g[i]
		if k.wd != 0 {
			d = d + float64(k.wd*p[i])
		}
		b := d
		if !k.first {
			b = float64(buf[i]*k.mom) + float64(k.omd*d)
		}
		buf[i] = b
		if k.nesterov {
			d = d + float64(k.mom*b)
		} else {
			d = b
		}
		p[i] = p[i] + float64(k.negLR*d)
	}
}

// adam32Go is torch's _single_tensor_adam / _single_tensor_adamw on float32
// tensors, per element:
//
//	param.mul_(decay)                                 (AdamW; decay is 1 for Adam)
//	grad = grad.add(param, alpha=wd)                  (Adam; skipped when wd is 0)
//	exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
//	exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
//	denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
//	param.addcdiv_(exp_avg, denom, value=-step_size)  (self + value*t1/t2)
func adam32Go(p, g, m, v []float32, kp *adamK32) {
	k := *kp
	g = g[:len(p)]
	m = m[:len(p)]
	v = v[:len(p)]
	if k.wd != 0 {
		for i := range p {
			pi := float32(p[i] * k.decay)
			gi := g[i] + float32(k.wd*pi)
			mi := float32(m[i]*k.b1) + float32(gi*k.omb1)
			vi := float32(v[i]*k.b2) + float32(float32(k.omb2*gi)*gi)
			m[i], v[i] = mi, vi
			d := float32(float32(math.Sqrt(float64(vi)))/k.bc2s) + k.eps
			p[i] = pi + float32(k.negStep*mi)/d
		}
		return
	}
	for i := range p {
		pi := float32(p[i] * k.decay)
		gi := g[i]
		mi := float32(m[i]*k.b1) + float32(gi*k.omb1)
		vi := float32(v[i]*k.b2) + float32(float32(k.omb2*gi)*gi)
		m[i], v[i] = mi, vi
		d := float32(float32(math.Sqrt(float64(vi)))/k.bc2s) + k.eps
		p[i] = pi + float32(k.negStep*mi)/d
	}
}

// adam64Go is adam32Go on float64.
func adam64Go(p, g, m, v []float64, kp *adamK64) {
	k := *kp
	g = g[:len(p)]
	m = m[:len(p)]
	v = v[:len(p)]
	if k.wd != 0 {
		for i := range p {
			pi := float64(p[i] * k.decay)
			gi := g[i] + float64(k.wd*pi)
			mi := float64(m[i]*k.b1) + float64(gi*k.omb1)
			vi := float64(v[i]*k.b2) + float64(float64(k.omb2*gi)*gi)
			m[i], v[i] = mi, vi
			d := float64(math.Sqrt(vi)/k.bc2s) + k.eps
			p[i] = pi + float64(k.negStep*mi)/d
		}
		return
	}
	for i := range p {
		pi := float64(p[i] * k.decay)
		gi := g[i]
		mi := float64(m[i]*k.b1) + float64(gi*k.omb1)
		vi := float64(v[i]*k.b2) + float64(float64(k.omb2*gi)*gi)
		m[i], v[i] = mi, vi
		d := float64(math.Sqrt(vi)/k.bc2s) + k.eps
		p[i] = pi + float64(k.negStep*mi)/d
	}
}
