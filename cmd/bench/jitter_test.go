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

// commTimeline writes a timeline file as profiler.Timeline does, with one
// forward+backward span a step (start and end, ms into the step) and
// all-reduces on the comm track (start and end, ms into the step).
func commTimeline(t *testing.T, dir string, rank int, steps [][2]float64, comm [][][2]float64) {
	t.Helper()
	ev := []string{
		fmt.Sprintf(`{"args":{"name":"rank %d"},"name":"process_name","ph":"M","pid":%d,"tid":0}`, rank, rank),
		fmt.Sprintf(`{"args":{"name":"comm"},"name":"thread_name","ph":"M","pid":%d,"tid":1}`, rank),
	}
	for i, s := range steps {
		at := 1.7e15 + float64(i)*1e5 // µs; a step every 100 ms
		ev = append(ev, fmt.Sprintf(`{"cat":"trainer","dur":%.3f,"name":"forward+backward","ph":"X","pid":%d,"tid":0,"ts":%.3f}`, (s[1]-s[0])*1e3, rank, at+s[0]*1e3))
		for j, c := range comm[i] {
			ev = append(ev, fmt.Sprintf(`{"cat":"trainer","dur":%.3f,"name":"all-reduce bucket %d","ph":"X","pid":%d,"tid":1,"ts":%.3f}`, (c[1]-c[0])*1e3, j, rank, at+c[0]*1e3))
		}
	}
	body := `{"displayTimeUnit":"ms","traceEvents":[` + strings.Join(ev, ",\n") + `]}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("timeline-rank%d.json", rank)), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The communication a step waits for once both ranks have computed: from
// the later rank's end of backward to the earlier landing of the last
// all-reduce, whatever overlapped the backward pass before.
func TestExposedComm(t *testing.T) {
	dir := t.TempDir()
	n := steadyAfter + 3
	var s0, s1 [][2]float64
	var c0, c1 [][][2]float64
	for i := range n {
		// Steady steps: 1, 2 and 3 ms exposed (rank 1 computes until 21,
		// its last bucket lands at 22, 23, 24; rank 0's 0.5 ms later).
		// Rank 0's first bucket runs inside its backward pass.
		x := float64(max(i-steadyAfter+1, 0))
		s0 = append(s0, [2]float64{1, 20})
		s1 = append(s1, [2]float64{1, 21})
		c0 = append(c0, [][2]float64{{10, 12}, {20, 21.5 + x}})
		c1 = append(c1, [][2]float64{{21, 21 + x}})
	}
	commTimeline(t, dir, 0, s0, c0)
	commTimeline(t, dir, 1, s1, c1)
	f := Figures{}
	if err := addExposedComm(f, dir, 2); err != nil {
		t.Fatal(err)
	}
	if f["comm_exposed_ms_median"] != 2 || f["comm_exposed_ms_p90"] != 3 {
		t.Errorf("comm_exposed_ms median %v, p90 %v; want 2 and 3", f["comm_exposed_ms_median"], f["comm_exposed_ms_p90"])
	}
	// No comm track (independent trainings): no figure, no error.
	writeTimeline(t, dir, 0, make([]float64, n))
	writeTimeline(t, dir, 1, make([]float64, n))
	f = Figures{}
	if err := addExposedComm(f, dir, 2); err != nil || len(f) != 0 {
		t.Errorf("without comm spans: %v, %v; want nothing", f, err)
	}
	if err := addExposedComm(f, t.TempDir(), 2); err == nil {
		t.Error("missing timelines gave no error")
	}
}
