package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/device/fakedevice"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// ddpRanks makes n in-process DDP ranks over inproc and fake devices.
func ddpRanks(t testing.TB, n int, bucketBytes int, gopts []inproc.Option, dopts ...fakedevice.Option) []strategy.Strategy {
	t.Helper()
	return strategytest.Ranks(t, n, gopts, dopts, func(g collective.Collective, d device.Device) (strategy.Strategy, error) {
		return ddp.NewDDP(ddp.DDPConfig{Group: g, Device: d, BucketBytes: bucketBytes, Timeout: 20 * time.Second})
	})
}

func TestDDPConformance(t *testing.T) {
	for _, bucket := range []int{0, 64} { // one bucket; many small ones (64 B = 16 floats)
		t.Run(fmt.Sprintf("bucket=%d", bucket), func(t *testing.T) {
			strategytest.RunAll(t, func(t testing.TB, n int) []strategy.Strategy { return ddpRanks(t, n, bucket, nil) })
		})
	}
}

func TestDDPBucketsSplitTheModel(t *testing.T) {
	ranks := ddpRanks(t, 2, 64, nil)
	ctx := context.Background()
	ds, _ := strategytest.Regression(4, 5, 3, 1)
	if err := strategytest.SetupAll(ctx, ranks, &strategytest.MLP{In: 5, Hidden: 8, Out: 3}, ds.Fields(), 1); err != nil {
		t.Fatal(err)
	}
	defer strategytest.Each(ranks, func(_ int, s strategy.Strategy) error { return s.Teardown(ctx) })
	bs := ranks[0].(*ddp.DDP).Buckets()
	// w1 5x8=40, b1 8, w2 8x3=24, b2 3: reverse order with 16-float buckets:
	// b2 (3) alone would grow with w2 (24) past 16, so b2 | w2 | b1 | w1.
	var got []string
	for _, b := range bs {
		got = append(got, fmt.Sprintf("%v[%d,%d)", b.Params, b.Lo, b.Hi))
	}
	want := "[b2][72,75) [w2][48,72) [b1][40,48) [w1][0,40)"
	if strings.Join(got, " ") != want {
		t.Fatalf("buckets %s, want %s", strings.Join(got, " "), want)
	}
}

// killed checks that every surviving rank failed with an error naming the
// victim.
func killed(t *testing.T, err error, n, victim int, start time.Time) {
	t.Helper()
	if err == nil {
		t.Fatal("training went on although a rank died")
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the survivors took %v to notice", d)
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("error %v is not one per rank", err)
	}
	errs := joined.Unwrap()
	seen := map[int]bool{}
	for _, e := range errs {
		msg := e.Error()
		var rank int
		fmt.Sscanf(msg, "rank %d:", &rank)
		seen[rank] = true
		if rank != victim && !strings.Contains(msg, fmt.Sprintf("rank %d", victim)) {
			t.Errorf("rank %d's error does not name rank %d: %v", rank, victim, msg)
		}
	}
	for r := 0; r < n; r++ {
		if !seen[r] {
			t.Errorf("rank %d returned no error", r)
		}
	}
}

func TestDDPKilledRankIsNamed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gopts  []inproc.Option
		dopts  []fakedevice.Option
		victim int
	}{
		// Collective operations: 1 broadcast at setup, then per step a
		// buffer broadcast and one all-reduce per bucket.
		{"collective", []inproc.Option{inproc.KillRank(1, 4)}, nil, 1},
		{"device", nil, []fakedevice.Option{fakedevice.FailAfter(2, 2)}, 2},
		{"rank0-device", nil, []fakedevice.Option{fakedevice.FailAfter(0, 1)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3
			ranks := ddpRanks(t, n, 0, tc.gopts, tc.dopts...)
			ctx := context.Background()
			ds, _ := strategytest.Regression(60, 5, 3, 1)
			if err := strategytest.SetupAll(ctx, ranks, &strategytest.MLP{In: 5, Hidden: 8, Out: 3}, ds.Fields(), 1); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var err error
			for k := 0; k < 10 && err == nil; k++ {
				b, _ := strategytest.Rows(ds, k*6, k*6+6)
				_, _, err = strategytest.Step(ctx, ranks, strategy.OptimizerOptions{}, b)
			}
			killed(t, err, n, tc.victim, start)
			if tc.name == "collective" && !errors.Is(err, collective.ErrPeerLost) {
				t.Errorf("error does not wrap collective.ErrPeerLost: %v", err)
			}
		})
	}
}
