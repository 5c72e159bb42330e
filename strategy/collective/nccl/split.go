//go:build linux

package nccl

import (
	"context"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
)

var _ collective.Splitter = (*Comm)(nil)

// Split implements collective.Splitter. Each sub-group meets anew
// (rendezvous.Split, its leader's address all-gathered over this
// communicator) and makes a communicator of its own with
// ncclCommInitRank, from a unique id its rank 0 hands out, on this Comm's
// device and settings. ncclCommSplit would skip the meeting, but it needs
// NCCL 2.18 or later; this works with every NCCL the package loads.
func (c *Comm) Split(ctx context.Context, color, key int) (collective.Collective, error) {
	return rendezvous.SplitGroup(ctx, c.rv, c, color, key, func(ctx context.Context, rv *rendezvous.Rendezvous) (collective.Collective, error) {
		sub, err := NewComm(ctx, rv, c.cfg)
		rv.Close() // NCCL needs the meeting only to hand out the unique id
		if err != nil {
			return nil, err
		}
		return sub, nil
	})
}
