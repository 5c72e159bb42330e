package inproc

import (
	"context"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

var _ collective.Splitter = (*member)(nil)

// splitKey names one sub-group of one split: members count their splits,
// and every member of a group splits in the same place of its sequence.
type splitKey struct {
	split uint64
	color int
}

// Split implements collective.Splitter: the members of a sub-group share a
// new group, made by the first of them to get there, with the parent's
// timeout (fault injection stays with the parent).
func (m *member) Split(ctx context.Context, color, key int) (collective.Collective, error) {
	m.splits++
	split := m.splits
	return collective.SplitWith(ctx, m, color, key, func(ctx context.Context, l collective.Layout) (collective.Collective, error) {
		if l.Members == nil {
			return nil, nil
		}
		return &member{g: m.g.child(splitKey{split, l.Color}, len(l.Members)), rank: l.Rank}, nil
	})
}

// child returns the sub-group k of g, made by the first of its n members
// to ask and forgotten once all have.
func (g *group) child(k splitKey, n int) *group {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.children == nil {
		g.children = map[splitKey]*pending{}
	}
	p := g.children[k]
	if p == nil {
		p = &pending{g: newGroup(n, config{timeout: g.cfg.timeout, killAt: map[int]int{}, delay: map[int]time.Duration{}}), left: n}
		g.children[k] = p
	}
	if p.left--; p.left == 0 {
		delete(g.children, k)
	}
	return p.g
}

// pending is a sub-group some of whose members have yet to join it.
type pending struct {
	g    *group
	left int
}
