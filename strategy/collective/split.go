package collective

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
)

// NoGroup is the color a rank passes to Split to join no sub-group
// (MPI_UNDEFINED).
const NoGroup = -1

// ErrNotMember: this rank is in none of the sub-groups it asked for (Split
// with NoGroup, or NewGroups without its rank); it gets no Collective.
var ErrNotMember = errors.New("rank is in no sub-group")

// maxSplitValue bounds colors and keys: they travel as float64 and must
// stay exact.
const maxSplitValue = 1 << 52

// Splitter is a Collective that can split its group into sub-groups, as
// MPI_Comm_split does: every rank of the group calls Split (in the same
// place of its sequence of operations); the ranks that pass the same color
// form one sub-group, ordered by key and then by their rank in this group.
// A rank that passes NoGroup gets nil and an error wrapping ErrNotMember.
// Every backend of this module implements it.
//
// A sub-group is a group of its own: its operations are independent of the
// parent's and of its siblings' (they may run at the same time, from other
// goroutines), it has its own connections and its own Close, and closing
// the parent leaves it usable. Its errors (*Error) name ranks of the group
// Split was first called on: Self and Peer are global ranks and Group lists
// the sub-group's members.
type Splitter interface {
	Split(ctx context.Context, color, key int) (Collective, error)
}

// Layout is a sub-group as the ranks of its parent agreed on it: what a
// backend's build function receives from SplitWith.
type Layout struct {
	// Color is the sub-group's color (NoGroup: this rank joins none).
	Color int
	// Members are the parent ranks of the sub-group, in the order of their
	// new ranks; nil for NoGroup.
	Members []int
	// Rank is this rank's index in Members (-1 for NoGroup).
	Rank int
}

// SplitWith implements Splitter.Split for a backend: it all-gathers every
// rank's color and key over parent (the backend's own, unwrapped group, so
// the exchange is ordered with its other operations), refuses bad values
// on every rank alike, computes the Layout and calls build on every rank,
// NoGroup ones included (a backend whose split is itself collective, MPI,
// needs them). build returns this rank's sub-group with ranks 0..n-1 (nil
// for NoGroup); SplitWith wraps it with WithAsync and with errors that name
// global ranks.
func SplitWith(ctx context.Context, parent Collective, color, key int, build func(context.Context, Layout) (Collective, error)) (Collective, error) {
	n, self := parent.Size(), parent.Rank()
	const w = 3 // ok, color, key
	send := []float64{1, float64(color), float64(key)}
	if color < NoGroup || color > maxSplitValue || key < -maxSplitValue || key > maxSplitValue {
		send[0] = 0
	}
	recv := make([]float64, w*n)
	if err := parent.AllGather(ctx, send, recv); err != nil {
		return nil, fmt.Errorf("collective: split: exchange colors and keys: %w", err)
	}
	for r := range n {
		if recv[w*r] != 1 {
			return nil, fmt.Errorf("collective: split: rank %d passed color %.0f and key %.0f: use a color of 0 to %d, or NoGroup (%d) to join no sub-group, and a key of magnitude at most %d", r, recv[w*r+1], recv[w*r+2], maxSplitValue, NoGroup, maxSplitValue)
		}
	}
	l := Layout{Color: color, Rank: -1}
	// This rank's sub-group: the ranks that passed its color, by key then
	// rank (as MPI_Comm_split orders them).
	type member struct{ key, rank int }
	var ms []member
	for r := range n {
		if c := int(recv[w*r+1]); c == color && c != NoGroup {
			ms = append(ms, member{int(recv[w*r+2]), r})
		}
	}
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].key != ms[j].key {
			return ms[i].key < ms[j].key
		}
		return ms[i].rank < ms[j].rank
	})
	for _, m := range ms {
		if m.rank == self {
			l.Rank = len(l.Members)
		}
		l.Members = append(l.Members, m.rank)
	}
	sub, err := build(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("collective: split: rank %d: sub-group of parent ranks %v: %w", self, l.Members, err)
	}
	if color == NoGroup {
		if sub != nil {
			sub.Close()
		}
		return nil, fmt.Errorf("collective: split: rank %d: %w: it passed NoGroup", self, ErrNotMember)
	}
	if sub.Rank() != l.Rank || sub.Size() != len(l.Members) {
		sub.Close()
		return nil, fmt.Errorf("collective: split: rank %d: the backend built rank %d of %d, want rank %d of %d", self, sub.Rank(), sub.Size(), l.Rank, len(l.Members))
	}
	return &subgroup{g: WithAsync(sub), ranks: l.Members}, nil
}

// NewGroups splits c into the sub-groups listed, by rank of c, as
// torch.distributed.new_group(ranks) does for each list: every rank of c
// calls it with the same lists in the same order, and gets the sub-group
// its rank is in, where its new rank is its position in the list. A rank
// in no list gets nil and an error wrapping ErrNotMember. Lists that name a
// rank twice or outside c, or that differ between ranks, are an error on
// every rank, and c stays usable.
func NewGroups(ctx context.Context, c Collective, groups [][]int) (Collective, error) {
	s, ok := c.(Splitter)
	if !ok {
		return nil, fmt.Errorf("collective: NewGroups: %T cannot split its group (it does not implement collective.Splitter): build it with one of this module's backends", c)
	}
	n, self := c.Size(), c.Rank()
	color, key := NoGroup, 0
	problem := checkGroups(groups, n)
	for i, g := range groups {
		if j := slices.Index(g, self); j >= 0 && color == NoGroup {
			color, key = i, j
		}
	}
	// Every rank learns whether every other passed valid lists, and the
	// same ones, before any of them splits: a rank alone in its error
	// would leave the others waiting in Split.
	h := fnv.New64a()
	fmt.Fprint(h, groups)
	send := []float64{1, float64(h.Sum64() >> 12)}
	if problem != nil {
		send[0] = 0
	}
	recv := make([]float64, 2*n)
	if err := c.AllGather(ctx, send, recv); err != nil {
		return nil, fmt.Errorf("collective: NewGroups: compare the lists: %w", err)
	}
	if problem != nil {
		return nil, fmt.Errorf("collective: NewGroups: rank %d: groups %v: %w", self, groups, problem)
	}
	for r := range n {
		switch {
		case recv[2*r] != 1:
			return nil, fmt.Errorf("collective: NewGroups: rank %d refused its lists (its own error says why): pass every rank the same valid lists", r)
		case recv[2*r+1] != send[1]:
			return nil, fmt.Errorf("collective: NewGroups: rank %d passed other lists than rank %d's %v: every rank must pass the same lists, in the same order", r, self, groups)
		}
	}
	sub, err := s.Split(ctx, color, key)
	if errors.Is(err, ErrNotMember) {
		return nil, fmt.Errorf("collective: NewGroups: rank %d is in none of the groups %v: %w", self, groups, ErrNotMember)
	}
	return sub, err
}

// Subgroup is NewGroups with one list: the ranks of c listed make a
// sub-group (ranks in the list's order), the others get an error wrapping
// ErrNotMember. Every rank of c calls it with the same list.
func Subgroup(ctx context.Context, c Collective, ranks []int) (Collective, error) {
	return NewGroups(ctx, c, [][]int{ranks})
}

func checkGroups(groups [][]int, n int) error {
	var errs []error
	seen := map[int]int{}
	for i, g := range groups {
		if len(g) == 0 {
			errs = append(errs, fmt.Errorf("list %d is empty: give every sub-group at least one rank", i))
		}
		for _, r := range g {
			if r < 0 || r >= n {
				errs = append(errs, fmt.Errorf("list %d names rank %d, outside the group of %d ranks: use 0..%d", i, r, n, n-1))
				continue
			}
			if j, ok := seen[r]; ok {
				errs = append(errs, fmt.Errorf("rank %d is named twice (lists %d and %d): a rank can be in one sub-group only, once", r, j, i))
				continue
			}
			seen[r] = i
		}
	}
	return errors.Join(errs...)
}

// subgroup is a split's sub-group as callers see it: its backend's group,
// ordered by WithAsync, whose errors are translated to the ranks of the
// group the first split was made from.
type subgroup struct {
	g     Group
	ranks []int // global rank of each rank of g
}

var (
	_ Group    = (*subgroup)(nil)
	_ Splitter = (*subgroup)(nil)
)

// global translates a *Error of g to global ranks.
func (s *subgroup) global(err error) error {
	var e *Error
	if err == nil || !errors.As(err, &e) || e.Group != nil {
		return err
	}
	t := *e
	t.Group = s.ranks
	if t.Self >= 0 && t.Self < len(s.ranks) {
		t.Self = s.ranks[t.Self]
	}
	if t.Peer >= 0 && t.Peer < len(s.ranks) {
		t.Peer = s.ranks[t.Peer]
	}
	if err == error(e) {
		return &t
	}
	return &translated{err: err, e: &t}
}

// translated is an error that wraps a *Error deeper in its chain: As hands
// out the translated copy, Unwrap the original chain.
type translated struct {
	err error
	e   *Error
}

func (t *translated) Error() string {
	return fmt.Sprintf("%s (sub-group of global ranks %v)", t.err, t.e.Group)
}
func (t *translated) Unwrap() error { return t.err }
func (t *translated) As(target any) bool {
	if p, ok := target.(**Error); ok {
		*p = t.e
		return true
	}
	return false
}

type subHandle struct {
	h Handle
	s *subgroup
}

func (h subHandle) Wait() error { return h.s.global(h.h.Wait()) }

func (s *subgroup) Rank() int { return s.g.Rank() }
func (s *subgroup) Size() int { return s.g.Size() }

func (s *subgroup) AllReduce(ctx context.Context, buf any, op Op) error {
	return s.global(s.g.AllReduce(ctx, buf, op))
}
func (s *subgroup) Broadcast(ctx context.Context, buf any, root int) error {
	return s.global(s.g.Broadcast(ctx, buf, root))
}
func (s *subgroup) AllGather(ctx context.Context, send, recv any) error {
	return s.global(s.g.AllGather(ctx, send, recv))
}
func (s *subgroup) ReduceScatter(ctx context.Context, send, recv any, op Op) error {
	return s.global(s.g.ReduceScatter(ctx, send, recv, op))
}
func (s *subgroup) Barrier(ctx context.Context) error { return s.global(s.g.Barrier(ctx)) }
func (s *subgroup) Close() error                      { return s.global(s.g.Close()) }

func (s *subgroup) AllReduceAsync(ctx context.Context, buf any, op Op) Handle {
	return subHandle{s.g.AllReduceAsync(ctx, buf, op), s}
}
func (s *subgroup) AllGatherAsync(ctx context.Context, send, recv any) Handle {
	return subHandle{s.g.AllGatherAsync(ctx, send, recv), s}
}
func (s *subgroup) ReduceScatterAsync(ctx context.Context, send, recv any, op Op) Handle {
	return subHandle{s.g.ReduceScatterAsync(ctx, send, recv, op), s}
}

// Split splits the sub-group further; the result's ranks stay global.
func (s *subgroup) Split(ctx context.Context, color, key int) (Collective, error) {
	sp, ok := s.g.(Splitter)
	if !ok {
		return nil, fmt.Errorf("collective: split: %T cannot split its group", s.g)
	}
	c, err := sp.Split(ctx, color, key)
	if err != nil {
		return nil, s.global(err)
	}
	if sub, ok := c.(*subgroup); ok {
		ranks := make([]int, len(sub.ranks))
		for i, r := range sub.ranks {
			ranks[i] = s.ranks[r]
		}
		sub.ranks = ranks
	}
	return c, nil
}

// Unwrap returns the backend's group (for backend-specific abilities).
func (s *subgroup) Unwrap() Collective { return s.g }

// Members returns the global ranks of c's members, in the order of their
// ranks in c: those Split recorded for a sub-group, 0..Size-1 otherwise.
func Members(c Collective) []int {
	if s, ok := c.(*subgroup); ok {
		return slices.Clone(s.ranks)
	}
	out := make([]int, c.Size())
	for i := range out {
		out[i] = i
	}
	return out
}

func rankList(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	return "[" + strings.Join(s, " ") + "]"
}
