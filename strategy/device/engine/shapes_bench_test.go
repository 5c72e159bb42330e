package engine_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/internal/cputime"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
)

// shapeCase is one layer (or a BatchNorm and the layer after it, for
// layers without parameters) trained alone: input [batch, in...] of
// random values, MSE loss against a random target of the output's shape.
type shapeCase struct {
	name  string
	batch int
	in    []int
	f64   bool
	layer func(b *module.Builder) func(*module.Step, *G.Node) *G.Node
}

// conv is a Conv2d; it takes the input gradient, as a layer inside a
// model does, unless its input has 3 channels (a stem, fed by the batch).
func conv(in, out, k, stride, pad int, opt ...func(*nn.Conv2dConfig)) func(*module.Builder) func(*module.Step, *G.Node) *G.Node {
	c := nn.Conv2dConfig{In: in, Out: out, Kernel: k, Stride: stride, Padding: pad, InputGrad: in > 3}
	for _, o := range opt {
		o(&c)
	}
	return func(b *module.Builder) func(*module.Step, *G.Node) *G.Node { return nn.NewConv2d(b, "conv", c).Forward }
}

func groups(g int) func(*nn.Conv2dConfig)   { return func(c *nn.Conv2dConfig) { c.Groups = g } }
func dilation(d int) func(*nn.Conv2dConfig) { return func(c *nn.Conv2dConfig) { c.Dilation = d } }

func linear(in, out int) func(*module.Builder) func(*module.Step, *G.Node) *G.Node {
	return func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewLinear(b, "fc", in, out, nn.LinearInputGrad()).Forward
	}
}

// bnThen is BatchNorm2d(c) followed by then (nil: alone).
func bnThen(c int, then func(b *module.Builder) func(*module.Step, *G.Node) *G.Node) func(*module.Builder) func(*module.Step, *G.Node) *G.Node {
	return func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		bn := nn.NewBatchNorm2d(b, "bn", c)
		if then == nil {
			return bn.Forward
		}
		f := then(b)
		return func(s *module.Step, x *G.Node) *G.Node { return f(s, bn.Forward(s, x)) }
	}
}

// shapeCases is the sweep of shapes beyond resnet8's. bench/torch_shapes.py
// holds the same cases, by the same names, for PyTorch: change both.
var shapeCases = []shapeCase{
	{"conv1x1_64_256_14", 32, []int{64, 14, 14}, false, conv(64, 256, 1, 1, 0)},
	{"conv3x3_16_16_28", 32, []int{16, 28, 28}, false, conv(16, 16, 3, 1, 1)},
	{"conv3x3_3_32_32", 32, []int{3, 32, 32}, false, conv(3, 32, 3, 1, 1)},
	{"conv3x3s2_64_128_28", 32, []int{64, 28, 28}, false, conv(64, 128, 3, 2, 1)},
	{"conv3x3_128_128_14", 32, []int{128, 14, 14}, false, conv(128, 128, 3, 1, 1)},
	{"conv3x3_256_256_7", 32, []int{256, 7, 7}, false, conv(256, 256, 3, 1, 1)},
	{"conv5x5_32_32_28", 32, []int{32, 28, 28}, false, conv(32, 32, 5, 1, 2)},
	{"conv5x5s2_32_64_28", 32, []int{32, 28, 28}, false, conv(32, 64, 5, 2, 2)},
	{"conv7x7_32_32_28", 32, []int{32, 28, 28}, false, conv(32, 32, 7, 1, 3)},
	{"stem7x7s2_3_64_64", 32, []int{3, 64, 64}, false, conv(3, 64, 7, 2, 3)},
	{"conv3x3d2_32_32_28", 32, []int{32, 28, 28}, false, conv(32, 32, 3, 1, 2, dilation(2))},
	{"dw3x3_64_28", 32, []int{64, 28, 28}, false, conv(64, 64, 3, 1, 1, groups(64))},
	{"dw3x3s2_64_28", 32, []int{64, 28, 28}, false, conv(64, 64, 3, 2, 1, groups(64))},
	{"dw5x5_128_14", 32, []int{128, 14, 14}, false, conv(128, 128, 5, 1, 2, groups(128))},
	{"group3x3g32_64_28", 32, []int{64, 28, 28}, false, conv(64, 64, 3, 1, 1, groups(32))},
	{"group3x3g4_64_28", 32, []int{64, 28, 28}, false, conv(64, 64, 3, 1, 1, groups(4))},
	{"conv3x3_17_33_31", 32, []int{17, 31, 31}, false, conv(17, 33, 3, 1, 1)},
	{"conv3x3s2_17_33_31", 32, []int{17, 31, 31}, false, conv(17, 33, 3, 2, 1)},
	{"conv1x1_17_33_31", 32, []int{17, 31, 31}, false, conv(17, 33, 1, 1, 0)},
	{"stem3x3s2_3_32_64", 32, []int{3, 64, 64}, false, conv(3, 32, 3, 2, 1)},
	{"lenet5x5_1_6_28", 64, []int{1, 28, 28}, false, conv(1, 6, 5, 1, 0)},
	{"lenet5x5_3_6_32", 64, []int{3, 32, 32}, false, conv(3, 6, 5, 1, 0)},
	{"lenet5x5_6_16_14", 64, []int{6, 14, 14}, false, conv(6, 16, 5, 1, 0)},
	{"conv3x3_32_32_28_b1", 1, []int{32, 28, 28}, false, conv(32, 32, 3, 1, 1)},
	{"conv3x3_32_32_28_b8", 8, []int{32, 28, 28}, false, conv(32, 32, 3, 1, 1)},
	{"conv3x3_32_32_28_b128", 128, []int{32, 28, 28}, false, conv(32, 32, 3, 1, 1)},
	{"conv3x3_32_32_28_f64", 32, []int{32, 28, 28}, true, conv(32, 32, 3, 1, 1)},
	{"linear_1024_4096_b8", 8, []int{1024}, false, linear(1024, 4096)},
	{"linear_4096_1024_b64", 64, []int{4096}, false, linear(4096, 1024)},
	{"bn_64_28", 32, []int{64, 28, 28}, false, bnThen(64, nil)},
	{"bn_relu_64_28", 32, []int{64, 28, 28}, false, bnThen(64, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewReLU(b, "relu").Forward
	})},
	{"bn_maxpool_64_28", 32, []int{64, 28, 28}, false, bnThen(64, func(b *module.Builder) func(*module.Step, *G.Node) *G.Node {
		return nn.NewMaxPool2d(b, "pool", nn.PoolConfig{Kernel: 2}).Forward
	})},
	{"bn_64_28_f64", 32, []int{64, 28, 28}, true, bnThen(64, nil)},
}

// layerModule trains one shapeCase.
type layerModule struct {
	c       shapeCase
	forward func(*module.Step, *G.Node) *G.Node
}

func (m *layerModule) Configure(b *module.Builder) error {
	m.forward = m.c.layer(b)
	return nil
}

func (m *layerModule) TrainingStep(s *module.Step) (*G.Node, error) {
	return nn.MSELoss(m.forward(s, s.Input("x")), s.Input("y")), nil
}

func (c shapeCase) dtype() tensor.Dtype {
	if c.f64 {
		return tensor.Float64
	}
	return tensor.Float32
}

// model returns the case's module and its store (without gradients
// unless grads).
func (c shapeCase) model(b *testing.B, grads bool) (*layerModule, *module.Store) {
	m := &layerModule{c: c}
	bd := module.NewBuilder(c.dtype())
	if err := m.Configure(bd); err != nil {
		b.Fatal(err)
	}
	specs, err := bd.Specs()
	if err != nil {
		b.Fatal(err)
	}
	newStore := module.NewStoreWithoutGrad
	if grads {
		newStore = module.NewStore
	}
	st, err := newStore(specs, c.dtype(), 1)
	if err != nil {
		b.Fatal(err)
	}
	return m, st
}

// outShape is the layer's output shape for one example.
func (c shapeCase) outShape(b *testing.B) []int {
	m, st := c.model(b, false)
	s := module.NewStep(G.NewGraph(), module.Train, st, c.batch, []module.StepInput{{Name: "x", Shape: c.in}}, 1)
	return []int(m.forward(s, s.Input("x")).Shape()[1:])
}

var shapesBLAS sync.Once

// BenchmarkShapes times one training step (forward, backward, the
// gradients gathered into the store; no optimizer) of layers at shapes
// beyond resnet8's, on the engine's executor with the BLAS and workers a
// program gets by default (FULGUR_WORKERS=1 FULGUR_BLAS_THREADS=1
// GOMAXPROCS=1 for one thread). bench/shapes.sh runs it alternating with
// PyTorch 1.13 and prints the ratios:
//
//	go test ./strategy/device/engine -run '^$' -bench Shapes/dw
//	bench/shapes.sh -rounds 3
func BenchmarkShapes(b *testing.B) {
	shapesBLAS.Do(func() {
		if _, err := blas.Choose(zerolog.Nop(), blas.ChooseOptions{}); err != nil {
			b.Logf("blas.Choose: %v", err)
		}
	})
	for _, c := range shapeCases {
		b.Run(c.name, func(b *testing.B) {
			m, st := c.model(b, true)
			fields := []data.Field{{Name: "x", Shape: c.in}, {Name: "y", Shape: c.outShape(b)}}
			e := engine.New(m, st, fields, 1)
			r := rand.New(rand.NewPCG(1, 2))
			batch := &data.Batch{Size: c.batch, Fields: fields}
			for _, f := range fields {
				n := c.batch * f.Size()
				if c.f64 {
					v := make([]float64, n)
					for i := range v {
						v[i] = r.Float64()
					}
					batch.Data64 = append(batch.Data64, v)
					continue
				}
				v := make([]float32, n)
				for i := range v {
					v[i] = r.Float32()
				}
				batch.Data = append(batch.Data, v)
			}
			ctx := context.Background()
			step := func() {
				if _, err := e.Run(ctx, module.Train, batch, false, 1); err != nil {
					b.Fatal(err)
				}
			}
			for range 3 { // the first runs allocate the ops' buffers
				step()
			}
			b.ResetTimer()
			cpu0 := cputime.Now()
			for b.Loop() {
				step()
			}
			b.ReportMetric(float64((cputime.Now()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}
