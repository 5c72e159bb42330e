package collectivetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// splitCases runs the sub-group cases (collective.Splitter, NewGroups) on
// groups of up to o.MaxRanks ranks.
func (s suite) splitCases(t *testing.T) {
	n := min(4, s.o.MaxRanks)
	if n < 2 {
		t.Skip("sub-groups need 2 ranks or more")
	}
	t.Run("Layout", func(t *testing.T) { s.splitLayout(t, n) })
	t.Run("RankCases", func(t *testing.T) { s.splitRankCases(t, s.o.MaxRanks) })
	t.Run("Concurrent", func(t *testing.T) { s.splitConcurrent(t, n) })
	t.Run("NotMember", func(t *testing.T) { s.splitNotMember(t, n) })
	t.Run("BadInput", func(t *testing.T) { s.splitBadInput(t, n) })
	t.Run("AgainstAllReduce", func(t *testing.T) { s.splitAgainstAllReduce(t, n) })
	if n >= 3 && !s.o.SkipKill {
		t.Run("ClosedPeer", func(t *testing.T) { s.splitClosedPeer(t, n) })
	}
}

// splitAll calls split on every rank at once and fails the test on any
// error.
func (s suite) splitAll(t *testing.T, cs []collective.Collective, split func(ctx context.Context, c collective.Collective) (collective.Collective, error)) []collective.Collective {
	t.Helper()
	subs := make([]collective.Collective, len(cs))
	s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
		sub, err := split(ctx, c)
		subs[slices.Index(cs, c)] = sub // cs may be sub-groups: index, not rank
		return err
	})
	t.Cleanup(func() {
		for _, sub := range subs {
			if sub != nil {
				sub.Close()
			}
		}
	})
	return subs
}

func splitter(c collective.Collective) (collective.Splitter, error) {
	sp, ok := c.(collective.Splitter)
	if !ok {
		return nil, fmt.Errorf("%T does not implement collective.Splitter", c)
	}
	return sp, nil
}

// gatherRanks all-gathers each member's global rank over sub and checks
// that they come in the order Members reports, and equal want.
func gatherRanks(ctx context.Context, sub collective.Collective, want []int) error {
	if got := collective.Members(sub); !slices.Equal(got, want) {
		return fmt.Errorf("sub-group members %v, want %v", got, want)
	}
	recv := make([]float64, sub.Size())
	if err := sub.AllGather(ctx, []float64{float64(want[sub.Rank()])}, recv); err != nil {
		return err
	}
	for i, v := range recv {
		if int(v) != want[i] {
			return fmt.Errorf("all-gather over the sub-group gave global ranks %v, want %v", recv, want)
		}
	}
	return nil
}

// splitLayout: Split by parity with decreasing keys orders each sub-group
// by key; a sub-group splits again and its members stay global ranks.
func (s suite) splitLayout(t *testing.T, n int) {
	cs := s.group(t, n)
	members := func(color int) []int {
		var m []int
		for r := n - 1; r >= 0; r-- {
			if r%2 == color {
				m = append(m, r)
			}
		}
		return m
	}
	subs := s.splitAll(t, cs, func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
		sp, err := splitter(c)
		if err != nil {
			return nil, err
		}
		return sp.Split(ctx, c.Rank()%2, -c.Rank())
	})
	s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
		r, sub := c.Rank(), subs[c.Rank()]
		want := members(r % 2)
		if sub.Size() != len(want) || sub.Rank() != slices.Index(want, r) {
			return fmt.Errorf("sub-group rank %d of %d, want %d of %d (members %v)", sub.Rank(), sub.Size(), slices.Index(want, r), len(want), want)
		}
		return gatherRanks(ctx, sub, want)
	})
	// Split a sub-group again: its first member alone, the rest together.
	nested := s.splitAll(t, subs, func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
		sp, err := splitter(c)
		if err != nil {
			return nil, err
		}
		return sp.Split(ctx, min(c.Rank(), 1), 0)
	})
	s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
		r := c.Rank()
		m := members(r % 2)
		want := m[:1]
		if m[0] != r {
			want = m[1:]
		}
		return gatherRanks(ctx, nested[r], want)
	})
}

// splitGroups are NewGroups lists over n ranks: two sub-groups of uneven
// sizes, neither in rank order (one rank alone for n = 2).
func splitGroups(n int) [][]int {
	var a, b []int
	for r := n - 1; r >= 0; r-- {
		if r%2 == 0 {
			a = append(a, r)
		} else {
			b = append([]int{r}, b...)
		}
	}
	if n == 2 {
		return [][]int{{1}, {0}}
	}
	return [][]int{a, b}
}

// splitRankCases runs every rank case of the suite on the sub-groups of
// NewGroups, all sub-groups at once.
func (s suite) splitRankCases(t *testing.T, n int) {
	cs := s.group(t, n)
	groups := splitGroups(n)
	subs := s.splitAll(t, cs, func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
		return collective.NewGroups(ctx, c, groups)
	})
	for _, rc := range rankCases {
		t.Run(rc.name, func(t *testing.T) {
			s.mustEach(t, subs, func(ctx context.Context, sub collective.Collective) error { return rc.run(t, ctx, sub) })
		})
	}
}

// splitConcurrent: on every rank, one goroutine all-reduces over the
// parent while another all-reduces over its sub-group; the sub-groups are
// independent of the parent and of each other, so none waits for another.
func (s suite) splitConcurrent(t *testing.T, n int) {
	cs := s.group(t, n)
	groups := [][]int{}
	for lo := 0; lo < n; lo += 2 {
		groups = append(groups, []int{lo, min(lo+1, n-1)}[:min(2, n-lo)])
	}
	subs := s.splitAll(t, cs, func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
		return collective.NewGroups(ctx, c, groups)
	})
	s.mustEach(t, cs, func(ctx context.Context, c collective.Collective) error {
		return concurrentRank(ctx, c, subs[c.Rank()], groups[c.Rank()/2])
	})
}

// concurrentRank all-reduces over the parent c on this goroutine while
// another all-reduces over sub (of global ranks members), and checks both.
func concurrentRank(ctx context.Context, c, sub collective.Collective, members []int) error {
	const rounds = 20
	n, r := c.Size(), c.Rank()
	var wg sync.WaitGroup
	var subErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range rounds {
			buf := []float64{float64(r*100 + i)}
			if subErr = sub.AllReduce(ctx, buf, collective.Sum); subErr != nil {
				return
			}
			want := 0.0
			for _, m := range members {
				want += float64(m*100 + i)
			}
			if buf[0] != want {
				subErr = fmt.Errorf("sub-group all-reduce %d: %v, want %v", i, buf[0], want)
				return
			}
		}
	}()
	var err error
	for i := range rounds {
		buf := []float64{float64(r + i)}
		if err = c.AllReduce(ctx, buf, collective.Sum); err != nil {
			break
		}
		if want := float64(n*(n-1)/2 + n*i); buf[0] != want {
			err = fmt.Errorf("parent all-reduce %d: %v, want %v", i, buf[0], want)
			break
		}
	}
	wg.Wait()
	return errors.Join(err, subErr)
}

// parentWorks checks that every rank of cs can still all-reduce.
func (s suite) parentWorks(t *testing.T, cs []collective.Collective, after string) {
	t.Helper()
	n := len(cs)
	bufs := make([][]float64, n)
	errs := s.each(cs, func(ctx context.Context, c collective.Collective) error {
		bufs[c.Rank()] = []float64{float64(c.Rank())}
		return c.AllReduce(ctx, bufs[c.Rank()], collective.Sum)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: all-reduce over the parent after %s: %v", r, after, err)
		}
		if want := float64(n * (n - 1) / 2); bufs[r][0] != want {
			t.Errorf("rank %d: all-reduce over the parent after %s: %v, want %v", r, after, bufs[r][0], want)
		}
	}
}

// splitNotMember: Subgroup without the last rank gives it ErrNotMember and
// the others a group of n-1; the parent goes on.
func (s suite) splitNotMember(t *testing.T, n int) {
	cs := s.group(t, n)
	list := make([]int, n-1)
	for i := range list {
		list[i] = i
	}
	subs := make([]collective.Collective, n)
	errs := s.each(cs, func(ctx context.Context, c collective.Collective) error {
		sub, err := collective.Subgroup(ctx, c, list)
		subs[c.Rank()] = sub
		return err
	})
	t.Cleanup(func() {
		for _, sub := range subs {
			if sub != nil {
				sub.Close()
			}
		}
	})
	for r, err := range errs {
		switch {
		case r == n-1 && (!errors.Is(err, collective.ErrNotMember) || subs[r] != nil):
			t.Errorf("rank %d (in no list): got %v and %v, want nil and an error wrapping ErrNotMember", r, subs[r], err)
		case r < n-1 && err != nil:
			t.Errorf("rank %d: %v", r, err)
		case r < n-1 && (subs[r].Size() != n-1 || subs[r].Rank() != r):
			t.Errorf("rank %d: sub-group rank %d of %d, want %d of %d", r, subs[r].Rank(), subs[r].Size(), r, n-1)
		}
	}
	if t.Failed() {
		return
	}
	s.mustEach(t, subs[:n-1], func(ctx context.Context, sub collective.Collective) error { return gatherRanks(ctx, sub, list) })
	s.parentWorks(t, cs, "a split that left a rank out")
}

// splitBadInput: lists or colors that are wrong on some rank or differ
// between ranks are an error on every rank, naming the value, and the
// parent stays usable.
func (s suite) splitBadInput(t *testing.T, n int) {
	for _, tc := range []struct {
		name  string
		split func(ctx context.Context, c collective.Collective) (collective.Collective, error)
		want  []string // in every rank's error
	}{
		{"RankTwice", func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
			return collective.NewGroups(ctx, c, [][]int{{0, 1}, {1}})
		}, []string{"rank 1 is named twice"}},
		{"RankOutside", func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
			return collective.NewGroups(ctx, c, [][]int{{0, n}})
		}, []string{fmt.Sprintf("rank %d, outside the group of %d ranks", n, n)}},
		{"EmptyList", func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
			return collective.NewGroups(ctx, c, [][]int{{}, {0}})
		}, []string{"list 0 is empty"}},
		{"OnlyOneRankWrong", func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
			if c.Rank() == n-1 {
				return collective.NewGroups(ctx, c, [][]int{{0, -1}})
			}
			return collective.NewGroups(ctx, c, [][]int{{0, 1}})
		}, []string{"rank -1"}},
		{"OrderDiffers", func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
			if c.Rank() == 0 {
				return collective.NewGroups(ctx, c, [][]int{{1, 0}})
			}
			return collective.NewGroups(ctx, c, [][]int{{0, 1}})
		}, []string{"other lists", "same lists, in the same order"}},
		{"ListsDiffer", func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
			if c.Rank() == n-1 {
				return collective.NewGroups(ctx, c, [][]int{{0}, {1}})
			}
			return collective.NewGroups(ctx, c, [][]int{{0, 1}})
		}, []string{"other lists"}},
		{"BadColor", func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
			sp, err := splitter(c)
			if err != nil {
				return nil, err
			}
			color := 0
			if c.Rank() == n-1 {
				color = -5
			}
			return sp.Split(ctx, color, 0)
		}, []string{fmt.Sprintf("rank %d passed color -5", n-1), "NoGroup"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := s.group(t, n)
			subs := make([]collective.Collective, n)
			errs := s.each(cs, func(ctx context.Context, c collective.Collective) error {
				sub, err := tc.split(ctx, c)
				subs[c.Rank()] = sub
				return err
			})
			for r, err := range errs {
				if subs[r] != nil {
					subs[r].Close()
					t.Errorf("rank %d: got a sub-group from bad input", r)
				}
				if err == nil {
					t.Errorf("rank %d: no error", r)
					continue
				}
				if errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("rank %d: only the test's deadline stopped it: %v", r, err)
				}
				// A rank that passed valid lists learns of another's bad
				// ones; the ranks with bad lists say what is wrong.
				msg := err.Error()
				if strings.Contains(msg, "refused its lists") {
					continue
				}
				for _, w := range tc.want {
					if !strings.Contains(msg, w) {
						t.Errorf("rank %d: error %q does not say %q", r, msg, w)
					}
				}
			}
			s.parentWorks(t, cs, "bad split input")
		})
	}
}

// splitAgainstAllReduce: a rank that splits while the others all-reduce
// is a mismatch on every rank, not a hang.
func (s suite) splitAgainstAllReduce(t *testing.T, n int) {
	cs := s.group(t, n)
	if _, err := splitter(cs[0]); err != nil {
		t.Fatal(err) // rank 0 alone would fail, leaving the others waiting
	}
	errs := s.each(cs, func(ctx context.Context, c collective.Collective) error {
		if c.Rank() == 0 {
			sp, err := splitter(c)
			if err != nil {
				return err
			}
			sub, err := sp.Split(ctx, 0, 0)
			if sub != nil {
				sub.Close()
			}
			return err
		}
		return c.AllReduce(ctx, make([]float32, 3), collective.Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, collective.ErrMismatch) {
			t.Errorf("rank %d: got %v, want an error wrapping ErrMismatch", r, err)
		}
	}
}

// splitClosedPeer: a closed member of a sub-group is an error on the other
// members naming its global rank (and the sub-group); the sibling sub-group
// and the parent go on.
func (s suite) splitClosedPeer(t *testing.T, n int) {
	cs := s.group(t, n)
	// Sub-groups {0, .., n-3} and {n-2, n-1}; the closed rank is n-1.
	groups := [][]int{{}, {n - 2, n - 1}}
	for r := range n - 2 {
		groups[0] = append(groups[0], r)
	}
	subs := s.splitAll(t, cs, func(ctx context.Context, c collective.Collective) (collective.Collective, error) {
		return collective.NewGroups(ctx, c, groups)
	})
	s.mustEach(t, subs, func(ctx context.Context, sub collective.Collective) error { return sub.Barrier(ctx) })
	dead := n - 1
	if err := subs[dead].Close(); err != nil {
		t.Fatalf("close rank %d's sub-group: %v", dead, err)
	}
	errs := s.each(subs[:dead], func(ctx context.Context, sub collective.Collective) error {
		return sub.AllReduce(ctx, fill(collective.Float32, 1<<12, sub.Rank(), 0), collective.Sum)
	})
	for r, err := range errs {
		if r < n-2 {
			if err != nil {
				t.Errorf("rank %d: the sibling sub-group failed: %v", r, err)
			}
			continue
		}
		var e *collective.Error
		switch {
		case err == nil:
			t.Errorf("rank %d: all-reduce succeeded without rank %d", r, dead)
		case errors.Is(err, context.DeadlineExceeded):
			t.Errorf("rank %d: only the test's deadline stopped it: %v", r, err)
		case !errors.As(err, &e) || e.Peer != dead || e.Self != r || !slices.Equal(e.Group, groups[1]):
			t.Errorf("rank %d: error %q: want one of type *collective.Error with Self %d, Peer %d (global ranks) and Group %v", r, err, r, dead, groups[1])
		case !strings.Contains(err.Error(), fmt.Sprintf("rank %d of sub-group [%d %d]", r, n-2, n-1)):
			t.Errorf("rank %d: error %q does not name the sub-group", r, err)
		}
	}
	s.parentWorks(t, cs, "a sub-group lost a rank")
}

// splitRank is the sub-group case of RunRank: the ranks split in two by
// NewGroups, run every rank case on their sub-group, and refuse a list
// that names a rank twice.
func splitRank(t *testing.T, c collective.Collective) {
	if c.Size() < 2 {
		t.Skip("sub-groups need 2 ranks or more")
	}
	ctx := context.Background()
	groups := splitGroups(c.Size())
	sub, err := collective.NewGroups(ctx, c, groups)
	if err != nil {
		t.Fatalf("rank %d: %v", c.Rank(), err)
	}
	defer sub.Close()
	var members []int
	for _, g := range groups {
		if slices.Contains(g, c.Rank()) {
			members = g
		}
	}
	if err := gatherRanks(ctx, sub, members); err != nil {
		t.Fatalf("rank %d: %v", c.Rank(), err)
	}
	t.Run("Concurrent", func(t *testing.T) {
		if err := concurrentRank(ctx, c, sub, members); err != nil {
			t.Fatalf("rank %d: %v", c.Rank(), err)
		}
	})
	for _, rc := range rankCases {
		t.Run(rc.name, func(t *testing.T) {
			if err := rc.run(t, ctx, sub); err != nil {
				t.Fatalf("rank %d (global %d): %v", sub.Rank(), c.Rank(), err)
			}
		})
	}
	_, err = collective.NewGroups(ctx, c, [][]int{{0, 1}, {1}})
	if err == nil || !strings.Contains(err.Error(), "rank 1 is named twice") {
		t.Errorf("rank %d: lists naming rank 1 twice: got %v, want an error saying so", c.Rank(), err)
	}
	buf := []float64{1}
	if err := c.AllReduce(ctx, buf, collective.Sum); err != nil || buf[0] != float64(c.Size()) {
		t.Errorf("rank %d: all-reduce over the parent after the splits: %v, %v", c.Rank(), buf[0], err)
	}
}
