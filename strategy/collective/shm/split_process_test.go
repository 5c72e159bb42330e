//go:build linux

package shm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// splitIfAsked gives a worker with SPLIT set the sub-group of its rank in
// {0, 1} and {2, 3} instead of the whole group.
func splitIfAsked(ctx context.Context, g collective.Group) (collective.Group, error) {
	if os.Getenv("SPLIT") == "" {
		return g, nil
	}
	sub, err := collective.NewGroups(ctx, g, [][]int{{0, 1}, {2, 3}})
	if err != nil {
		return nil, err
	}
	return sub.(collective.Group), nil
}

// TestKillRankProcessInSubGroup: four processes split into sub-groups {0,
// 1} and {2, 3} stream all-reduces over their sub-group; a SIGKILLed rank
// of {2, 3} (its first rank, whose sub-group star the other watches, or
// its second) turns into an error on the other naming its global rank,
// well before the 1 minute timeout.
func TestKillRankProcessInSubGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped with -short")
	}
	for _, backend := range []string{"tcp", "shm"} {
		for _, victim := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/kill=%d", backend, victim), func(t *testing.T) {
				const n = 4
				survivor := 5 - victim
				ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
				defer cancel()
				procs, killed := killOneRank(ctx, t, n, victim, "SPLIT=1", "BACKEND="+backend)
				p := procs[survivor]
				l, lerr := p.line("FAILED")
				io.Copy(io.Discard, p.cmd.Stdout.(io.Reader))
				werr := p.cmd.Wait()
				var exit *exec.ExitError
				if !errors.As(werr, &exit) || exit.ExitCode() != 2 {
					t.Fatalf("rank %d: exit %v, want status 2 (error reported); output:\n%s", survivor, werr, p.log.String())
				}
				if lerr != nil || !strings.HasPrefix(l, fmt.Sprintf("FAILED blame=%d ", victim)) || !strings.Contains(l, "sub-group [2 3]") {
					t.Errorf("rank %d: %q, want an error blaming global rank %d in sub-group [2 3]", survivor, l, victim)
				}
				if ctx.Err() != nil {
					t.Fatalf("rank %d hung: killed by the test's deadline", survivor)
				}
				t.Logf("rank %d exited %v after the kill: %s", survivor, time.Since(killed), l)
			})
		}
	}
}
