package ddp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
)

// NewDDP names every problem of its config at once, each with the value
// and what to use instead.
func TestNewDDPReportsEveryProblem(t *testing.T) {
	connect := func(context.Context) (collective.Collective, error) { return nil, nil }
	for _, tc := range []struct {
		name string
		cfg  ddp.DDPConfig
		want []string
	}{
		{"nothing to join, bad sizes", ddp.DDPConfig{Rank: 3, WorldSize: 2, BucketBytes: -1, Timeout: -time.Second}, []string{
			"neither Group nor Connect is set: pass this rank's collective",
			"BucketBytes is -1: use 0 for 25 MiB",
			"Timeout is -1s: use 0 for the default",
			"Rank 3 is outside 0..1 (WorldSize 2): use this process's rank",
		}},
		{"negative world", ddp.DDPConfig{Connect: connect, Rank: -1, WorldSize: -2}, []string{
			"WorldSize is -2: use the number of ranks of the job",
			"Rank -1 is outside",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ddp.NewDDP(tc.cfg)
			for _, want := range tc.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("NewDDP(%+v) = %v, want it to say %q", tc.cfg, err, want)
				}
			}
		})
	}
}
