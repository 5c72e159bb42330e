package trainer_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/trainer"
)

// The launching process of ddp_spawn learns of an interruption as a
// strategy.FitInterrupted, and Fit returns it as an *InterruptedError:
// both read the same, one text. Before, the strategy's said "(interrupt)"
// where the trainer's said "(SIGINT)", and "checkpoint saved to " with no
// path when the workers stopped before they trained.
func TestInterruptMessagesAgree(t *testing.T) {
	for _, tc := range []struct {
		name string
		ie   trainer.InterruptedError
		fi   strategy.FitInterrupted
		want string
	}{
		{"signal", trainer.InterruptedError{Signal: os.Interrupt, GlobalStep: 7, Checkpoint: "ck/interrupted.ckpt"},
			strategy.FitInterrupted{Signal: syscall.SIGINT, GlobalStep: 7, Checkpoint: "ck/interrupted.ckpt"},
			"training interrupted (SIGINT) at global step 7; checkpoint saved to ck/interrupted.ckpt"},
		{"before training", trainer.InterruptedError{Signal: syscall.SIGTERM},
			strategy.FitInterrupted{Signal: syscall.SIGTERM},
			"training interrupted (SIGTERM) before it began; nothing was saved"},
		{"deadline", trainer.InterruptedError{Err: context.DeadlineExceeded, GlobalStep: 3, Checkpoint: "ck/interrupted.ckpt"},
			strategy.FitInterrupted{Cancelled: context.DeadlineExceeded, GlobalStep: 3, Checkpoint: "ck/interrupted.ckpt"},
			"training interrupted (context deadline exceeded) at global step 3; checkpoint saved to ck/interrupted.ckpt"},
		{"cancelled elsewhere", trainer.InterruptedError{Err: context.Canceled, GlobalStep: 3, Checkpoint: "c"},
			strategy.FitInterrupted{GlobalStep: 3, Checkpoint: "c"},
			"training interrupted (context canceled) at global step 3; checkpoint saved to c"},
	} {
		if got := tc.ie.Summary(); got != tc.want {
			t.Errorf("%s: trainer's %q, want %q", tc.name, got, tc.want)
		}
		if got := tc.fi.Error(); got != tc.want {
			t.Errorf("%s: strategy's %q, want %q", tc.name, got, tc.want)
		}
	}
	// Fit's own error, carried by the strategy, reads as it is.
	ie := &trainer.InterruptedError{Signal: os.Interrupt, GlobalStep: 2, Checkpoint: "c"}
	if fi := (&strategy.FitInterrupted{Err: ie}); fi.Error() != ie.Error() || !errors.Is(fi, ie) {
		t.Errorf("carried: %q, want %q", fi.Error(), ie.Error())
	}
}
