package optim

import (
	"testing"
)

// benchN is the parameter count of the Adam benchmarks (a little less than
// the mlp workload's 784-256-128-10 network, 235,146).
const benchN = 250_000

// Bytes moved per parameter by one update: Adam float32 reads p, g, m, v
// and writes p, m, v (7 x 4 bytes); float64 doubles that; SGD with momentum
// reads p, g, buf and writes p, buf.
func benchOpt(b *testing.B, o Optimizer, use32 bool, bytesPerParam int) {
	if err := o.Bind(0, benchN); err != nil {
		b.Fatal(err)
	}
	p0, gs := data(benchN, 1, 3)
	p32, g32 := to32(p0), to32(gs[0])
	p64, g64 := p0, gs[0]
	// First step outside the timer: it allocates the state.
	o.Begin()
	if use32 {
		o.Update32(p32, g32, 0)
	} else {
		o.Update64(p64, g64, 0)
	}
	b.SetBytes(int64(bytesPerParam * benchN))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		o.Begin()
		if use32 {
			o.Update32(p32, g32, 0)
		} else {
			o.Update64(p64, g64, 0)
		}
	}
	b.ReportMetric(float64(bytesPerParam*benchN)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchN, "ns/param")
}

// kernels runs f once per kernel: the AVX2 assembly where there is one, and
// the Go loops.
func kernels(b *testing.B, f func(b *testing.B)) {
	defer func(v bool) { useSIMD = v }(useSIMD)
	if useSIMD {
		b.Run("kernel=simd", f)
	}
	useSIMD = false
	b.Run("kernel=go", f)
}

func BenchmarkAdamUpdate32(b *testing.B) {
	kernels(b, func(b *testing.B) {
		o, _ := NewAdam(AdamConfig{})
		benchOpt(b, o, true, 28)
	})
}

func BenchmarkAdamWUpdate32(b *testing.B) {
	kernels(b, func(b *testing.B) {
		o, _ := NewAdamW(AdamConfig{})
		benchOpt(b, o, true, 28)
	})
}

func BenchmarkAdamUpdate64(b *testing.B) {
	kernels(b, func(b *testing.B) {
		o, _ := NewAdam(AdamConfig{})
		benchOpt(b, o, false, 56)
	})
}

func BenchmarkSGDMomentumUpdate32(b *testing.B) {
	kernels(b, func(b *testing.B) {
		o, _ := NewSGD(SGDConfig{LR: 0.01, Momentum: 0.9})
		benchOpt(b, o, true, 20)
	})
}

func BenchmarkClipGradNorm32(b *testing.B) {
	_, gs := data(benchN, 1, 5)
	g := to32(gs[0])
	b.SetBytes(4 * benchN)
	b.ReportAllocs()
	for b.Loop() {
		ClipGradNorm32(g, 1e9) // reads only: nothing to clip
	}
}
