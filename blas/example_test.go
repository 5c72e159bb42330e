package blas_test

import (
	"fmt"

	"github.com/fulgur-ml/fulgur/blas"
)

func Example() {
	// c (2×2) = a (2×3) · b (3×2), row-major.
	a := []float32{1, 2, 3, 4, 5, 6}
	b := []float32{1, 0, 0, 1, 1, 1}
	c := make([]float32, 4)
	blas.Sgemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2)
	fmt.Println(blas.Current().Name(), c)
	// Output: gonum [4 5 10 11]
}
