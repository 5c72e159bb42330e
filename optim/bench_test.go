package optim

import (
	"testing"
	"unsafe"
)

// benchN is the parameter count of the optimizer benchmarks (a little less
// than the mlp workload's 784-256-128-10 network, 235,146).
const benchN = 250_000

// BenchmarkUpdate runs each optimizer on each dtype with each kernel: the
// AVX2 assembly where there is one, and the Go loops.
func BenchmarkUpdate(b *testing.B) {
	opts := []struct {
		name string
		new  func() (Optimizer, error)
		// arrays read and written per parameter: Adam reads p, g, m, v and
		// writes p, m, v; SGD with momentum reads p, g, buf and writes p, buf.
		arrays int
	}{
		{"adam", func() (Optimizer, error) { return NewAdam(AdamConfig{}) }, 7},
		{"adamw", func() (Optimizer, error) { return NewAdamW(AdamConfig{}) }, 7},
		{"sgd-momentum", func() (Optimizer, error) { return NewSGD(SGDConfig{LR: 0.01, Momentum: 0.9}) }, 5},
	}
	for _, o := range opts {
		b.Run(o.name+"/float32", func(b *testing.B) { kernels(b, func(b *testing.B) { benchUpdate[float32](b, o.new, o.arrays) }) })
		b.Run(o.name+"/float64", func(b *testing.B) { kernels(b, func(b *testing.B) { benchUpdate[float64](b, o.new, o.arrays) }) })
	}
}

func benchUpdate[T float](b *testing.B, newOpt func() (Optimizer, error), arrays int) {
	o, err := newOpt()
	if err != nil {
		b.Fatal(err)
	}
	if err := o.Bind(0, benchN); err != nil {
		b.Fatal(err)
	}
	p0, gs := data(benchN, 1, 3)
	p, g := conv[T](p0), conv[T](gs[0])
	// First step outside the timer: it allocates the state.
	o.Begin()
	update(o, p, g, 0)
	bytes := arrays * int(unsafe.Sizeof(p[0])) * benchN
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		o.Begin()
		update(o, p, g, 0)
	}
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

func BenchmarkClipGradNorm(b *testing.B) {
	b.Run("float32", benchClipGradNorm[float32])
	b.Run("float64", benchClipGradNorm[float64])
}

func benchClipGradNorm[T float](b *testing.B) {
	_, gs := data(benchN, 1, 5)
	g := conv[T](gs[0])
	b.SetBytes(int64(unsafe.Sizeof(g[0])) * benchN)
	b.ReportAllocs()
	for b.Loop() {
		ClipGradNorm(g, 1e9) // reads only: nothing to clip
	}
}
