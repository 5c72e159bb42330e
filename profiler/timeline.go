package profiler

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TimelineConfig configures a Timeline.
type TimelineConfig struct {
	// Dir receives timeline-rank<R>.json, and on rank 0 timeline.json
	// merging every rank's file; required.
	Dir string
	// Rank is this process's rank: its process id in the trace.
	// Under ddp every rank builds its own profiler: take the rank from
	// cluster.Detect(cluster.OSLookup) (env.Rank). Fit refuses a profiler
	// built for another rank than its process's.
	Rank int
	// MaxEvents caps the events kept (the rest are counted and dropped).
	// 0: 2,000,000.
	MaxEvents int
}

// Timeline records every span and writes a Chrome trace-event JSON file
// ({"traceEvents": [...]}, complete "X" events with microsecond times) that
// Perfetto (ui.perfetto.dev) and chrome://tracing open. Each rank is a
// process in the trace and each track a thread: "main" for the training
// loop, others for spans opened with StartTrack (communication
// goroutines). Times are microseconds since the Unix epoch, so ranks on one
// host line up.
type Timeline struct {
	cfg   TimelineConfig
	begin time.Time

	mu      sync.Mutex
	events  []tlEvent
	tracks  map[string]int
	names   []string
	dropped int
	flushed string
}

type tlEvent struct {
	action     string
	start, end time.Time
	track      int
}

var (
	_ Profiler = (*Timeline)(nil)
	_ Tracker  = (*Timeline)(nil)
	_ Flusher  = (*Timeline)(nil)
)

// NewTimeline checks cfg. It makes no directory: Dir is made when the
// trace is first written (at the end of Fit), so that the ranks of a job
// started together, each naming its run directory before Fit with
// trainer.VersionDir, name the same one (a directory made here by the rank
// that came first made the others name the next version_N). A Dir under a
// file is refused now.
func NewTimeline(cfg TimelineConfig) (*Timeline, error) {
	var errs []error
	if cfg.Dir == "" {
		errs = append(errs, errors.New("profiler.NewTimeline: Dir is empty: pass the directory for the trace"))
	}
	if cfg.Rank < 0 {
		errs = append(errs, fmt.Errorf("profiler.NewTimeline: Rank is %d: use this process's rank, 0 or more", cfg.Rank))
	}
	if cfg.MaxEvents < 0 {
		errs = append(errs, fmt.Errorf("profiler.NewTimeline: MaxEvents is %d: use 0 (the default) or more", cfg.MaxEvents))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.MaxEvents == 0 {
		cfg.MaxEvents = 2_000_000
	}
	if err := canMakeDir(cfg.Dir); err != nil {
		return nil, fmt.Errorf("profiler.NewTimeline: %w", err)
	}
	return &Timeline{cfg: cfg, begin: time.Now(), tracks: map[string]int{"main": 0}, names: []string{"main"}}, nil
}

// canMakeDir reports an error when dir exists as something other than a
// directory, or its nearest existing parent is not a directory: MkdirAll
// would fail there.
func canMakeDir(dir string) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("Dir %s: %s is a file, not a directory: pass a directory for the trace", dir, p)
			}
			return nil
		}
		// Not there, or under a file (ENOTDIR): look at its parent.
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

// Rank is the rank the trace is written for (TimelineConfig.Rank).
func (p *Timeline) Rank() int { return p.cfg.Rank }

var _ Ranked = (*Timeline)(nil)

// Start opens a span on the "main" track.
func (p *Timeline) Start(action string) Span { return NewSpan(trackRec{p, 0}, action) }

// StartOn opens a span on the named track.
func (p *Timeline) StartOn(track, action string) Span {
	p.mu.Lock()
	id, ok := p.tracks[track]
	if !ok {
		id = len(p.names)
		p.tracks[track] = id
		p.names = append(p.names, track)
	}
	p.mu.Unlock()
	return NewSpan(trackRec{p, id}, action)
}

type trackRec struct {
	p     *Timeline
	track int
}

func (r trackRec) Record(action string, start, end time.Time) {
	p := r.p
	p.mu.Lock()
	if len(p.events) < p.cfg.MaxEvents {
		p.events = append(p.events, tlEvent{action, start, end, r.track})
	} else {
		p.dropped++
	}
	p.mu.Unlock()
}

// Path is this rank's trace file.
func (p *Timeline) Path() string {
	return filepath.Join(p.cfg.Dir, fmt.Sprintf("timeline-rank%d.json", p.cfg.Rank))
}

// MergedPath is the file rank 0's Report and Close write with every rank's
// events.
func (p *Timeline) MergedPath() string { return filepath.Join(p.cfg.Dir, "timeline.json") }

// micros is t in µs since the epoch with its nanoseconds, written from
// the integer: through a float64 (a 256 ns step at today's dates) two
// events a few hundred nanoseconds apart could swap places.
func micros(t time.Time) json.Number {
	ns := t.UnixNano()
	return json.Number(fmt.Sprintf("%d.%03d", ns/1000, ns%1000))
}

// Flush writes this rank's trace file (atomically: a reader never sees half
// of it).
func (p *Timeline) Flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := os.MkdirAll(p.cfg.Dir, 0o755); err != nil {
		return err
	}
	tmp := p.Path() + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	enc := func(v any) {
		b, _ := json.Marshal(v)
		w.Write(b)
	}
	w.WriteString(`{"displayTimeUnit":"ms","traceEvents":[`)
	first := true
	sep := func() {
		if !first {
			w.WriteString(",\n")
		}
		first = false
	}
	pid := p.cfg.Rank
	sep()
	enc(map[string]any{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": map[string]any{"name": fmt.Sprintf("rank %d", pid)}})
	sep()
	enc(map[string]any{"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": map[string]any{"sort_index": pid}})
	for id, name := range p.names {
		sep()
		enc(map[string]any{"name": "thread_name", "ph": "M", "pid": pid, "tid": id, "args": map[string]any{"name": name}})
	}
	for _, e := range p.events {
		sep()
		cat := "trainer"
		if i := strings.IndexByte(e.action, '/'); i > 0 {
			cat = e.action[:i]
		}
		dur := float64(e.end.Sub(e.start).Nanoseconds()) / 1e3
		enc(map[string]any{"name": e.action, "cat": cat, "ph": "X", "pid": pid, "tid": e.track,
			"ts": micros(e.start), "dur": json.Number(strconv.FormatFloat(dur, 'f', 3, 64))})
	}
	w.WriteString("],\"otherData\":")
	enc(map[string]any{"rank": pid, "dropped_events": p.dropped})
	w.WriteString("}\n")
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, p.Path()); err != nil {
		return err
	}
	p.flushed = p.Path()
	return nil
}

// Report flushes this rank's file; on rank 0 it then merges every rank's
// file written during this run into MergedPath and names it.
func (p *Timeline) Report(w io.Writer) error {
	if err := p.Flush(); err != nil {
		return err
	}
	if p.cfg.Rank != 0 {
		return nil
	}
	n, ranks, err := p.merge()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "timeline: %d events from %d rank(s) in %s (open it at https://ui.perfetto.dev)\n", n, ranks, p.MergedPath())
	return err
}

// merge writes MergedPath from the rank files written during this run.
func (p *Timeline) merge() (events, ranks int, err error) {
	srcs, err := filepath.Glob(filepath.Join(p.cfg.Dir, "timeline-rank*.json"))
	if err != nil {
		return 0, 0, err
	}
	var fresh []string
	for _, s := range srcs {
		if fi, err := os.Stat(s); err == nil && !fi.ModTime().Before(p.begin.Add(-time.Second)) {
			fresh = append(fresh, s)
		}
	}
	n, err := MergeTimelines(p.MergedPath(), fresh...)
	return n, len(fresh), err
}

// Close writes this rank's file and, on rank 0, merges MergedPath again:
// the spans recorded after Fit's Report (a test or predict run after the
// fit, or one without a fit) belong in the file the user opens. Other
// ranks' files are merged as they are on disk at that moment.
func (p *Timeline) Close() error {
	if err := p.Flush(); err != nil {
		return err
	}
	if p.cfg.Rank != 0 {
		return nil
	}
	_, _, err := p.merge()
	return err
}

// MergeTimelines concatenates the traceEvents of trace files into dst and
// returns the number of events.
func MergeTimelines(dst string, srcs ...string) (int, error) {
	sort.Strings(srcs)
	var all []json.RawMessage
	for _, s := range srcs {
		b, err := os.ReadFile(s)
		if err != nil {
			return 0, err
		}
		var t struct {
			TraceEvents []json.RawMessage `json:"traceEvents"`
		}
		if err := json.Unmarshal(b, &t); err != nil {
			return 0, fmt.Errorf("merge timelines: %s: %w", s, err)
		}
		all = append(all, t.TraceEvents...)
	}
	f, err := os.Create(dst + ".tmp")
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString(`{"displayTimeUnit":"ms","traceEvents":[`)
	for i, e := range all {
		if i > 0 {
			w.WriteString(",\n")
		}
		w.Write(e)
	}
	w.WriteString("]}\n")
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return len(all), os.Rename(dst+".tmp", dst)
}
