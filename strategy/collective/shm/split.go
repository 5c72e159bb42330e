//go:build linux

package shm

import (
	"context"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
)

var _ collective.Splitter = (*Group)(nil)

// Split implements collective.Splitter: each sub-group meets anew
// (rendezvous.Split, its leader's address sent through this segment) and
// maps a segment of its own, watched by its own star of connections.
func (g *Group) Split(ctx context.Context, color, key int) (collective.Collective, error) {
	return rendezvous.SplitGroup(ctx, g.rv, g, color, key, func(ctx context.Context, rv *rendezvous.Rendezvous) (collective.Collective, error) {
		s, err := open(ctx, rv)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}
