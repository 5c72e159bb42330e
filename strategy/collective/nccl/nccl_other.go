//go:build !linux

package nccl

import (
	"context"
	"errors"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
)

// ErrUnavailable means NCCL cannot be used here.
var ErrUnavailable = errors.New("nccl: unavailable: NCCL is supported on Linux only")

// Available reports ErrUnavailable.
func Available(cfg Config) error { return ErrUnavailable }

// New reports ErrUnavailable; rv is still the caller's to close.
func New(ctx context.Context, rv *rendezvous.Rendezvous, cfg Config) (collective.Group, error) {
	return nil, ErrUnavailable
}
