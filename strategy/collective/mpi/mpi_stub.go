//go:build !mpi

package mpi

import (
	"errors"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// ErrUnavailable is returned when the binary was built without -tags mpi.
var ErrUnavailable = errors.New("mpi: this binary was built without MPI support: rebuild with -tags mpi (needs cgo and libopenmpi-dev)")

// New reports ErrUnavailable.
func New() (collective.Group, error) { return nil, ErrUnavailable }

// Split reports ErrUnavailable.
func Split(n int) (collective.Group, error) { return nil, ErrUnavailable }

// Finalize does nothing without MPI.
func Finalize() error { return nil }
