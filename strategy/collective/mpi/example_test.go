//go:build !mpi

package mpi_test

import (
	"errors"
	"fmt"

	"github.com/fulgur-ml/fulgur/strategy/collective/mpi"
)

// Without -tags mpi the package says how to get MPI support.
func ExampleNew() {
	_, err := mpi.New()
	fmt.Println(errors.Is(err, mpi.ErrUnavailable))
	// Output: true
}
