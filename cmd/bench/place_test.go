package main

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// labelWorkload is a test's workload: each pinned rank reports the CPUs it
// sees and fails if its own label calls the ranks oversubscribed.
func init() {
	register(&workload{
		Name:    "labeltest",
		Doc:     "test only: a rank's view of its label",
		Configs: func(*Options) ([]Config, error) { return nil, nil },
		Run: func(_ context.Context, c Config) (Figures, error) {
			if l := c.Label(); strings.Contains(l, "OVERSUBSCRIBED") {
				return nil, fmt.Errorf("rank sees %d CPUs and labels itself %q", runtime.NumCPU(), l)
			}
			if childIndex() != 0 {
				return nil, nil
			}
			return Figures{"cpus_seen": float64(runtime.NumCPU())}, nil
		},
	})
}

// A rank pinned to a core of its own sees one CPU; the ranks are not
// oversubscribed for that, and its label (in its log) must not say so.
func TestPinnedRanksAreNotOversubscribed(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil || runtime.NumCPU() < 2 {
		t.Skip("needs taskset and 2 CPUs to pin 2 ranks to a core each")
	}
	o, err := parseOptions([]string{"-runs", "1"})
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Workload: "labeltest", Impl: "fulgur", Ranks: 2, Pinned: true, Threads: 1, Seed: 1}
	if l := c.Label(); strings.Contains(l, "OVERSUBSCRIBED") {
		t.Errorf("launcher's label %q", l)
	}
	f, err := measure(context.Background(), o, c)
	if err != nil {
		t.Fatal(err)
	}
	if f["cpus_seen"] != 1 {
		t.Errorf("rank 0 saw %v CPUs, want 1 (pinned)", f["cpus_seen"])
	}
}
