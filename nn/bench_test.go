package nn_test

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// Benchmarks pick the matrix multiply as programs do (OpenBLAS when the
// loader finds it, unless FULGUR_BLAS=gonum), once, and log which ran. Run
// them alone (-run '^$') so that no test has multiplied first:
//
//	go test ./nn -run '^$' -bench . -benchmem
var chooseOnce sync.Once

func chooseBLAS(b *testing.B) {
	chooseOnce.Do(func() {
		if _, err := blas.Choose(zerolog.Nop(), blas.ChooseOptions{}); err != nil {
			b.Logf("blas.Choose: %v", err)
		}
	})
	b.Logf("blas: %s", blas.Current().Name())
}

// mlpGraph is the mlp workload's training graph (784-256-128-10, ReLU,
// softmax cross-entropy, batch 64) built through a module Step.
func mlpGraph(b *testing.B) (*G.ExprGraph, *G.Node) {
	var fcs []*nn.Linear
	m := newModel(b, tensor.Float32, func(bl *module.Builder) {
		fcs = []*nn.Linear{
			nn.NewLinear(bl, "fc1", 784, 256, nn.LinearReLU()),
			nn.NewLinear(bl, "fc2", 256, 128, nn.LinearReLU()),
			nn.NewLinear(bl, "fc3", 128, 10),
		}
	})
	g := G.NewGraph()
	s := module.NewStep(g, module.Train, m.store, 64, []module.StepInput{{Name: "x", Shape: []int{784}}, {Name: "y"}}, 1)
	if err := G.Let(s.Input("x"), randT(tensor.Float32, 1, 0, 1, 64, 784)); err != nil {
		b.Fatal(err)
	}
	y := tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(64))
	set(y, func(i int) float64 { return float64(i % 10) })
	if err := G.Let(s.Input("y"), y); err != nil {
		b.Fatal(err)
	}
	h := s.Input("x")
	for _, fc := range fcs {
		h = fc.Forward(s, h)
	}
	loss := nn.CrossEntropy(h, s.Input("y"))
	return g, withGrads(b, s, loss)
}

// resnet8Graph is the resnet8 workload's training graph at batch 64.
func resnet8Graph(b *testing.B) (*G.ExprGraph, *G.Node) {
	_, g, _, loss, _, _, _ := resnetStep(b, tensor.Float32, nn.ResNetConfig{}, 64, 28, module.Train)
	return g, loss
}

// resnet8Graph32 is resnet8Graph at batch 32, each rank's batch in the
// scaling workload's 2 ranks: its ns/op against twice BenchmarkResNet8StepOps'
// half is what the half batch costs a sample.
func resnet8Graph32(b *testing.B) (*G.ExprGraph, *G.Node) {
	_, g, _, loss, _, _, _ := resnetStep(b, tensor.Float32, nn.ResNetConfig{}, 32, 28, module.Train)
	return g, loss
}

func withGrads(b *testing.B, s *module.Step, loss *G.Node) *G.Node {
	var params G.Nodes
	for _, p := range s.UsedParams() {
		n, _ := s.Node(p)
		params = append(params, n)
	}
	if _, err := G.Grad(loss, params...); err != nil {
		b.Fatal(err)
	}
	return loss
}

// benchTape runs the graph on Gorgonia's TapeMachine, as the trainer's
// reference path does: one forward and backward per iteration.
func benchTape(b *testing.B, build func(*testing.B) (*G.ExprGraph, *G.Node)) {
	chooseBLAS(b)
	g, _ := build(b)
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := vm.RunAll(); err != nil {
			b.Fatal(err)
		}
		vm.Reset()
	}
}

// benchOps calls every op's Do in a fixed order on the calling goroutine: the
// ops' own cost, without the tape machine's per-op overhead (what an
// executor of our own pays).
func benchOps(b *testing.B, build func(*testing.B) (*G.ExprGraph, *G.Node)) {
	chooseBLAS(b)
	g, _ := build(b)
	sorted, err := G.Sort(g)
	if err != nil {
		b.Fatal(err)
	}
	type step struct {
		n  *G.Node
		in []*G.Node
	}
	var steps []step
	vals := map[*G.Node]G.Value{}
	for i := len(sorted) - 1; i >= 0; i-- {
		n := sorted[i]
		if n.Op() == nil {
			vals[n] = n.Value()
			continue
		}
		st := step{n: n}
		for it := g.From(n.ID()); it.Next(); {
			st.in = append(st.in, it.Node().(*G.Node))
		}
		steps = append(steps, st)
	}
	args := make([][]G.Value, len(steps))
	for i, st := range steps {
		args[i] = make([]G.Value, len(st.in))
	}
	outs := make([]G.Value, len(steps))
	index := map[*G.Node]int{}
	for i, st := range steps {
		index[st.n] = i
	}
	run := func() {
		for i, st := range steps {
			for j, c := range st.in {
				if k, ok := index[c]; ok {
					args[i][j] = outs[k]
				} else {
					args[i][j] = vals[c]
				}
			}
			v, err := st.n.Op().Do(args[i]...)
			if err != nil {
				b.Fatal(err)
			}
			outs[i] = v
		}
	}
	run()
	b.ReportMetric(float64(len(steps)), "ops")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
	if !perOp {
		return
	}
	// Per-op wall time, summed by op and output shape, after the timed
	// loop: what each kind of op costs in the real step.
	b.StopTimer()
	spent := map[string]time.Duration{}
	for i := 0; i < b.N; i++ {
		for k, st := range steps {
			for j, c := range st.in {
				if x, ok := index[c]; ok {
					args[k][j] = outs[x]
				} else {
					args[k][j] = vals[c]
				}
			}
			t0 := time.Now()
			v, err := st.n.Op().Do(args[k]...)
			spent[fmt.Sprintf("%s %v", st.n.Op(), st.n.Shape())] += time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			outs[k] = v
		}
	}
	keys := make([]string, 0, len(spent))
	for k := range spent {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return spent[keys[i]] > spent[keys[j]] })
	var total time.Duration
	for _, k := range keys {
		total += spent[k]
	}
	for _, k := range keys {
		fmt.Fprintf(os.Stderr, "%8.3f ms %5.1f%%  %s\n", float64(spent[k].Microseconds())/1e3/float64(b.N), 100*float64(spent[k])/float64(total), k)
	}
}

// perOp makes benchOps log each op's time (go test ./nn -run '^$' -bench
// ResNet8StepOps -perop).
var perOp bool

func init() {
	flag.BoolVar(&perOp, "perop", false, "log the time of each op of the Ops step benchmarks")
}

// BenchmarkMLPStep: fused Linear(+ReLU) ×3 and softmax cross-entropy,
// forward and backward, batch 64, 784-256-128-10, float32.
func BenchmarkMLPStepTape(b *testing.B) { benchTape(b, mlpGraph) }
func BenchmarkMLPStepOps(b *testing.B)  { benchOps(b, mlpGraph) }

// BenchmarkResNet8Step: resnet8 forward and backward, batch 64, 1x28x28,
// float32.
func BenchmarkResNet8StepTape(b *testing.B) { benchTape(b, resnet8Graph) }
func BenchmarkResNet8StepOps(b *testing.B)  { benchOps(b, resnet8Graph) }

// BenchmarkResNet8StepOps32 is BenchmarkResNet8StepOps at batch 32.
func BenchmarkResNet8StepOps32(b *testing.B) { benchOps(b, resnet8Graph32) }
