package optim

import "math"

// The update kernels, one generic implementation for float32 and float64.
// Each rounding torch performs is written as an explicit conversion to T:
// the Go spec lets the compiler fuse x*y+z into one FMA unless the product is
// converted explicitly, and fusing would change results between
// architectures. A conversion to a type parameter rounds like one to the
// concrete type, and costs nothing: each instantiation is compiled for its
// own GC shape (float32 and float64 never share one), so there is no
// dictionary call and no boxing in these loops. Compiled with -gcflags=-S,
// every instantiation here and in clip.go runs the same floating-point
// arithmetic instructions in the same order as the float32 or float64 twin
// it replaced, on amd64 and on arm64 (no FMA on either), but for
// SumSquares[float32], whose float32-to-float64 conversions now sit between
// the multiplies (same operations on each value, same speed);
// bench/RESULTS.md has the check and the benchmarks.
// Slices are re-sliced to len(p) first so the compiler drops the bounds
// checks.
//
// On amd64 with AVX2 the kernels run 8 (float32) or 4 (float64) lanes at a
// time in assembly (simd_amd64.s) with the same IEEE operations in the same
// order, and no FMA, so the results are bit for bit those of the Go loops
// (tested); the Go loops do the tail and serve every other platform and the
// purego tag. The assembly stays one routine per type: Go assembly has no
// type parameters, and float32 and float64 differ in lane count and
// instructions (VMULPS against VMULPD).

// float is the element type of the kernels: exactly float32 or float64, so
// that the SIMD dispatch can tell them apart with a type switch.
type float interface{ float32 | float64 }

// sgdK holds SGD's per-step constants in the precision of the parameters.
// Its layout is read by the assembly (simd_amd64.s).
type sgdK[T float] struct {
	wd, mom, omd, negLR T
	first, nesterov     bool
}

// adamK holds Adam's per-step constants in the precision of the parameters.
// Its layout is read by the assembly (simd_amd64.s).
type adamK[T float] struct{ wd, decay, b1, omb1, b2, omb2, bc2s, eps, negStep T }

// The names the assembly's comments use.
type (
	sgdK32  = sgdK[float32]
	sgdK64  = sgdK[float64]
	adamK32 = adamK[float32]
	adamK64 = adamK[float64]
)

// roundSGDK rounds constants computed in float64 (as torch computes them in
// Python floats) to T.
func roundSGDK[T float](k sgdK64) sgdK[T] {
	return sgdK[T]{wd: T(k.wd), mom: T(k.mom), omd: T(k.omd), negLR: T(k.negLR), first: k.first, nesterov: k.nesterov}
}

// roundAdamK rounds constants computed in float64 to T.
func roundAdamK[T float](k adamK64) adamK[T] {
	return adamK[T]{
		wd: T(k.wd), decay: T(k.decay), b1: T(k.b1), omb1: T(k.omb1),
		b2: T(k.b2), omb2: T(k.omb2), bc2s: T(k.bc2s), eps: T(k.eps), negStep: T(k.negStep),
	}
}

// simdSplit is the length of the prefix of an n-element span that the SIMD
// kernels take: a multiple of their lane count, or 0 without SIMD.
func simdSplit[T float](n int) int {
	if !useSIMD {
		return 0
	}
	var z T
	if _, ok := any(z).(float32); ok {
		return n &^ 7
	}
	return n &^ 3
}

// sgdPlain is SGD without momentum.
func sgdPlain[T float](p, g []T, k *sgdK[T]) {
	g = g[:len(p)]
	if n := simdSplit[T](len(p)); n > 0 {
		sgdSIMD(p[:n], g[:n], nil, k)
		p, g = p[n:], g[n:]
	}
	sgdPlainGo(p, g, k)
}

// sgdMomentum is SGD with a momentum buffer.
func sgdMomentum[T float](p, g, buf []T, k *sgdK[T]) {
	g = g[:len(p)]
	buf = buf[:len(p)]
	if n := simdSplit[T](len(p)); n > 0 {
		sgdSIMD(p[:n], g[:n], buf[:n], k)
		p, g, buf = p[n:], g[n:], buf[n:]
	}
	sgdMomentumGo(p, g, buf, k)
}

// adam is Adam and AdamW.
func adam[T float](p, g, m, v []T, k *adamK[T]) {
	g = g[:len(p)]
	m = m[:len(p)]
	v = v[:len(p)]
	if n := simdSplit[T](len(p)); n > 0 {
		adamSIMD(p[:n], g[:n], m[:n], v[:n], k)
		p, g, m, v = p[n:], g[n:], m[n:], v[n:]
	}
	adamGo(p, g, m, v, k)
}

func sgdPlainGo[T float](p, g []T, kp *sgdK[T]) {
	k := *kp
	g = g[:len(p)]
	for i := range p {
		d := g[i]
		if k.wd != 0 {
			d = d + T(k.wd*p[i])
		}
		p[i] = p[i] + T(k.negLR*d)
	}
}

func sgdMomentumGo[T float](p, g, buf []T, kp *sgdK[T]) {
	k := *kp
	g = g[:len(p)]
	buf = buf[:len(p)]
	for i := range p {
		d := g[i]
		if k.wd != 0 {
			d = d + T(k.wd*p[i])
		}
		b := d
		if !k.first {
			b = T(buf[i]*k.mom) + T(k.omd*d)
		}
		buf[i] = b
		if k.nesterov {
			d = d + T(k.mom*b)
		} else {
			d = b
		}
		p[i] = p[i] + T(k.negLR*d)
	}
}

// adamGo is torch's _single_tensor_adam / _single_tensor_adamw, per element:
//
//	param.mul_(decay)                                 (AdamW; decay is 1 for Adam)
//	grad = grad.add(param, alpha=wd)                  (Adam; skipped when wd is 0)
//	exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
//	exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
//	denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
//	param.addcdiv_(exp_avg, denom, value=-step_size)  (self + value*t1/t2)
//
// The square root is taken in float64 and rounded to T, which for float32 is
// the correctly rounded float32 root (the compiler emits SQRTSS for it).
func adamGo[T float](p, g, m, v []T, kp *adamK[T]) {
	k := *kp
	g = g[:len(p)]
	m = m[:len(p)]
	v = v[:len(p)]
	if k.wd != 0 {
		for i := range p {
			pi := T(p[i] * k.decay)
			gi := g[i] + T(k.wd*pi)
			mi := T(m[i]*k.b1) + T(gi*k.omb1)
			vi := T(v[i]*k.b2) + T(T(k.omb2*gi)*gi)
			m[i], v[i] = mi, vi
			d := T(T(math.Sqrt(float64(vi)))/k.bc2s) + k.eps
			p[i] = pi + T(k.negStep*mi)/d
		}
		return
	}
	for i := range p {
		pi := T(p[i] * k.decay)
		gi := g[i]
		mi := T(m[i]*k.b1) + T(gi*k.omb1)
		vi := T(v[i]*k.b2) + T(T(k.omb2*gi)*gi)
		m[i], v[i] = mi, vi
		d := T(T(math.Sqrt(float64(vi)))/k.bc2s) + k.eps
		p[i] = pi + T(k.negStep*mi)/d
	}
}

// amsgradGo is adamGo with torch's amsgrad: after exp_avg_sq's update,
//
//	torch.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
//	denom = (max_exp_avg_sqs[i].sqrt() / bc2_sqrt).add_(eps)
//
// (torch.maximum propagates NaN, as Go's max does). It has no SIMD twin:
// amsgrad is rare enough that the Go loop serves it everywhere.
func amsgradGo[T float](p, g, m, v, vmax []T, kp *adamK[T]) {
	k := *kp
	g = g[:len(p)]
	m = m[:len(p)]
	v = v[:len(p)]
	vmax = vmax[:len(p)]
	for i := range p {
		pi := T(p[i] * k.decay)
		gi := g[i]
		if k.wd != 0 {
			gi = gi + T(k.wd*pi)
		}
		mi := T(m[i]*k.b1) + T(gi*k.omb1)
		vi := T(v[i]*k.b2) + T(T(k.omb2*gi)*gi)
		mx := max(vmax[i], vi)
		m[i], v[i], vmax[i] = mi, vi, mx
		d := T(T(math.Sqrt(float64(mx)))/k.bc2s) + k.eps
		p[i] = pi + T(k.negStep*mi)/d
	}
}
