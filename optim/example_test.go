package optim_test

import (
	"fmt"
	"math"

	"github.com/fulgur-ml/fulgur/optim"
)

// An optimizer bound to a flat buffer, updated bucket by bucket, with a
// warm-up then cosine schedule and gradient clipping.
func Example() {
	params := []float32{1, -2, 3, -4}
	opt, err := optim.NewAdamW(optim.AdamConfig{LR: 0.1})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := opt.Bind(0, len(params)); err != nil {
		fmt.Println(err)
		return
	}
	cosine, _ := optim.NewCosineAnnealing(0.1, 2, 0)
	sched, _ := optim.NewLinearWarmup(0.1, 2, cosine)
	sched.Start(opt)
	for step := 1; step <= 4; step++ {
		grads := make([]float32, len(params))
		for i, p := range params { // the gradient of sum(p^2)
			grads[i] = 2 * p
		}
		norm := optim.ClipGradNorm32(grads, 5)
		opt.Begin()
		opt.Update32(params[2:], grads[2:], 2) // the bucket whose reduce landed first
		opt.Update32(params[:2], grads[:2], 0)
		fmt.Printf("step %d lr %.3f norm %.2f params %.3f\n", step, opt.LR(), norm, params)
		sched.Step(opt, math.NaN())
	}
	// Output:
	// step 1 lr 0.050 norm 10.95 params [0.949 -1.949 2.948 -3.948]
	// step 2 lr 0.100 norm 10.77 params [0.849 -1.847 2.846 -3.844]
	// step 3 lr 0.100 norm 10.39 params [0.748 -1.745 2.743 -3.740]
	// step 4 lr 0.050 norm 10.02 params [0.699 -1.695 2.691 -3.688]
}

func ExampleLookup() {
	opt, err := optim.Lookup("sgd", 0.5)
	fmt.Println(opt.Name(), opt.LR(), err)
	_, err = optim.Lookup("rmsprop", 0.5)
	fmt.Println(err)
	_, err = optim.NewAdam(optim.AdamConfig{Beta1: 1.5})
	fmt.Println(err)
	// Output:
	// sgd 0.5 <nil>
	// optimizer "rmsprop" is unknown: use one of adam, adamw, sgd
	// AdamConfig.Beta1 is 1.5: use a value in [0, 1), such as 0.9 (0 means 0.9; optim.Zero means 0)
}

// Clipping works on a gradient buffer of either dtype, or of a named type
// with float32 or float64 underneath; across spans or ranks, sum the
// partial SumSquares first.
func ExampleClipGradNorm() {
	type grad float32
	g32 := []grad{3, -4, 12} // norm 13
	g64 := []float64{3, -4, 12}
	fmt.Println(optim.ClipGradNorm(g32, 6.5), g32)
	fmt.Println(optim.ClipGradNorm(g64, 6.5), g64)

	spans := [][]float64{{3, -4}, {12}}
	var sum float64
	for _, s := range spans {
		sum += optim.SumSquares(s)
	}
	scale := optim.ClipScale(math.Sqrt(sum), 6.5)
	for _, s := range spans {
		optim.ScaleGrads(s, scale)
	}
	fmt.Printf("%.4f\n", spans)
	// Output:
	// 13 [1.4999999 -1.9999999 5.9999995]
	// 13 [1.4999998846153937 -1.9999998461538582 5.999999538461575]
	// [[1.5000 -2.0000] [6.0000]]
}
