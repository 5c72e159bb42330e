package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// Each run's profiles go beside its run directory's name,
// ROOT/profiles/version_N, as Lightning's profilers write into the run's
// log directory: a second run with -profiler timeline replaced the first
// run's ROOT/profiles/timeline.json, and -profiler advanced its pprof
// files, without a word.
func TestEachRunKeepsItsProfiles(t *testing.T) {
	root := t.TempDir()
	base := []string{"-max-steps", "3", "-no-model-summary", "-no-plots"}
	steps := map[string]int{}
	for _, n := range []string{"3", "5"} {
		s, _ := runIn(t, root, append(base, "-profiler", "timeline", "-max-steps", n)...)
		steps[filepath.Base(s.RunDir)] = s.GlobalStep
	}
	runIn(t, root, append(base, "-profiler", "advanced")...)
	if want := map[string]int{"version_0": 3, "version_1": 5}; !reflect.DeepEqual(steps, want) {
		t.Fatalf("runs %v, want %v", steps, want)
	}
	for v, n := range steps {
		b, err := os.ReadFile(filepath.Join(root, "profiles", v, "timeline.json"))
		if err != nil {
			t.Fatal(err)
		}
		var tr struct {
			TraceEvents []struct{ Name, Ph string } `json:"traceEvents"`
		}
		if err := json.Unmarshal(b, &tr); err != nil {
			t.Fatalf("%s timeline.json: %v", v, err)
		}
		got := 0
		for _, e := range tr.TraceEvents {
			if e.Ph == "X" && e.Name == "optimizer step" {
				got++
			}
		}
		if got != n {
			t.Errorf("%s's timeline has %d optimizer steps, want its run's %d", v, got, n)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "profiles", "version_2", "cpu-fit.pprof")); err != nil {
		t.Errorf("the advanced profiler's run: %v", err)
	}
}
