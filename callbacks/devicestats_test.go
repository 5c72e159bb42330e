package callbacks_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

func TestReadProcessSample(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process figures are read from /proc on Linux")
	}
	a, err := callbacks.ReadProcessSample()
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU and hold 64 MiB so both figures must move.
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x += i ^ int(buf[i%len(buf)])
	}
	b, err := callbacks.ReadProcessSample()
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(buf)
	if b.CPU <= a.CPU {
		t.Errorf("CPU time did not grow: %v then %v (x=%d)", a.CPU, b.CPU, x)
	}
	if b.RSS < a.RSS+32<<20 || b.PeakRSS < b.RSS {
		t.Errorf("RSS %d -> %d, peak %d: want RSS up by 32 MiB or more and peak >= RSS", a.RSS, b.RSS, b.PeakRSS)
	}
}

func TestDeviceStatsMonitorDecisions(t *testing.T) {
	ctx := context.Background()
	proc := &fakeProc{now: time.Unix(0, 0)}
	gpu := uint64(3 << 20)
	d, err := callbacks.NewDeviceStatsMonitor(callbacks.DeviceStatsConfig{
		EveryNSteps: 2, Sample: proc.Sample, Now: proc.Now, Dir: t.TempDir(),
		GPUMemory: func() (uint64, error) { return gpu, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	// Rank 1: samples and keeps figures but logs nothing (a State without
	// loggers would fail LogMetrics on rank 0).
	s := &trainer.State{Rank: 1, LogEveryNSteps: 50}
	if err := d.OnFitStart(ctx, s); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		step    int
		sampled bool
	}{{1, false}, {2, true}, {2, false} /* accumulation: same step */, {3, false}, {4, true}} {
		before := d.Last()
		s.GlobalStep = tc.step
		if err := d.OnTrainBatchEnd(ctx, s); err != nil {
			t.Fatalf("step %d: %v", tc.step, err)
		}
		after := d.Last()
		if changed := after != nil && (before == nil || after["rss_mb"] != before["rss_mb"]); changed != tc.sampled {
			t.Errorf("step %d: sampled = %v, want %v", tc.step, changed, tc.sampled)
		}
	}
	// Each sample is one fake second with 1.5 s of CPU time; fit start
	// took one, so step 2 saw 2 wall s for 3 CPU s: 150%.
	if got := d.Last(); got["cpu_pct"] != 150 || got["gpu_mem_mb"] != 3 || got["peak_rss_mb"] != 200 {
		t.Errorf("figures = %v, want cpu_pct 150, gpu_mem_mb 3, peak_rss_mb 200", got)
	}
	if err := d.OnFitEnd(ctx, s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(d.Config().Dir, "device_stats_rank1.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSpace(string(b)), "\n"); len(got) != 3 || got[0] != "step,epoch,cpu_pct,rss_mb,peak_rss_mb,gpu_mem_mb" || got[2] != "4,0,150,104,200,3" {
		t.Errorf("rank file = %q", got)
	}
	// Rank 0 logs through the trainer, which a bare State cannot do.
	s0 := &trainer.State{IsGlobalZero: true, GlobalStep: 6}
	if err := d.OnTrainBatchEnd(ctx, s0); err == nil {
		t.Error("rank 0 did not try to log")
	}
}

func TestDeviceStatsMonitorErrors(t *testing.T) {
	if _, err := callbacks.NewDeviceStatsMonitor(callbacks.DeviceStatsConfig{EveryNSteps: -1}); err == nil || !strings.Contains(err.Error(), "EveryNSteps is -1") {
		t.Errorf("err = %v, want EveryNSteps is -1", err)
	}
	broken := errors.New("no /proc here")
	_, err := callbacks.NewDeviceStatsMonitor(callbacks.DeviceStatsConfig{Sample: func() (callbacks.ProcessSample, error) { return callbacks.ProcessSample{}, broken }})
	if !errors.Is(err, broken) {
		t.Errorf("err = %v, want the sampler's error at construction", err)
	}
	proc := &fakeProc{}
	d, err := callbacks.NewDeviceStatsMonitor(callbacks.DeviceStatsConfig{EveryNSteps: 1, Sample: proc.Sample, Now: proc.Now,
		GPUMemory: func() (uint64, error) { return 0, errors.New("device lost") }})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.OnTrainBatchEnd(context.Background(), &trainer.State{GlobalStep: 1}); err == nil || !strings.Contains(err.Error(), "GPU memory: device lost") {
		t.Errorf("err = %v, want the GPU error named", err)
	}
}
