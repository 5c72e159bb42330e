//go:build !linux

package shm

import (
	"context"
	"errors"
	"fmt"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
)

var errUnavailable = errors.New("shared memory unavailable")

// New reports that shared memory is not supported on this system.
func New(ctx context.Context, rv *tcp.Rendezvous) (collective.Group, error) {
	return nil, fmt.Errorf("shm: %w: only Linux is supported", errUnavailable)
}

// Auto returns a TCP ring: shared memory is Linux only.
func Auto(ctx context.Context, rv *tcp.Rendezvous) (collective.Group, error) {
	r, err := tcp.NewRing(ctx, rv)
	if err != nil {
		return nil, err
	}
	return collective.WithAsync(r), nil
}
