//go:build !linux

package shm

import (
	"context"
	"errors"
	"fmt"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
)

var errUnavailable = errors.New("shared memory unavailable")

// New reports that shared memory is not supported on this system.
func New(ctx context.Context, rv *rendezvous.Rendezvous) (collective.Group, error) {
	return nil, fmt.Errorf("shm: %w: only Linux is supported", errUnavailable)
}

// Auto returns fallback(ctx, rv): shared memory is Linux only. Who owns
// rv is as fallback says (tcp.NewGroup: the group it returns).
func Auto(ctx context.Context, rv *rendezvous.Rendezvous, fallback func(context.Context, *rendezvous.Rendezvous) (collective.Group, error)) (collective.Group, error) {
	return fallback(ctx, rv)
}
