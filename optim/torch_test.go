package optim

import (
	"fmt"
	"math"
	"testing"
)

// Literal expected values produced independently by PyTorch 1.13
// (python3-torch, torch.optim.SGD/Adam/AdamW, single-tensor path) with this
// script, run once; the test does not need Python:
//
//	opt = torch.optim.Adam([p], lr=0.01, weight_decay=0.1, amsgrad=True, foreach=False)  (for example)
//	p = torch.tensor([0.5, -1.25, 2.0, 0.125], dtype=dt, requires_grad=True)
//	for g in torchGrads: p.grad = torch.tensor(g, dtype=dt); opt.step(); print(p)
//
// float64 values are printed with repr, float32 values with '%.9g' (which
// round-trips a float32 exactly).
//
// Adam, AdamW and dampened SGD agree bit for bit. torch's CPU kernels fuse
// some multiply-adds (add_ with alpha becomes an FMA in its AVX2 build; the
// vector and scalar paths differ), which optim does not, for results that do
// not depend on the CPU: so the test allows 1 ulp (float32) or 4e-16
// relative (float64). Nesterov SGD's final param.add_ differs by that 1 ulp.
var (
	torchP0    = []float64{0.5, -1.25, 2.0, 0.125}
	torchGrads = [][]float64{{0.1, -0.2, 0.3, -0.4}, {-0.05, 0.15, 0.25, 0.5}, {0.3, 0.0, -0.1, 0.2}}
)

var torchCases = []struct {
	name string
	new  func() (Optimizer, error)
	f64  [][]float64 // params after steps 1, 2, 3, dtype=torch.float64
	f32  [][]float64 // same, dtype=torch.float32
}{
	{
		name: "SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)",
		new: func() (Optimizer, error) {
			return NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 0.01})
		},
		f64: [][]float64{
			{0.48005, -1.209625, 1.9392, 0.2007625},
			{0.480132905, -1.2186142125, 1.86209552, 0.13767980125},
			{0.4182273119805, -1.21197779924625, 1.832408786512, 0.08782446700262501},
		},
		f32: [][]float64{
			{0.480049998, -1.20962501, 1.93920004, 0.200762495},
			{0.480132908, -1.21861422, 1.86209559, 0.1376798},
			{0.418227315, -1.21197784, 1.83240891, 0.0878244713},
		},
	},
	{
		name: "SGD(lr=0.1, momentum=0.8, dampening=0.5, weight_decay=0.05)",
		new: func() (Optimizer, error) {
			return NewSGD(SGDConfig{LR: 0.1, Momentum: 0.8, Dampening: 0.5, WeightDecay: 0.05})
		},
		f64: [][]float64{
			{0.4875, -1.22375, 1.96, 0.164375},
			{0.47878125, -1.207190625, 1.9105999999999999, 0.17046406249999999},
			{0.455609296875, -1.1909251484374999, 1.8713034999999998, 0.16490915234374998},
		},
		f32: [][]float64{
			{0.487500012, -1.22375, 1.96000004, 0.164375007},
			{0.478781253, -1.20719063, 1.91060007, 0.170464069},
			{0.455609292, -1.19092512, 1.87130356, 0.164909154},
		},
	},
	{
		name: "Adam(lr=0.01, weight_decay=0.1)",
		new:  func() (Optimizer, error) { return NewAdam(AdamConfig{LR: 0.01, WeightDecay: 0.1}) },
		f64: [][]float64{
			{0.4900000006666666, -1.2400000003076923, 1.9900000002, 0.1349999997419355},
			{0.4833492006357781, -1.2339144873813288, 1.9800423864967853, 0.13309391779665286},
			{0.47544937554104005, -1.227252359835131, 1.971503241096389, 0.12968368769077693},
		},
		f32: [][]float64{
			{0.49000001, -1.24000001, 1.99000001, 0.135000005},
			{0.483349204, -1.23391449, 1.98004234, 0.133093923},
			{0.475449383, -1.22725236, 1.97150314, 0.129683688},
		},
	},
	{
		name: "AdamW(lr=0.01) (default weight_decay=0.01)",
		new:  func() (Optimizer, error) { return NewAdamW(AdamConfig{LR: 0.01}) },
		f64: [][]float64{
			{0.4899500009999999, -1.2398750005, 1.9898000003333334, 0.13498749975000002},
			{0.4872376359402391, -1.2388577629764304, 1.9796892919463946, 0.133346678419268},
			{0.48048390688755194, -1.238043392351826, 1.9736552671251666, 0.130226920449865},
		},
		f32: [][]float64{
			{0.489950001, -1.23987496, 1.98979998, 0.134987503},
			{0.487237632, -1.23885775, 1.97968924, 0.133346677},
			{0.48048389, -1.23804343, 1.97365522, 0.13022691},
		},
	},
	// amsgrad=True (and foreach=False, the single-tensor path): the max
	// of the second moments changes p[0] from step 2 (Adam) and p[1] at
	// step 3 (AdamW), where the plain cases above differ.
	{
		name: "Adam(lr=0.01, weight_decay=0.1, amsgrad=True)",
		new:  func() (Optimizer, error) { return NewAdam(AdamConfig{LR: 0.01, WeightDecay: 0.1, AMSGrad: true}) },
		f64: [][]float64{
			{0.4900000006666666, -1.2400000003076923, 1.9900000002, 0.1349999997419355},
			{0.4833523789994147, -1.2339144873813288, 1.9800423864967853, 0.13309391779665286},
			{0.4754525546327698, -1.227252359835131, 1.971503241096389, 0.12968368769077693},
		},
		f32: [][]float64{
			{0.49000001, -1.24000001, 1.99000001, 0.135000005},
			{0.483352393, -1.23391449, 1.98004234, 0.133093923},
			{0.475452572, -1.22725236, 1.97150314, 0.129683688},
		},
	},
	{
		name: "AdamW(lr=0.01, amsgrad=True)",
		new:  func() (Optimizer, error) { return NewAdamW(AdamConfig{LR: 0.01, AMSGrad: true}) },
		f64: [][]float64{
			{0.4899500009999999, -1.2398750005, 1.9898000003333334, 0.13498749975000002},
			{0.4872376359402391, -1.2388577629764304, 1.9796892919463946, 0.133346678419268},
			{0.48048390688755194, -1.23804373768058, 1.9736552671251666, 0.130226920449865},
		},
		f32: [][]float64{
			{0.489950001, -1.23987496, 1.98979998, 0.134987503},
			{0.487237632, -1.23885775, 1.97968924, 0.133346677},
			{0.48048389, -1.23804379, 1.97365522, 0.13022691},
		},
	},
}

// ulps32 is the distance between two float32 values in units in the last place.
func ulps32(a, b float32) int64 {
	ia, ib := int64(math.Float32bits(a)), int64(math.Float32bits(b))
	if ia < 0x80000000 != (ib < 0x80000000) {
		return math.MaxInt64
	}
	d := ia - ib
	if d < 0 {
		d = -d
	}
	return d
}

func TestAgainstTorch(t *testing.T) {
	for _, tc := range torchCases {
		t.Run(tc.name+"/float64", func(t *testing.T) {
			testAgainstTorch(t, tc.new, tc.f64, func(got float64, want float64) string {
				if d := math.Abs(got - want); d > 4e-16*math.Abs(want) {
					return fmt.Sprintf("%.17g, torch %.17g (diff %.3g)", got, want, d)
				}
				return ""
			})
		})
		t.Run(tc.name+"/float32", func(t *testing.T) {
			testAgainstTorch(t, tc.new, tc.f32, func(got float32, want float64) string {
				if u := ulps32(got, float32(want)); u > 1 {
					return fmt.Sprintf("%.9g, torch %.9g (%d ulps apart)", got, want, u)
				}
				return ""
			})
		})
	}
}

// testAgainstTorch steps five copies of torchP0 in two spans, [0, 6) and
// [6, 20), so that with either lane count (8 float32, 4 float64) some
// elements go through the SIMD kernel, where there is one, and some through
// the Go loop; it checks every copy against torch's params after each step.
// far describes a value too far from torch's, or returns "".
func testAgainstTorch[T float](t *testing.T, newOpt func() (Optimizer, error), want [][]float64, far func(got T, want float64) string) {
	o, err := newOpt()
	if err != nil {
		t.Fatal(err)
	}
	const copies = 5
	if err := o.Bind(0, 4*copies); err != nil {
		t.Fatal(err)
	}
	p := conv[T](tile(torchP0, copies))
	for s, g := range torchGrads {
		o.Begin()
		gT := conv[T](tile(g, copies))
		update(o, p[:6], gT[:6], 0)
		update(o, p[6:], gT[6:], 6)
		for i := range p {
			if msg := far(p[i], want[s][i%4]); msg != "" {
				t.Errorf("step %d p[%d] = %s", s+1, i, msg)
			}
		}
	}
}

func to32(x []float64) []float32 { return conv[float32](x) }

func tile(x []float64, n int) []float64 {
	var y []float64
	for range n {
		y = append(y, x...)
	}
	return y
}
