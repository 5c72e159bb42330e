package profiler

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/olekukonko/tablewriter"
)

// Profiler records named spans. Start, and End on its spans, are called
// from several goroutines at once (a strategy's communication goroutines
// open spans beside the training loop's, through StartTrack): a Profiler
// of one's own must be safe for concurrent use, as Nop, Simple, Advanced
// and Timeline are.
type Profiler interface {
	// Start opens a span for action; End on the returned Span closes it.
	Start(action string) Span
	// Report writes a summary (a table, file names, ...) to w.
	Report(w io.Writer) error
	// Close flushes files the profiler writes.
	Close() error
}

// Recorder receives closed spans.
type Recorder interface {
	Record(action string, start, end time.Time)
}

// Span is an open span. Its zero value (from Nop) does nothing.
type Span struct {
	rec    Recorder
	action string
	start  time.Time
}

// NewSpan opens a span recorded by rec; profilers return it from Start.
func NewSpan(rec Recorder, action string) Span {
	return Span{rec: rec, action: action, start: time.Now()}
}

// End closes the span.
func (s Span) End() {
	if s.rec != nil {
		s.rec.Record(s.action, s.start, time.Now())
	}
}

// Tracker is implemented by profilers that place spans on named tracks
// (Timeline: one track per communication goroutine). Use StartTrack.
type Tracker interface {
	StartOn(track, action string) Span
}

// StartTrack opens a span on track when p keeps tracks, and a plain span
// otherwise. Strategies call it from their communication goroutines with
// tracks such as "comm" or "comm bucket 3".
func StartTrack(p Profiler, track, action string) Span {
	if t, ok := p.(Tracker); ok {
		return t.StartOn(track, action)
	}
	return p.Start(action)
}

// Flusher is implemented by profilers that write per-process files; the
// trainer flushes every rank before rank 0 reports, so rank 0 can gather
// what the others wrote.
type Flusher interface {
	Flush() error
}

// Ranked is implemented by profilers built for one rank of a job
// (Timeline, Advanced): their files carry that rank in their names. The
// trainer refuses, in a job of several ranks, one whose rank is not the
// process's own, since every rank would otherwise write the same files,
// one over the other.
type Ranked interface {
	Rank() int
}

// StageActions are the span names the trainer gives whole stages; Advanced
// writes one CPU and one heap profile per stage, and Simple's shares are of
// the "fit" span when there is one.
var StageActions = map[string]bool{"fit": true, "validate": true, "test": true, "predict": true}

// Nop records nothing and costs a nil check per span.
type Nop struct{}

var _ Profiler = Nop{}

func (Nop) Start(string) Span      { return Span{} }
func (Nop) Report(io.Writer) error { return nil }
func (Nop) Close() error           { return nil }

// Simple sums the time of each action and reports a table: action, calls,
// mean, total and share of the "fit" span, which holds the whole of a Fit
// from its OnFitStart hooks to its Teardown (of the fit so far when the
// span is open, of the whole run when no fit span was opened).
type Simple struct {
	mu    sync.Mutex
	stats map[string]*stat
	order []string
	begin time.Time
	now   func() time.Time
	// fitOpen is when an open "fit" span began (zero when none is open):
	// a report made inside it (report.md at OnFitEnd) gives shares of the
	// fit so far.
	fitOpen time.Time
}

type stat struct {
	calls int
	total time.Duration
}

var _ Profiler = (*Simple)(nil)

// NewSimple starts a Simple profiler; the run's length is measured from now.
func NewSimple() *Simple {
	return &Simple{stats: map[string]*stat{}, begin: time.Now(), now: time.Now}
}

func (p *Simple) Start(action string) Span {
	sp := NewSpan(p, action)
	if action == "fit" {
		p.mu.Lock()
		p.fitOpen = sp.start
		p.mu.Unlock()
	}
	return sp
}

// Record adds one span.
func (p *Simple) Record(action string, start, end time.Time) {
	p.mu.Lock()
	st, ok := p.stats[action]
	if !ok {
		st = &stat{}
		p.stats[action] = st
		p.order = append(p.order, action)
	}
	st.calls++
	st.total += end.Sub(start)
	if action == "fit" {
		p.fitOpen = time.Time{}
	}
	p.mu.Unlock()
}

// Row is one line of the Simple report.
type Row struct {
	Action string
	Calls  int
	Mean   time.Duration
	Total  time.Duration
	Share  float64 // of the fit span (or the whole run), 0..1
}

// Rows returns the report's rows, longest total first.
func (p *Simple) Rows() []Row {
	p.mu.Lock()
	defer p.mu.Unlock()
	whole := p.now().Sub(p.begin)
	if st, ok := p.stats["fit"]; ok && st.total > 0 {
		whole = st.total
	} else if !p.fitOpen.IsZero() {
		whole = p.now().Sub(p.fitOpen)
	}
	rows := make([]Row, 0, len(p.order))
	for _, a := range p.order {
		st := p.stats[a]
		r := Row{Action: a, Calls: st.calls, Total: st.total, Mean: st.total / time.Duration(st.calls)}
		if whole > 0 {
			r.Share = float64(st.total) / float64(whole)
		}
		rows = append(rows, r)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Total > rows[j].Total })
	return rows
}

// Report writes the table.
func (p *Simple) Report(w io.Writer) error {
	tw := tablewriter.NewWriter(w)
	share := "% of run"
	p.mu.Lock()
	if _, ok := p.stats["fit"]; ok || !p.fitOpen.IsZero() {
		share = "% of fit"
	}
	p.mu.Unlock()
	tw.SetHeader([]string{"Action", "Calls", "Mean", "Total", share})
	tw.SetAlignment(tablewriter.ALIGN_RIGHT)
	for _, r := range p.Rows() {
		tw.Append([]string{r.Action, fmt.Sprint(r.Calls), r.Mean.Round(time.Microsecond).String(),
			r.Total.Round(time.Millisecond).String(), fmt.Sprintf("%.1f%%", 100*r.Share)})
	}
	tw.Render()
	return nil
}

func (p *Simple) Close() error { return nil }
