package profiler_test

import (
	"encoding/json"
	"io"
	"os"
	"testing"

	"github.com/fulgur-ml/fulgur/profiler"
)

// The CLI's fit runs Fit (whose end calls Report, writing timeline.json)
// then Test, then closes the profiler: the test spans reached
// timeline-rank0.json only, and the file the report names, timeline.json,
// had no test stage; a "test" command alone wrote no timeline.json at all.
// Close on rank 0 now merges again.
func TestTimelineCloseMergesSpansAfterReport(t *testing.T) {
	names := func(path string) map[string]bool {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var tr struct {
			TraceEvents []struct{ Name, Ph string } `json:"traceEvents"`
		}
		if err := json.Unmarshal(b, &tr); err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, e := range tr.TraceEvents {
			if e.Ph == "X" {
				out[e.Name] = true
			}
		}
		return out
	}

	dir := t.TempDir()
	p, err := profiler.NewTimeline(profiler.TimelineConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p.Start("fit").End()
	if err := p.Report(io.Discard); err != nil {
		t.Fatal(err)
	}
	p.Start("test").End()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got := names(p.MergedPath()); !got["fit"] || !got["test"] {
		t.Errorf("%s holds spans %v, want fit and test", p.MergedPath(), got)
	}

	// A program that never fits (test, predict): Close alone merges.
	dir2 := t.TempDir()
	q, err := profiler.NewTimeline(profiler.TimelineConfig{Dir: dir2})
	if err != nil {
		t.Fatal(err)
	}
	q.Start("test").End()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(q.MergedPath()); err != nil {
		t.Fatalf("no merged trace after Close: %v", err)
	}
	if got := names(q.MergedPath()); !got["test"] {
		t.Errorf("%s holds spans %v, want test", q.MergedPath(), got)
	}

	// Rank 1 writes only its own file.
	dir3 := t.TempDir()
	r, _ := profiler.NewTimeline(profiler.TimelineConfig{Dir: dir3, Rank: 1})
	r.Start("test").End()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.MergedPath()); !os.IsNotExist(err) {
		t.Errorf("rank 1's Close wrote %s (err %v)", r.MergedPath(), err)
	}
}
