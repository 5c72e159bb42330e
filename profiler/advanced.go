package profiler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"
)

// AdvancedConfig configures an Advanced profiler.
type AdvancedConfig struct {
	// Dir receives the profiles; required.
	Dir string
	// Rank is this process's rank; files of ranks above 0 carry it in
	// their names.
	// Under ddp every rank builds its own profiler: take the rank from
	// cluster.Detect(cluster.OSLookup) (env.Rank). Fit refuses a profiler
	// built for another rank than its process's.
	Rank int
}

// Advanced writes pprof profiles per stage: cpu-<stage>.pprof while the
// stage's span ("fit", "validate", "test", "predict") is open, and
// heap-<stage>.pprof when it closes. Inside a stage every other span labels
// the CPU samples taken in it with action=<name>, so
//
//	go tool pprof -tagfocus 'action=forward+backward' cpu-fit.pprof
//
// shows where a step's forward and backward pass spend their time. It also
// keeps the Simple table, printed by Report with the files' names.
type Advanced struct {
	cfg    AdvancedConfig
	simple *Simple

	mu     sync.Mutex
	stage  string
	cpu    *os.File
	files  []string
	errs   []error
	labels []context.Context // label stack of the spans open on the main goroutine
}

var (
	_ Profiler = (*Advanced)(nil)
	_ Tracker  = (*Advanced)(nil)
)

// NewAdvanced checks cfg. Dir is made when the first profile is written,
// as a Timeline's (see NewTimeline); a Dir under a file is refused now.
func NewAdvanced(cfg AdvancedConfig) (*Advanced, error) {
	if cfg.Dir == "" {
		return nil, errors.New("profiler.NewAdvanced: Dir is empty: pass the directory for the profiles")
	}
	if err := canMakeDir(cfg.Dir); err != nil {
		return nil, fmt.Errorf("profiler.NewAdvanced: %w", err)
	}
	return &Advanced{cfg: cfg, simple: NewSimple()}, nil
}

func (p *Advanced) name(kind, stage string) string {
	n := kind + "-" + stage
	if p.cfg.Rank > 0 {
		n += fmt.Sprintf("-rank%d", p.cfg.Rank)
	}
	return filepath.Join(p.cfg.Dir, n+".pprof")
}

// Rank is the rank the profiles are written for (AdvancedConfig.Rank).
func (p *Advanced) Rank() int { return p.cfg.Rank }

var _ Ranked = (*Advanced)(nil)

// Start opens a span: a stage starts its CPU profile; other spans label
// the samples of the goroutine that opened them.
func (p *Advanced) Start(action string) Span {
	if StageActions[action] {
		p.startStage(action)
		sp := p.simple.Start(action) // the table's open fit span
		return Span{rec: stageEnd{p}, action: action, start: sp.start}
	}
	p.mu.Lock()
	ctx := context.Background()
	if n := len(p.labels); n > 0 {
		ctx = p.labels[n-1]
	}
	ctx = pprof.WithLabels(ctx, pprof.Labels("action", action))
	p.labels = append(p.labels, ctx)
	p.mu.Unlock()
	pprof.SetGoroutineLabels(ctx)
	return Span{rec: labelEnd{p}, action: action, start: time.Now()}
}

// StartOn records spans of other goroutines in the table only: labels
// belong to the goroutine that sets them.
func (p *Advanced) StartOn(track, action string) Span { return p.simple.Start(action) }

type stageEnd struct{ p *Advanced }

func (s stageEnd) Record(action string, start, end time.Time) {
	s.p.simple.Record(action, start, end)
	s.p.endStage(action)
}

type labelEnd struct{ p *Advanced }

func (l labelEnd) Record(action string, start, end time.Time) {
	p := l.p
	p.simple.Record(action, start, end)
	p.mu.Lock()
	ctx := context.Background()
	if n := len(p.labels); n > 0 {
		p.labels = p.labels[:n-1]
		if n > 1 {
			ctx = p.labels[n-2]
		}
	}
	p.mu.Unlock()
	pprof.SetGoroutineLabels(ctx)
}

func (p *Advanced) startStage(stage string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stage != "" {
		return // a stage inside a stage (Validate called from a hook) shares its profile
	}
	p.stage = stage
	path := p.name("cpu", stage)
	if err := os.MkdirAll(p.cfg.Dir, 0o755); err != nil {
		p.errs = append(p.errs, err)
		return
	}
	f, err := os.Create(path)
	if err != nil {
		p.errs = append(p.errs, err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		p.errs = append(p.errs, fmt.Errorf("CPU profile of %s: %w", stage, err))
		return
	}
	p.cpu = f
}

func (p *Advanced) endStage(stage string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stage != stage {
		return
	}
	p.stage = ""
	if p.cpu != nil {
		pprof.StopCPUProfile()
		if err := p.cpu.Close(); err != nil {
			p.errs = append(p.errs, err)
		} else {
			p.files = append(p.files, p.cpu.Name())
		}
		p.cpu = nil
	}
	path := p.name("heap", stage)
	if err := os.MkdirAll(p.cfg.Dir, 0o755); err != nil {
		p.errs = append(p.errs, err)
		return
	}
	f, err := os.Create(path)
	if err != nil {
		p.errs = append(p.errs, err)
		return
	}
	runtime.GC() // the heap profile shows the state as of the last GC
	err = pprof.Lookup("heap").WriteTo(f, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("heap profile of %s: %w", stage, err))
		return
	}
	p.files = append(p.files, path)
}

// Files lists the profiles written so far.
func (p *Advanced) Files() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.files...)
}

// Report writes the Simple table and the profiles' names.
func (p *Advanced) Report(w io.Writer) error {
	if err := p.simple.Report(w); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.files {
		fmt.Fprintf(w, "pprof profile: %s\n", f)
	}
	if len(p.files) > 0 {
		fmt.Fprintf(w, "inspect with: go tool pprof -tagfocus 'action=forward+backward' %s\n", p.files[0])
	}
	return errors.Join(p.errs...)
}

// Close stops a CPU profile left running.
func (p *Advanced) Close() error {
	p.mu.Lock()
	stage := p.stage
	p.mu.Unlock()
	if stage != "" {
		p.endStage(stage)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.errs...)
}
