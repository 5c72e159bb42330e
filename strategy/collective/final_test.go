package collective_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// barrierErr is a group whose Barrier fails with err.
type barrierErr struct {
	collective.Collective
	err error
}

func (b barrierErr) Barrier(context.Context) error { return b.err }

// TestFinalBarrier: a peer that closed its group in order has left the job
// and is no error of the last barrier; one that died, timed out or
// disagreed is.
func TestFinalBarrier(t *testing.T) {
	closed := fmt.Errorf("%w: rank 0 %w", collective.ErrPeerLost, collective.ErrPeerClosed)
	if err := collective.FinalBarrier(context.Background(), barrierErr{err: closed}); err != nil {
		t.Errorf("a peer that closed its group: %v, want nil", err)
	}
	for _, e := range []error{
		nil,
		fmt.Errorf("%w: rank 0's process is gone", collective.ErrPeerLost),
		fmt.Errorf("%w: rank 2 sent nothing for 10s", collective.ErrTimeout),
		collective.ErrMismatch,
	} {
		if err := collective.FinalBarrier(context.Background(), barrierErr{err: e}); !errors.Is(err, e) || (e == nil) != (err == nil) {
			t.Errorf("barrier failing with %v: FinalBarrier gave %v", e, err)
		}
	}
}
