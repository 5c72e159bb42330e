package trainer_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/trainer"
)

// stepsSeen records the last global step a rank finished.
type stepsSeen struct {
	mu   sync.Mutex
	last int
}

func (c *stepsSeen) Name() string { return "stepsSeen" }
func (c *stepsSeen) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	c.mu.Lock()
	c.last = s.GlobalStep
	c.mu.Unlock()
	return nil
}

// A rank lost in the middle of a multi-rank Fit is, on the rank that
// survives, an error a program branches on as the collective package
// documents: errors.Is(err, collective.ErrPeerLost), and collective.PeerOf
// names the lost rank, through every wrapping of the strategy and the
// trainer.
func TestFitLosingAPeerMatchesErrPeerLost(t *testing.T) {
	groups, err := inproc.NewGroup(2, inproc.KillRank(1, 30))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	errs := make([]error, 2)
	seen := make([]*stepsSeen, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		seen[r] = &stepsSeen{}
		d, err := ddp.NewDDP(ddp.DDPConfig{Group: groups[r]})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 5, DefaultRootDir: root, StrategyImpl: d, HandleSignals: trainer.Bool(false), Callbacks: []trainer.Callback{seen[r]}}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			errs[r] = tr.Fit(context.Background(), newEvalReg(), loader(t, regression(t, 64, 0.01, 1), 8, false, false), nil)
		})
	}
	wg.Wait()
	if seen[0].last == 0 {
		t.Fatalf("rank 0 finished no step before rank 1 was lost (%v): the kill should come mid-training", errs[0])
	}
	if !errors.Is(errs[0], collective.ErrPeerLost) {
		t.Errorf("rank 0's Fit: %v\nwant an error matching collective.ErrPeerLost", errs[0])
	}
	var ce *collective.Error
	if !errors.As(errs[0], &ce) {
		t.Errorf("rank 0's Fit: %v\nwant a *collective.Error inside", errs[0])
	}
	if p, ok := collective.PeerOf(errs[0]); !ok || p != 1 {
		t.Errorf("collective.PeerOf(rank 0's error) = %d, %v; want rank 1", p, ok)
	}
	if errs[1] == nil {
		t.Errorf("rank 1, killed, returned no error")
	}
	t.Logf("rank 0 after step %d: %v", seen[0].last, errs[0])
}
