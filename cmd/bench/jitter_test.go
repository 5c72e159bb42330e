package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTimeline writes a timeline file as profiler.Timeline does, with a
// forward+backward span of each duration (ms) and other spans between.
func writeTimeline(t *testing.T, dir string, rank int, ms []float64) {
	t.Helper()
	var ev []string
	ev = append(ev, fmt.Sprintf(`{"args":{"name":"rank %d"},"name":"process_name","ph":"M","pid":%d,"tid":0}`, rank, rank))
	for i, d := range ms {
		ts := 1e6 + float64(i)*1e5
		ev = append(ev, fmt.Sprintf(`{"cat":"trainer","dur":0.5,"name":"data fetch","ph":"X","pid":%d,"tid":0,"ts":%.3f}`, rank, ts))
		ev = append(ev, fmt.Sprintf(`{"cat":"trainer","dur":%.3f,"name":"forward+backward","ph":"X","pid":%d,"tid":0,"ts":%.3f}`, d*1e3, rank, ts+1))
		ev = append(ev, fmt.Sprintf(`{"cat":"ddp","dur":%.3f,"name":"wait bucket 0","ph":"X","pid":%d,"tid":0,"ts":%.3f}`, 7e3, rank, ts+2+d*1e3))
	}
	body := `{"displayTimeUnit":"ms","traceEvents":[` + strings.Join(ev, ",\n") + `],"otherData":{"rank":0,"dropped_events":0}}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("timeline-rank%d.json", rank)), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The ranks' wait for each other from their compute times: each steady
// step lasts as long as its slowest rank's compute.
func TestJitterFigures(t *testing.T) {
	dir := t.TempDir()
	warm := make([]float64, steadyAfter)
	for i := range warm {
		warm[i] = 100 // the first steps compile: left out
	}
	writeTimeline(t, dir, 0, append(warm, 10, 12, 10, 10))
	writeTimeline(t, dir, 1, append(warm, 12, 10, 10)) // one step fewer: matched up to it
	f := Figures{}
	if err := addJitterFigures(f, dir, 2, "rank"); err != nil {
		t.Fatal(err)
	}
	// Slowest 12+12+10 = 34 against means 11+11+10 = 32.
	want := Figures{"sync_wait_pct": 100 * (34.0/32 - 1), "compute_ms_median": 10, "compute_ms_p90": 12,
		"rank1 compute_ms_median": 10, "rank1 compute_ms_p90": 12}
	for k, v := range want {
		if math.Abs(f[k]-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, f[k], v)
		}
	}
	if len(f) != len(want) {
		t.Errorf("figures %v, want only %v", f, want)
	}
	if err := addJitterFigures(Figures{}, dir, 3, "rank"); err == nil || !strings.Contains(err.Error(), "timeline-rank2.json") {
		t.Errorf("a missing rank's file: error %v, want one naming it", err)
	}
	writeTimeline(t, dir, 1, warm)
	if err := addJitterFigures(Figures{}, dir, 2, "rank"); err == nil || !strings.Contains(err.Error(), "steps") {
		t.Errorf("no steady step: error %v, want one saying so", err)
	}
}
