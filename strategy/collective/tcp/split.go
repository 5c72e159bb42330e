package tcp

import (
	"context"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
)

var _ collective.Splitter = (*Ring)(nil)

// Split implements collective.Splitter: each sub-group meets anew
// (rendezvous.Split, its leader's address sent over this ring) and
// connects a ring of its own, with this ring's settings.
func (g *Ring) Split(ctx context.Context, color, key int) (collective.Collective, error) {
	return rendezvous.SplitGroup(ctx, g.rv, g, color, key, func(ctx context.Context, rv *rendezvous.Rendezvous) (collective.Collective, error) {
		cfg := g.cfg
		cfg.Rank, cfg.Size = rv.Rank(), rv.Size()
		return nilIfErr(newRing(ctx, rv, cfg))
	})
}

// nilIfErr keeps a nil *Ring from becoming a non-nil Collective.
func nilIfErr(r *Ring, err error) (collective.Collective, error) {
	if err != nil {
		return nil, err
	}
	return r, nil
}
