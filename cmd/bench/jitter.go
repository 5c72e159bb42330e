package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
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
	events, err := readTimeline(path)
	if err != nil {
		return nil, err
	}
	var out []float64
	for _, e := range events {
		if e.Ph == "X" && e.Name == computeSpan {
			out = append(out, e.Dur/1e3)
		}
	}
	return out, nil
}

// traceEvent is an event of a profiler timeline (Chrome's trace format,
// times in µs).
type traceEvent struct {
	Name string  `json:"name"`
	Ph   string  `json:"ph"`
	Tid  int     `json:"tid"`
	Ts   float64 `json:"ts"`
	Dur  float64 `json:"dur"`
	Args struct {
		Name string `json:"name"`
	} `json:"args"`
}

// readTimeline reads the events of a timeline file.
func readTimeline(path string) ([]traceEvent, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tl struct {
		TraceEvents []traceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tl); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tl.TraceEvents, nil
}

// addExposedComm reads the same timelines as addJitterFigures and adds
// comm_exposed_ms_median and comm_exposed_ms_p90: over the steady steps,
// the time from the later rank's end of the forward and backward pass to
// the end of the step's last gradient all-reduce (the spans on the
// profiler's "comm" track that start in that step) on the rank where it
// ended first. That is the communication the step waits for after every
// rank has computed, what overlapping it with the backward pass can save;
// a rank that merely computed longer (jitter) is not in it. Steps are
// matched by their index in each file. Timelines without comm spans
// (trainings that do not communicate) add nothing.
func addExposedComm(f Figures, dir string, processes int) error {
	ranks := make([][]stepComm, processes)
	n := -1
	for r := range ranks {
		s, err := readStepComm(filepath.Join(dir, fmt.Sprintf("timeline-rank%d.json", r)))
		if err != nil {
			return err
		}
		ranks[r] = s
		if n < 0 || len(s) < n {
			n = len(s)
		}
	}
	var exposed []float64
steps:
	for i := steadyAfter; i < n; i++ {
		computed, landed := 0.0, 0.0
		for r, s := range ranks {
			if !s[i].comm {
				continue steps // a micro-batch that accumulates, or no ddp
			}
			computed = max(computed, s[i].computed)
			if r == 0 || s[i].landed < landed {
				landed = s[i].landed
			}
		}
		exposed = append(exposed, max(0, landed-computed)/1e3)
	}
	if len(exposed) == 0 {
		return nil
	}
	slices.Sort(exposed)
	f["comm_exposed_ms_median"] = stat(exposed).Median
	f["comm_exposed_ms_p90"] = exposed[len(exposed)*9/10]
	return nil
}

// stepComm is one step of a timeline, in µs since the Unix epoch: the end
// of its computeSpan and of its last span on the comm track (comm: it has
// one).
type stepComm struct {
	computed, landed float64
	comm             bool
}

// readStepComm reads a timeline's steps: each computeSpan span and the
// comm-track spans that start from it to the next one.
func readStepComm(path string) ([]stepComm, error) {
	events, err := readTimeline(path)
	if err != nil {
		return nil, err
	}
	commTid := -1
	for _, e := range events {
		if e.Ph == "M" && e.Name == "thread_name" && e.Args.Name == "comm" {
			commTid = e.Tid
		}
	}
	type span struct{ start, end float64 }
	var compute, comm []span
	for _, e := range events {
		switch {
		case e.Ph != "X":
		case e.Name == computeSpan:
			compute = append(compute, span{e.Ts, e.Ts + e.Dur})
		case e.Tid == commTid:
			comm = append(comm, span{e.Ts, e.Ts + e.Dur})
		}
	}
	slices.SortFunc(compute, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	out := make([]stepComm, len(compute))
	for i, c := range compute {
		out[i].computed = c.end
		next := math.Inf(1)
		if i+1 < len(compute) {
			next = compute[i+1].start
		}
		for _, s := range comm {
			if s.start >= c.start && s.start < next && (!out[i].comm || s.end > out[i].landed) {
				out[i].landed, out[i].comm = s.end, true
			}
		}
	}
	return out, nil
}
