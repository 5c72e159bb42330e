//go:build linux

package launch_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// Wait's error says when a stop signal (SIGINT, SIGTERM) killed the ranks,
// as Ctrl-C does to ranks that have no handler yet, so that a launcher
// reports an interrupted run rather than a failed one; a rank killed by
// another signal, or exiting with a status, is a failure.
func TestWaitErrorNamesTheStopSignal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		child  string
		signal os.Signal // sent to the ranks, nil: none
		want   syscall.Signal
		stop   bool
	}{
		{"SIGINT", "sleep", os.Interrupt, syscall.SIGINT, true},
		{"SIGTERM", "sleep", syscall.SIGTERM, syscall.SIGTERM, true},
		{"SIGKILL", "sleep", os.Kill, 0, false},
		{"exit status", "exit:3", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := launch.Start(context.Background(), launch.Config{Ranks: []int{1, 2}, Args: []string{},
				Env: func(int) []string { return []string{childEnv + "=" + tc.child} }})
			if err != nil {
				t.Fatal(err)
			}
			if tc.signal != nil {
				g.Signal(tc.signal)
			}
			err = g.Wait(context.Background())
			var ee *launch.ExitError
			if !errors.As(err, &ee) || len(ee.Failed) != 2 {
				t.Fatalf("Wait error %v (%T), want an *ExitError of 2 ranks", err, err)
			}
			sig, ok := ee.StopSignal()
			if ok != tc.stop || sig != tc.want {
				t.Errorf("StopSignal() = %v, %v; want %v, %v (%v)", sig, ok, tc.want, tc.stop, err)
			}
		})
	}
}
