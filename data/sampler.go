package data

import (
	"errors"
	"fmt"
	"math/bits"
)

// Sampler decides which dataset indices one process visits in an epoch, and
// in what order.
type Sampler interface {
	// Order returns the dataset indices visited in this epoch by this
	// process, and for each whether it is padding (pad may be nil when no row
	// is). n is the dataset length. The result must depend only on the
	// sampler's fields, epoch and n.
	Order(epoch, n int) (idx []int, pad []bool)
}

// A sampler may also report how many indices Order would return without
// building them; the Loader uses it in NumBatches.
type sizer interface {
	NumSamples(n int) int
}

// A sampler may also check its own fields; NewLoader and Iter report the
// error instead of iterating.
type validator interface {
	Validate() error
}

// SequentialSampler visits 0, 1, ..., n-1 every epoch.
type SequentialSampler struct{}

// Order returns 0..n-1.
func (SequentialSampler) Order(epoch, n int) ([]int, []bool) {
	return iota(n), nil
}

// NumSamples is n.
func (SequentialSampler) NumSamples(n int) int { return max(n, 0) }

// RandomSampler visits a permutation of 0..n-1 determined only by (Seed,
// epoch): the same on every run and machine, different from epoch to epoch.
type RandomSampler struct{ Seed uint64 }

// Order returns the permutation for this epoch.
func (s RandomSampler) Order(epoch, n int) ([]int, []bool) {
	return Permutation(s.Seed, epoch, n), nil
}

// NumSamples is n.
func (RandomSampler) NumSamples(n int) int { return max(n, 0) }

// DistributedSampler gives each of World processes its own shard of the
// dataset, like torch.utils.data.DistributedSampler: the indices (shuffled by
// (Seed, epoch) when Shuffle is set, the same on every rank) are padded by
// repeating from the start to a multiple of World, or truncated to one when
// DropLast is set, or left uneven when NoPad is set (for evaluation, where
// duplicates would skew metrics); rank r then takes every World-th index
// starting at r. With padding every rank runs the same number of steps, so no
// rank waits for a collective that the others never start.
type DistributedSampler struct {
	Rank, World int
	Shuffle     bool
	Seed        uint64
	// DropLast truncates to a multiple of World instead of padding.
	DropLast bool
	// NoPad leaves the shards uneven (ranks may differ by one example). A
	// rank that would get no example (fewer examples than World) gets one
	// padded row, the first example again, so that it still runs the
	// evaluation step and learns the names of its metrics; padded rows are
	// left out of metrics and predictions.
	NoPad bool
	// Inner, when set, gives the order to shard instead of 0..n-1 or its
	// permutation: a sampler of the whole dataset (a weighted or a
	// class-balanced one), as Lightning's DistributedSamplerWrapper shards
	// a DataLoader's own sampler. Its order must be the same on every rank
	// (the Sampler contract: fields, epoch and n only); its length may
	// differ from n, and padding flags it returns are ignored. Shuffle must
	// then be false: the inner sampler decides the order.
	Inner Sampler
}

var _ Sampler = DistributedSampler{}

// Validate reports every problem with the sampler's fields.
func (s DistributedSampler) Validate() error {
	var errs []error
	if s.World < 1 {
		errs = append(errs, fmt.Errorf("World is %d: use the number of processes, 1 or more", s.World))
	}
	if s.Rank < 0 || (s.World >= 1 && s.Rank >= s.World) {
		errs = append(errs, fmt.Errorf("Rank is %d: use 0..World-1 (World is %d)", s.Rank, s.World))
	}
	if s.DropLast && s.NoPad {
		errs = append(errs, errors.New("DropLast and NoPad are both set: choose one (DropLast for training with equal shards, NoPad for evaluation)"))
	}
	if s.Inner != nil && s.Shuffle {
		errs = append(errs, fmt.Errorf("Shuffle is set beside Inner (%T), which decides the order: shuffle in the inner sampler and leave Shuffle false", s.Inner))
	}
	if v, ok := s.Inner.(validator); ok {
		if err := v.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("Inner: %w", err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("data.DistributedSampler: %w", errors.Join(errs...))
	}
	return nil
}

// NumSamples is the length of this rank's shard for a dataset of n examples
// (with Inner, of its order in epoch 0).
func (s DistributedSampler) NumSamples(n int) int {
	if s.Validate() != nil || n <= 0 {
		return 0
	}
	if s.Inner != nil {
		idx, _ := s.Order(0, n)
		return len(idx)
	}
	return s.numSamples(n)
}

// numSamples is the length of this rank's shard of n indices.
func (s DistributedSampler) numSamples(n int) int {
	switch {
	case s.NoPad:
		// ranks below n%World get one more.
		k := n / s.World
		if s.Rank < n%s.World {
			k++
		}
		return max(k, 1)
	case s.DropLast:
		return n / s.World
	default:
		return (n + s.World - 1) / s.World
	}
}

// Order returns this rank's shard for the epoch. An invalid sampler (see
// Validate) yields an empty shard.
func (s DistributedSampler) Order(epoch, n int) ([]int, []bool) {
	if s.Validate() != nil || n <= 0 {
		return []int{}, []bool{}
	}
	var all []int
	switch {
	case s.Inner != nil:
		all, _ = s.Inner.Order(epoch, n)
		if n = len(all); n == 0 {
			return []int{}, []bool{}
		}
	case s.Shuffle:
		all = Permutation(s.Seed, epoch, n)
	default:
		all = iota(n)
	}
	total := n
	switch {
	case s.DropLast:
		total = n / s.World * s.World
	case !s.NoPad:
		total = (n + s.World - 1) / s.World * s.World
	}
	k := s.numSamples(n)
	idx := make([]int, 0, k)
	pad := make([]bool, 0, k)
	for j := s.Rank; j < total; j += s.World {
		idx = append(idx, all[j%n])
		pad = append(pad, j >= n)
	}
	if len(idx) < k { // NoPad with fewer examples than ranks
		idx, pad = append(idx, all[0]), append(pad, true)
	}
	return idx, pad
}

func iota(n int) []int {
	idx := make([]int, max(n, 0))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// Permutation returns a permutation of 0..n-1 that depends only on (seed,
// epoch, n). It uses its own generator (SplitMix64 and Fisher-Yates with
// Lemire's unbiased bounded draw) so that the order never changes with the
// Go version.
func Permutation(seed uint64, epoch, n int) []int {
	idx := iota(n)
	r := newRNG(seed, epoch)
	for i := len(idx) - 1; i > 0; i-- {
		j := r.below(uint64(i + 1))
		idx[i], idx[j] = idx[j], idx[i]
	}
	return idx
}

type rng struct{ s uint64 }

func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func newRNG(seed uint64, epoch int) *rng {
	return &rng{s: mix64(seed ^ mix64(uint64(epoch)+0x632be59bd9b4e019))}
}

// next is SplitMix64.
func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix64(r.s)
}

// below returns a uniform value in [0, n), n > 0.
func (r *rng) below(n uint64) uint64 {
	hi, lo := bits.Mul64(r.next(), n)
	if lo < n {
		t := -n % n
		for lo < t {
			hi, lo = bits.Mul64(r.next(), n)
		}
	}
	return hi
}
