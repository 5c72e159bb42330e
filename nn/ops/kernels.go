package ops

import (
	"math"
	"unsafe"
)

// Elementwise and reduction kernels shared by the ops. The hot loops avoid
// data-dependent branches (a ReLU mask is half ones, half zeros at random:
// a branch there mispredicts every other element and runs several times
// slower) and long floating-point dependency chains (sums use four
// accumulators).

// maskPos writes dx[i] = dy[i] where y[i] > 0 and 0 elsewhere, without a
// branch. y is a ReLU output: +0, positive or NaN (which passes dy through).
func maskPos[T float](y, dy, dx []T) {
	var z T
	if unsafe.Sizeof(z) == 4 {
		if (useAVX512 || useAVX2) && len(y) > 0 {
			dy, dx = dy[:len(y)], dx[:len(y)]
			if useAVX512 {
				maskPos32AVX(f32p(y), f32p(dy), f32p(dx), len(y))
			} else {
				maskPos32AVX2(f32p(y), f32p(dy), f32p(dx), len(y))
			}
			return
		}
		maskPos32(f32s(y), f32s(dy), f32s(dx))
		return
	}
	maskPos64(f64s(y), f64s(dy), f64s(dx))
}

func maskPos32(y, dy, dx []float32) {
	dy, dx = dy[:len(y)], dx[:len(y)]
	for i, v := range y {
		b := math.Float32bits(v)
		// All ones when b is a positive non-zero pattern, else zero.
		m := uint32(int32(-b)>>31) &^ uint32(int32(b)>>31)
		dx[i] = math.Float32frombits(math.Float32bits(dy[i]) & m)
	}
}

func maskPos64(y, dy, dx []float64) {
	dy, dx = dy[:len(y)], dx[:len(y)]
	for i, v := range y {
		b := math.Float64bits(v)
		m := uint64(int64(-b)>>63) &^ uint64(int64(b)>>63)
		dx[i] = math.Float64frombits(math.Float64bits(dy[i]) & m)
	}
}

// sum is Σx in float64.
func sum[T float](x []T) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i])
		s1 += float64(x[i+1])
		s2 += float64(x[i+2])
		s3 += float64(x[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// shiftedSums is Σ(x-k) and Σ(x-k)². It accumulates in T over four lanes
// (one plane of an image is at most a few thousand elements; the shift keeps
// the terms small) and returns float64 for the caller to sum planes in.
func shiftedSums[T float](x []T, k T) (s, sq float64) {
	if is32[T]() && (useAVX512 || useAVX2) && len(x) > 0 {
		var s32, sq32 float32
		if useAVX512 {
			s32, sq32 = shiftedSums32(f32p(x), len(x), float32(k))
		} else {
			s32, sq32 = shiftedSums32AVX2(f32p(x), len(x), float32(k))
		}
		return float64(s32), float64(sq32)
	}
	var s0, s1, s2, s3, q0, q1, q2, q3 T
	i := 0
	for ; i+4 <= len(x); i += 4 {
		d0, d1, d2, d3 := x[i]-k, x[i+1]-k, x[i+2]-k, x[i+3]-k
		s0 += d0
		s1 += d1
		s2 += d2
		s3 += d3
		q0 += d0 * d0
		q1 += d1 * d1
		q2 += d2 * d2
		q3 += d3 * d3
	}
	for ; i < len(x); i++ {
		d := x[i] - k
		s0 += d
		q0 += d * d
	}
	return float64((s0 + s1) + (s2 + s3)), float64((q0 + q1) + (q2 + q3))
}

// dotSums is Σd and Σd·x, accumulated as shiftedSums.
func dotSums[T float](d, x []T) (s, sx float64) {
	x = x[:len(d)]
	if is32[T]() && (useAVX512 || useAVX2) && len(d) > 0 {
		var s32, sx32 float32
		if useAVX512 {
			s32, sx32 = dotSums32(f32p(d), f32p(x), len(d))
		} else {
			s32, sx32 = dotSums32AVX2(f32p(d), f32p(x), len(d))
		}
		return float64(s32), float64(sx32)
	}
	var s0, s1, s2, s3, p0, p1, p2, p3 T
	i := 0
	for ; i+4 <= len(d); i += 4 {
		s0 += d[i]
		s1 += d[i+1]
		s2 += d[i+2]
		s3 += d[i+3]
		p0 += d[i] * x[i]
		p1 += d[i+1] * x[i+1]
		p2 += d[i+2] * x[i+2]
		p3 += d[i+3] * x[i+3]
	}
	for ; i < len(d); i++ {
		s0 += d[i]
		p0 += d[i] * x[i]
	}
	return float64((s0 + s1) + (s2 + s3)), float64((p0 + p1) + (p2 + p3))
}

// maskPosPar is maskPos over goroutines for large slices.
func maskPosPar[T float](y, dy, dx []T) {
	if w := workers(len(y), 1); w > 1 {
		parallelLoop(loopMaskPos, w, len(y), y, dy, dx, loopArgs{})
		return
	}
	maskPos(y, dy, dx)
}

// is32 reports whether T is float32.
func is32[T float]() bool {
	var z T
	return unsafe.Sizeof(z) == 4
}

// f32p is the address of s[0] as a *float32 (s is a non-empty []float32).
func f32p[T float](s []T) *float32 { return (*float32)(unsafe.Pointer(unsafe.SliceData(s))) }

// The AVX-512 loops (elem_amd64.s) sum in 16 lanes (32 for the sums) instead
// of the Go loops' 4, and fuse multiply-adds: other bits than the Go loops,
// the same on every run and for every worker count (work is split by plane or
// index range, as for the Go loops).
