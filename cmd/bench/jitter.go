package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// computeSpan is the trainer's span of a step's forward and backward pass:
// a rank's compute, without the waits for the others (ddp waits for the
// gradients in the optimizer step).
const computeSpan = "forward+backward"

// addJitterFigures reads the timelines that FULGUR_BENCH_TIMELINE made the
// processes of one run write into dir (timeline-rank<R>.json, R <
// processes) and adds what the step-to-step variation of each one's
// compute costs a collective step:
//
//   - sync_wait_pct: over the steady steps (from the steadyAfter'th), the
//     sum of the slowest process's compute time a step over the sum of
//     the processes' mean, less one, in percent. A ddp step ends when its
//     slowest rank's compute does, so this is the share of the compute
//     time that the ranks spend waiting for each other. For independent
//     trainings (Config.Coexist) it is the wait that their variation would
//     cost if they met every step: what ddp_of_coexist cannot beat.
//   - compute_ms_median, compute_ms_p90: each process's compute time a
//     step ("<prefix><R> ..." for R > 0: "rank1 compute_ms_median").
//
// Steps are matched by their index in each file. A missing or unreadable
// file adds nothing but an error.
func addJitterFigures(f Figures, dir string, processes int, prefix string) error {
	times := make([][]float64, processes)
	for r := range times {
		t, err := readComputeTimes(filepath.Join(dir, fmt.Sprintf("timeline-rank%d.json", r)))
		if err != nil {
			return err
		}
		times[r] = t
	}
	n := len(times[0])
	for _, t := range times {
		n = min(n, len(t))
	}
	if n <= steadyAfter {
		return fmt.Errorf("%s: %d steps in the timelines, want more than %d", dir, n, steadyAfter)
	}
	var sumMax, sumMean float64
	for i := steadyAfter; i < n; i++ {
		var mx, sum float64
		for _, t := range times {
			mx = max(mx, t[i])
			sum += t[i]
		}
		sumMax += mx
		sumMean += sum / float64(processes)
	}
	f["sync_wait_pct"] = 100 * (sumMax/sumMean - 1)
	for r, t := range times {
		s := slices.Clone(t[steadyAfter:n])
		slices.Sort(s)
		name := func(k string) string {
			if r == 0 {
				return k
			}
			return fmt.Sprintf("%s%d %s", prefix, r, k)
		}
		f[name("compute_ms_median")] = stat(s).Median
		f[name("compute_ms_p90")] = s[len(s)*9/10]
	}
	return nil
}

// readComputeTimes reads the durations of a timeline's computeSpan spans,
// in ms, in the order the file lists them (the order they ended).
func readComputeTimes(path string) ([]float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tl struct {
		TraceEvents []struct {
			Name string      `json:"name"`
			Ph   string      `json:"ph"`
			Dur  json.Number `json:"dur"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tl); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []float64
	for _, e := range tl.TraceEvents {
		if e.Ph != "X" || e.Name != computeSpan {
			continue
		}
		us, err := strconv.ParseFloat(string(e.Dur), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %s span of duration %q: %w", path, computeSpan, e.Dur, err)
		}
		out = append(out, us/1e3)
	}
	return out, nil
}
