package engine_test

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
)

// resNetSpecs returns models.ResNet and its parameters' specs.
func resNetSpecs(t *testing.T) (*models.ResNet, []module.Spec) {
	t.Helper()
	mod := &models.ResNet{}
	b := module.NewBuilder(tensor.Float32)
	if err := mod.Configure(b); err != nil {
		t.Fatal(err)
	}
	specs, _ := b.Specs()
	return mod, specs
}

// resNetStore returns models.ResNet and a parameter store for it.
func resNetStore(t *testing.T) (*models.ResNet, *module.Store) {
	t.Helper()
	mod, specs := resNetSpecs(t)
	st, err := module.NewStore(specs, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	return mod, st
}

// report is one WithGradReady call: the span, a copy of the store's
// gradients then, and whether the first layer's weight gradient (the last
// one backward computes) was still unwritten.
type report struct {
	off, n    int
	grads     []float32
	firstOpen bool
}

// WithGradReady reports each gradient once per training run, while the
// backward pass still runs (the first convolution's gradient is still
// unwritten when the classifier's is reported), in the order backward
// produces them (the classifier first, the stem last), and each one is final
// in the store when reported: its span then holds what it holds after the
// run, scaled or accumulated as asked.
func TestGradientsAreReportedWhenFinal(t *testing.T) {
	mod, st := resNetStore(t)
	entry := func(name string) module.Entry {
		e, ok := st.Lookup(name)
		if !ok {
			t.Fatalf("the model has no %q", name)
		}
		return e
	}
	stem := entry("conv1.weight")
	var reports []report
	e := engine.New(mod, st, []data.Field{{Name: "x", Shape: []int{1, 28, 28}}, {Name: "y"}}, 1,
		engine.WithGradReady(func(off, n int) {
			g := st.Grad32()
			reports = append(reports, report{off, n, slices.Clone(g), math.IsNaN(float64(g[stem.Offset]))})
		}))
	r := rand.New(rand.NewPCG(3, 4))
	batch := &data.Batch{Size: 4, Fields: []data.Field{{Name: "x", Shape: []int{1, 28, 28}}, {Name: "y"}},
		Data: [][]float32{make([]float32, 4*28*28), make([]float32, 4)}}
	for i := range batch.Data[0] {
		batch.Data[0][i] = r.Float32()
	}
	for i := range batch.Data[1] {
		batch.Data[1][i] = float32(r.IntN(10))
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		accumulate bool
		scale      float64
	}{
		{"direct", false, 1}, // ops write into the store where they can
		{"scaled", false, 0.5},
		{"accumulated", true, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.accumulate {
				for i := range st.Grad32() {
					st.Grad32()[i] = float32(math.NaN())
				}
			}
			reports = reports[:0]
			if _, err := e.Run(ctx, module.Train, batch, tc.accumulate, tc.scale); err != nil {
				t.Fatal(err)
			}
			var seen []string
			for _, en := range st.Entries() {
				if en.Buffer {
					continue
				}
				k := slices.IndexFunc(reports, func(r report) bool { return r.off == en.Offset })
				if k < 0 {
					t.Errorf("the gradient of %s was not reported", en.Name)
					continue
				}
				rp := reports[k]
				if rp.n != en.Len {
					t.Errorf("%s reported with %d values, it has %d", en.Name, rp.n, en.Len)
				}
				seen = append(seen, en.Name)
				final := st.Grad32()[en.Offset : en.Offset+en.Len]
				if i := slices.IndexFunc(final, func(v float32) bool { return math.IsNaN(float64(v)) }); i >= 0 {
					t.Errorf("%s: gradient %d never written", en.Name, i)
				}
				if then := rp.grads[en.Offset : en.Offset+en.Len]; !slices.Equal(then, final) {
					t.Errorf("%s: when reported its gradient began %v, after the run %v", en.Name, then[:min(3, len(then))], final[:min(3, len(final))])
				}
			}
			if len(reports) != len(seen) {
				t.Errorf("%d reports for %d gradients", len(reports), len(seen))
			}
			first, last := reports[0], reports[len(reports)-1]
			if fc := entry("fc.weight"); first.off != fc.Offset && first.off != entry("fc.bias").Offset {
				t.Errorf("the first gradient reported is at %d, not the classifier's (%d)", first.off, fc.Offset)
			}
			if last.off != stem.Offset {
				t.Errorf("the last gradient reported is at %d, not the stem's (%d)", last.off, stem.Offset)
			}
			if !tc.accumulate && !first.firstOpen {
				t.Error("the stem's gradient was written before the classifier's was reported: not reported during the backward pass")
			}
		})
	}
}

// With one P (a rank pinned to one core), a goroutine woken by the first
// gradient's report (a strategy's communication goroutine, handed a
// bucket) runs while the backward pass still runs, the stem's gradient (the
// last one backward computes) still unwritten, when the strategy says its
// communication is in flight (WithCommInFlight): the engine yields between
// backward steps. Without the yields it would run only once the pass ended
// and the caller blocked (or sysmon preempted the pass after 10 ms).
func TestCommunicationRunsDuringBackwardOnOneP(t *testing.T) {
	mod, st := resNetStore(t)
	stem, ok := st.Lookup("conv1.weight")
	if !ok {
		t.Fatal(`the model has no "conv1.weight"`)
	}
	work := make(chan struct{}, 1)
	sawStemOpen := make(chan bool, 1)
	go func() { // the communication goroutine
		<-work
		sawStemOpen <- math.IsNaN(float64(st.Grad32()[stem.Offset]))
	}()
	handed := false
	fields := []data.Field{{Name: "x", Shape: []int{1, 28, 28}}, {Name: "y"}}
	e := engine.New(mod, st, fields, 1, engine.WithGradReady(func(off, n int) {
		if !handed {
			handed = true
			work <- struct{}{}
		}
	}), engine.WithCommInFlight(func() bool { return handed }))
	batch := &data.Batch{Size: 4, Fields: fields, Data: [][]float32{make([]float32, 4*28*28), make([]float32, 4)}}
	for i := range batch.Data[0] {
		batch.Data[0][i] = float32(i%7) / 7
	}
	ctx := context.Background()
	if err := e.Compile(module.Train, batch); err != nil {
		t.Fatal(err)
	}
	for i := range st.Grad32() {
		st.Grad32()[i] = float32(math.NaN())
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if _, err := e.Run(ctx, module.Train, batch, false, 1); err != nil {
		t.Fatal(err)
	}
	if !<-sawStemOpen {
		t.Error("the goroutine woken by the first gradient's report ran only after the backward pass: under GOMAXPROCS=1, with communication in flight, the engine must yield between backward steps")
	}
}
