package callbacks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/trainer"
)

// ProcessSample is what the process has used so far.
type ProcessSample struct {
	// CPU is the user plus system CPU time of the whole process.
	CPU time.Duration
	// RSS is the resident memory now, PeakRSS its high-water mark, in
	// bytes; 0 when the system does not say.
	RSS, PeakRSS uint64
}

// DeviceStatsConfig configures a DeviceStatsMonitor.
type DeviceStatsConfig struct {
	// EveryNSteps samples every this many optimizer steps. 0: the
	// trainer's LogEveryNSteps.
	EveryNSteps int
	// Dir, when set, makes every rank append its figures to
	// Dir/device_stats_rank<R>.csv (the loggers see rank 0's only); Plots
	// draws them one line per rank. Give every rank the same Dir.
	Dir string
	// GPUMemory returns the device memory in use, in bytes, when the run
	// uses a GPU. nil: no GPU figure (the CPU build has no device memory).
	GPUMemory func() (uint64, error)
	// Sample reads the process's figures. nil: ReadProcessSample.
	Sample func() (ProcessSample, error)
	// Now is the clock. nil: time.Now.
	Now func() time.Time
}

// DeviceStatsMonitor logs this process's resource figures every N steps,
// as Lightning's DeviceStatsMonitor does: "cpu_pct" (CPU time over wall
// time since the last sample, in percent of one core, so a process busy on
// two cores shows 200), "rss_mb" and "peak_rss_mb" (resident memory,
// MiB), and "gpu_mem_mb" when GPUMemory is set. Rank 0 logs them through
// the trainer's loggers; callbacks.ProgressBar shows them when its Metrics
// name them and the trainer keeps callback-logged metrics in State.Metrics.
// Last returns the latest figures on every rank. The zero
// DeviceStatsMonitor (&callbacks.DeviceStatsMonitor{}) is
// NewDeviceStatsMonitor's with a zero DeviceStatsConfig, except that a
// process sample that fails is its OnFitStart's error, not a constructor's.
type DeviceStatsMonitor struct {
	cfg      DeviceStatsConfig
	prev     ProcessSample
	prevAt   time.Time
	lastStep int
	last     map[string]float64
	file     *os.File
	cols     []string
}

var (
	_ trainer.FitStartHook      = (*DeviceStatsMonitor)(nil)
	_ trainer.TrainBatchEndHook = (*DeviceStatsMonitor)(nil)
	_ trainer.StepEndStopper    = (*DeviceStatsMonitor)(nil)
	_ trainer.FitEndHook        = (*DeviceStatsMonitor)(nil)
)

// NewDeviceStatsMonitor validates cfg, takes a first sample (so a system
// that cannot be read fails here, not mid-run) and returns the callback.
func NewDeviceStatsMonitor(cfg DeviceStatsConfig) (*DeviceStatsMonitor, error) {
	if cfg.EveryNSteps < 0 {
		return nil, fmt.Errorf("DeviceStatsMonitor EveryNSteps is %d: use 0 (the trainer's LogEveryNSteps) or a positive number", cfg.EveryNSteps)
	}
	cfg.defaults()
	if _, err := cfg.Sample(); err != nil {
		return nil, fmt.Errorf("DeviceStatsMonitor: %w", err)
	}
	return &DeviceStatsMonitor{cfg: cfg, lastStep: -1}, nil
}

// defaults fills the zero Sample and Now.
func (c *DeviceStatsConfig) defaults() {
	if c.Sample == nil {
		c.Sample = ReadProcessSample
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (d *DeviceStatsMonitor) Name() string { return "DeviceStatsMonitor" }

// StopsAtStepEnd is false: it only samples and logs (trainer.StepEndStopper).
func (d *DeviceStatsMonitor) StopsAtStepEnd() bool { return false }

// Config returns the configuration, defaults filled in.
func (d *DeviceStatsMonitor) Config() DeviceStatsConfig {
	c := d.cfg
	c.defaults()
	return c
}

// Last returns the latest figures (nil before the first sample).
func (d *DeviceStatsMonitor) Last() map[string]float64 {
	if d.last == nil {
		return nil
	}
	out := make(map[string]float64, len(d.last))
	for k, v := range d.last {
		out[k] = v
	}
	return out
}

func (d *DeviceStatsMonitor) OnFitStart(ctx context.Context, s *trainer.State) error {
	d.cfg.defaults() // the zero DeviceStatsMonitor's (a struct literal's)
	var err error
	d.prev, err = d.cfg.Sample()
	d.prevAt, d.lastStep = d.cfg.Now(), s.GlobalStep
	if err != nil {
		return err
	}
	if d.cfg.Dir != "" {
		return d.openRankFile(s.Rank)
	}
	return nil
}

func (d *DeviceStatsMonitor) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	every := d.cfg.EveryNSteps
	if every == 0 {
		every = max(s.LogEveryNSteps, 1)
	}
	// With gradient accumulation several batches share a step: sample once.
	if s.GlobalStep == d.lastStep || s.GlobalStep%every != 0 {
		return nil
	}
	d.lastStep = s.GlobalStep
	cur, err := d.cfg.Sample()
	if err != nil {
		return err
	}
	now := d.cfg.Now()
	m := map[string]float64{}
	if wall := now.Sub(d.prevAt); wall > 0 {
		m["cpu_pct"] = 100 * float64(cur.CPU-d.prev.CPU) / float64(wall)
	}
	const mib = 1 << 20
	if cur.RSS > 0 {
		m["rss_mb"] = float64(cur.RSS) / mib
	}
	if cur.PeakRSS > 0 {
		m["peak_rss_mb"] = float64(cur.PeakRSS) / mib
	}
	if d.cfg.GPUMemory != nil {
		used, err := d.cfg.GPUMemory()
		if err != nil {
			return fmt.Errorf("GPU memory: %w", err)
		}
		m["gpu_mem_mb"] = float64(used) / mib
	}
	d.prev, d.prevAt, d.last = cur, now, m
	if d.file != nil {
		if err := d.writeRow(s, m); err != nil {
			return err
		}
	}
	if !s.IsGlobalZero || len(m) == 0 {
		return nil
	}
	logged := make(map[string]float64, len(m)+1)
	for k, v := range m {
		logged[k] = v
	}
	logged["epoch"] = float64(s.Epoch)
	return s.LogMetrics(logged)
}

func (d *DeviceStatsMonitor) OnFitEnd(ctx context.Context, s *trainer.State) error {
	if d.file == nil {
		return nil
	}
	err := d.file.Close()
	d.file = nil
	return err
}

// openRankFile opens Dir/device_stats_rank<R>.csv for appending (a resumed
// run goes on in the same file) with a header when it is new.
func (d *DeviceStatsMonitor) openRankFile(rank int) error {
	if d.file != nil {
		d.file.Close()
	}
	if err := os.MkdirAll(d.cfg.Dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(d.cfg.Dir, fmt.Sprintf("device_stats_rank%d.csv", rank))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	d.cols = []string{"step", "epoch", "cpu_pct", "rss_mb", "peak_rss_mb"}
	if d.cfg.GPUMemory != nil {
		d.cols = append(d.cols, "gpu_mem_mb")
	}
	if fi, err := f.Stat(); err == nil && fi.Size() == 0 {
		if _, err := f.WriteString(strings.Join(d.cols, ",") + "\n"); err != nil {
			f.Close()
			return err
		}
	}
	d.file = f
	return nil
}

func (d *DeviceStatsMonitor) writeRow(s *trainer.State, m map[string]float64) error {
	cells := make([]string, len(d.cols))
	for i, c := range d.cols {
		switch c {
		case "step":
			cells[i] = strconv.Itoa(s.GlobalStep)
		case "epoch":
			cells[i] = strconv.Itoa(s.Epoch)
		default:
			if v, ok := m[c]; ok {
				cells[i] = FormatValue(v)
			}
		}
	}
	_, err := d.file.WriteString(strings.Join(cells, ",") + "\n")
	return err
}

var errNoProcStats = errors.New("process CPU and memory figures are read from /proc on Linux only: set DeviceStatsConfig.Sample on this system")
