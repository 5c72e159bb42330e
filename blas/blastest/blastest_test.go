package blastest_test

import (
	"testing"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/blas/blastest"
)

func TestGonum(t *testing.T) { blastest.Run(t, blas.Gonum{}) }

// The package-level functions go through the selected implementation and add
// argument checks; they must pass the same suite.
type viaPackage struct{}

func (viaPackage) Name() string { return "package-level " + blas.Current().Name() }
func (viaPackage) Sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	blas.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
func (viaPackage) Dgemm(tA, tB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	blas.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func TestPackageFunctions(t *testing.T) { blastest.Run(t, viaPackage{}) }
