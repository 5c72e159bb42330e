package profiler_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/profiler"
)

func TestSimpleTableSharesOfFit(t *testing.T) {
	p := profiler.NewSimple()
	t0 := time.Unix(100, 0)
	p.Record("fit", t0, t0.Add(10*time.Second))
	p.Record("forward+backward", t0, t0.Add(3*time.Second))
	p.Record("forward+backward", t0, t0.Add(5*time.Second))
	p.Record("callbacks/ModelCheckpoint.OnValidationEnd", t0, t0.Add(500*time.Millisecond))
	rows := p.Rows()
	want := []profiler.Row{
		{Action: "fit", Calls: 1, Mean: 10 * time.Second, Total: 10 * time.Second, Share: 1},
		{Action: "forward+backward", Calls: 2, Mean: 4 * time.Second, Total: 8 * time.Second, Share: 0.8},
		{Action: "callbacks/ModelCheckpoint.OnValidationEnd", Calls: 1, Mean: 500 * time.Millisecond, Total: 500 * time.Millisecond, Share: 0.05},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("rows\n%v\nwant\n%v", rows, want)
	}
	var buf bytes.Buffer
	if err := p.Report(&buf); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"% OF FIT", "forward+backward", "|     2 |", "80.0%", "5.0%"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, buf.String())
		}
	}
}

func readTrace(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s does not parse: %v", path, err)
	}
	return tr.TraceEvents
}

func TestTimelineTracksAndMerge(t *testing.T) {
	dir := t.TempDir()
	r0, err := profiler.NewTimeline(profiler.TimelineConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := profiler.NewTimeline(profiler.TimelineConfig{Dir: dir, Rank: 1})
	for _, p := range []*profiler.Timeline{r0, r1} {
		sp := p.Start("forward+backward")
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // a communication goroutine
			defer wg.Done()
			s := profiler.StartTrack(p, "comm", "allreduce bucket 0")
			s.End()
		}()
		wg.Wait()
		sp.End()
		p.Start("optimizer step").End()
	}
	if err := r1.Flush(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := r0.Report(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "timeline: 14 events from 2 rank(s) in "+r0.MergedPath()) {
		t.Errorf("report %q", buf.String())
	}
	evs := readTrace(t, r0.MergedPath())
	spans := map[string]bool{}
	threads := map[string]bool{}
	for _, e := range evs {
		pid, tid := int(e["pid"].(float64)), int(e["tid"].(float64))
		switch e["ph"] {
		case "X":
			if e["dur"].(float64) < 0 || e["ts"].(float64) < 1e15 {
				t.Errorf("bad times in %v", e)
			}
			spans[fmt.Sprintf("%d/%d/%s", pid, tid, e["name"])] = true
		case "M":
			if e["name"] == "thread_name" {
				threads[fmt.Sprintf("%d/%d/%s", pid, tid, e["args"].(map[string]any)["name"])] = true
			}
		}
	}
	for _, r := range []int{0, 1} {
		for _, s := range []string{"%d/0/forward+backward", "%d/0/optimizer step", "%d/1/allreduce bucket 0"} {
			if !spans[fmt.Sprintf(s, r)] {
				t.Errorf("no span %s in %v", fmt.Sprintf(s, r), spans)
			}
		}
		for _, s := range []string{"%d/0/main", "%d/1/comm"} {
			if !threads[fmt.Sprintf(s, r)] {
				t.Errorf("no track %s in %v", fmt.Sprintf(s, r), threads)
			}
		}
	}
}

func TestAdvancedWritesProfilesPerStage(t *testing.T) {
	dir := t.TempDir()
	p, err := profiler.NewAdvanced(profiler.AdvancedConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	fit := p.Start("fit")
	sum := 0
	for i := 0; i < 3; i++ {
		sp := p.Start("forward+backward")
		for j := 0; j < 100000; j++ {
			sum += j % 7
		}
		sp.End()
	}
	fit.End()
	test := p.Start("test")
	test.End()
	var buf bytes.Buffer
	if err := p.Report(&buf); err != nil {
		// No other test in this package profiles the CPU and none runs in
		// parallel, so a failure here is the profiler's own.
		t.Fatalf("Report: %v", err)
	}
	for _, name := range []string{"cpu-fit.pprof", "heap-fit.pprof", "cpu-test.pprof", "heap-test.pprof"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: not a gzipped pprof profile (%v)", name, err)
		}
		if !strings.Contains(buf.String(), filepath.Join(dir, name)) {
			t.Errorf("report does not name %s:\n%s", name, buf.String())
		}
	}
	if !strings.Contains(buf.String(), "forward+backward") || sum == 0 {
		t.Errorf("report lacks the table:\n%s", buf.String())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := profiler.NewTimeline(profiler.TimelineConfig{Rank: -1, MaxEvents: -5}); err == nil ||
		!strings.Contains(err.Error(), "Dir is empty") || !strings.Contains(err.Error(), "Rank is -1") || !strings.Contains(err.Error(), "MaxEvents is -5") {
		t.Errorf("err = %v", err)
	}
	if _, err := profiler.NewAdvanced(profiler.AdvancedConfig{}); err == nil || !strings.Contains(err.Error(), "Dir is empty") {
		t.Errorf("err = %v", err)
	}
}

// BenchmarkSpan measures one span open and close with each profiler; the
// Nop figure is the cost the training loop pays per span when profiling is
// off.
func BenchmarkSpan(b *testing.B) {
	tl, _ := profiler.NewTimeline(profiler.TimelineConfig{Dir: b.TempDir(), MaxEvents: 1})
	for _, c := range []struct {
		name string
		p    profiler.Profiler
	}{
		{"nop", profiler.Nop{}},
		{"simple", profiler.NewSimple()},
		{"timeline", tl},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				sp := c.p.Start("forward+backward")
				sp.End()
			}
		})
	}
}
