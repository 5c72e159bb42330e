package tcp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
)

// pairInputs returns two ranks' buffers of n values whose sums and means
// show how they were computed: values of every magnitude, pairs whose sum
// overflows (a mean that halved each value first would stay finite), odd
// subnormals (halved first, each would round), zeros of both signs.
func pairInputs[T float32 | float64](n int) [2][]T {
	rng := rand.New(rand.NewPCG(1, 2))
	big, tiny := 0.75*math.MaxFloat64, math.SmallestNonzeroFloat64
	var zero T
	if _, ok := any(zero).(float32); ok {
		big, tiny = 0.75*math.MaxFloat32, math.SmallestNonzeroFloat32
	}
	var in [2][]T
	for r := range in {
		in[r] = make([]T, n)
		for i := range in[r] {
			switch i % 5 {
			case 0, 1:
				in[r][i] = T(rng.NormFloat64() * math.Ldexp(1, rng.IntN(60)-30))
			case 2:
				in[r][i] = T(big)
			case 3:
				in[r][i] = T(tiny) * T(2*rng.IntN(100)+1)
			case 4:
				in[r][i] = T(math.Copysign(0, float64(rng.IntN(2)*2-1)))
			}
		}
	}
	return in
}

// allReduceBoth runs one all-reduce of in (copied) on both ranks of the
// group cfgs describes and returns each rank's result.
func allReduceBoth[T float32 | float64](t *testing.T, cfgs []tcp.Config, in [2][]T, op collective.Op) [2][]T {
	t.Helper()
	groups := build(t, cfgs)
	var out [2][]T
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range out {
		out[r] = append([]T(nil), in[r]...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = groups[r].AllReduce(context.Background(), out[r], op)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

func bits[T float32 | float64](v T) uint64 {
	if f, ok := any(v).(float32); ok {
		return uint64(math.Float32bits(f))
	}
	return math.Float64bits(float64(v))
}

// TestPairGatherMatchesRing: with two ranks, gathering whole buffers (the
// default up to tcp.DefaultPairBytes) and the ring give every rank the
// same bits for Sum and Mean, in float32 and float64, as does the sum
// (and halving) of the two inputs in rank order: in place, a segment at a
// time inside a window (small socket buffers and segments), and from a
// copy (socket buffers too small for a segment in the window).
func TestPairGatherMatchesRing(t *testing.T) {
	const n = 100_003 // not a multiple of the vector width, 25 segments of 16 KB
	gather := map[string]func(c *tcp.Config){
		"in place":           func(c *tcp.Config) { c.SmallBytes = 1 << 30 },
		"in place, windowed": func(c *tcp.Config) { c.SmallBytes, c.SocketBuffer, c.SegmentBytes = 1<<30, 256<<10, 16<<10 },
		"from a copy":        func(c *tcp.Config) { c.SmallBytes, c.SocketBuffer = 1<<30, 64<<10 },
	}
	for _, op := range []collective.Op{collective.Sum, collective.Mean} {
		for name, set := range gather {
			t.Run(fmt.Sprintf("%v/%s/float32", op, name), func(t *testing.T) { pairMatchesRing[float32](t, n, op, set) })
			t.Run(fmt.Sprintf("%v/%s/float64", op, name), func(t *testing.T) { pairMatchesRing[float64](t, n, op, set) })
		}
	}
}

func pairMatchesRing[T float32 | float64](t *testing.T, n int, op collective.Op, set func(*tcp.Config)) {
	in := pairInputs[T](n)
	ringCfgs, gatherCfgs := configs(t, 2), configs(t, 2)
	for r := range 2 {
		ringCfgs[r].SmallBytes = -1
		set(&gatherCfgs[r])
	}
	ring := allReduceBoth(t, ringCfgs, in, op)
	gath := allReduceBoth(t, gatherCfgs, in, op)
	for i := range n {
		want := in[0][i] + in[1][i]
		if op == collective.Mean {
			want /= 2
		}
		for r := range 2 {
			if bits(ring[r][i]) != bits(want) || bits(gath[r][i]) != bits(want) {
				t.Fatalf("element %d (%v and %v), rank %d: the ring gives %v (%#x), gathering %v (%#x), want %v (%#x)",
					i, in[0][i], in[1][i], r, ring[r][i], bits(ring[r][i]), gath[r][i], bits(gath[r][i]), want, bits(want))
			}
		}
	}
}

// TestPairSmallBytesMismatch: two ranks, one on the default (gathering a
// 311,016-byte all-reduce) and one with SmallBytes at the default of more
// ranks (the ring for it), fail with ErrMismatch naming the setting.
func TestPairSmallBytesMismatch(t *testing.T) {
	cfgs := configs(t, 2)
	cfgs[1].SmallBytes = tcp.DefaultSmallBytes
	for r, err := range allReduceErrs(build(t, cfgs), 77754) {
		if !errors.Is(err, collective.ErrMismatch) || !strings.Contains(err.Error(), "SmallBytes") ||
			!strings.Contains(err.Error(), "gathering whole buffers") || !strings.Contains(err.Error(), "the ring") {
			t.Errorf("rank %d: got %v, want ErrMismatch naming both algorithms and SmallBytes", r, err)
		}
	}
}
